"""Log inputs: plain files, gzip (recognised by its magic bytes) and stdin, opened up front."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import zlib
from collections.abc import Callable, Sequence
from types import TracebackType

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import IO, Final

STDIN: Final = "-"
#: Bytes of a file's start looked at to tell a log from binary data (``looks_binary``).
BINARY_SAMPLE: Final = 8192
#: Control characters a text log never holds: the C0 controls but NUL, backspace, tab, line
#: feed, vertical tab, form feed, carriage return and ESC (colour codes); and DEL.
_NOT_TEXT: Final = bytes([*range(1, 8), *range(14, 27), *range(28, 32), 0x7F])
#: A sample this long is judged on its control characters alone (``looks_binary``).
_SURE: Final = 512


class InputError(Exception):
    """An input that cannot be read: missing, unreadable, or a damaged gzip stream."""


class Input:
    """One named input, opened; gzip is recognised by its magic bytes, whatever the name."""

    def __init__(self, name: str, stream: IO[bytes]) -> None:
        self.name = "<stdin>" if name == STDIN else name
        self._raw = stream
        self.stream: IO[bytes] = stream
        #: Called with the bytes read so far (of the file itself: compressed for gzip).
        self.on_read: Callable[[int], None] | None = None
        #: Whether positions are line numbers (else byte offsets: see ``candidate_lines``).
        self.numbered = True
        self.position = 0
        head = _peek(stream, 2)
        if head == b"\x1f\x8b":
            import gzip  # here: most logs are plain, and every command pays for its imports

            self.stream = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
        self._journal()

    def _journal(self) -> None:
        """A CopilotKit aimock journal (a JSON array, ``cvdiag.logs.aimock``) is read as the
        ``aimock.*`` lines of its entries, never skipped as a log without envelopes."""
        try:
            head = _peek(self.stream, BINARY_SAMPLE)
        except (OSError, EOFError, zlib.error):
            return  # a damaged stream: its read says so
        if head.lstrip()[:1] != b"[":
            return
        from cvdiag.logs import aimock  # here: only a file starting with "[" pays for it

        if not aimock.looks_like_journal(head):
            return
        try:
            data = self.stream.read(aimock.MAX_JOURNAL + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise self.failed(exc) from None
        if len(data) > aimock.MAX_JOURNAL:
            raise InputError(
                f"cannot read {self.name}: an aimock journal over {aimock.MAX_JOURNAL >> 20} MiB"
            )
        lines = aimock.journal_lines(data)
        self.stream = io.BytesIO(data if lines is None else lines)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.stream is not self._raw:
                self.stream.close()
            if self._raw is not _stdin():
                self._raw.close()

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes without waiting for more than is there (stdin may be a pipe)."""
        try:
            read1 = getattr(self.stream, "read1", None)
            data: bytes = read1(size) if read1 is not None else self.stream.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise self.failed(exc) from None
        if self.on_read is not None:
            self.position = (
                self._raw.tell() if self.stream is not self._raw else (self.position + len(data))
            )
            self.on_read(self.position)
        return data

    def binary(self) -> bool:
        """Whether the input's first block (decompressed) is binary data (``looks_binary``)."""
        try:
            return looks_binary(_peek(self.stream, BINARY_SAMPLE))
        except (OSError, EOFError, zlib.error):
            return False  # a damaged stream: its read says so

    def size(self) -> int | None:
        """The file's size in bytes, or None for a pipe."""
        try:
            info = os.fstat(self._raw.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return None
        return info.st_size if info.st_size > 0 and not _is_fifo(info.st_mode) else None

    def failed(self, exc: BaseException) -> InputError:
        """The error to raise for a failed read of this input."""
        return InputError(f"cannot read {self.name}: {_reason(exc)}")

    def descriptor(self) -> int | None:
        """The descriptor of a named, uncompressed regular file, which can be read at any
        offset (``pread``: in ranges, or searched by threads); else None: stdin, a pipe, a
        device or gzip are read as a stream."""
        if self.stream is not self._raw or not self.rereadable:
            return None
        try:
            return self._raw.fileno()
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return None

    @property
    def rereadable(self) -> bool:
        """Whether opening the name again reads the same bytes: a regular file, not stdin."""
        if self.name == "<stdin>":
            return False
        try:
            return stat.S_ISREG(os.fstat(self._raw.fileno()).st_mode)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return False


def looks_binary(head: bytes) -> bool:
    """Whether a file's first block is binary data, not a log: NUL bytes aside, more than one
    byte in 20 is a control character no text holds. Every binary format tried (ELF, PNG, JPEG,
    PDF, SQLite, bytecode, random bytes) has 9% or more, a log almost none. NUL bytes alone say
    nothing: a log truncated under a writer that kept its offset (``copytruncate``, a plain
    ``>`` redirection) starts with a run of them and is still a log. Under ``_SURE`` bytes, a
    NUL byte must be there too: a short line setting a terminal's title (ESC ] ... BEL) is
    text."""
    text = head.replace(b"\0", b"")
    strange = len(text) - len(text.translate(None, _NOT_TEXT))
    return strange * 20 > len(text) and (len(head) >= _SURE or len(text) < len(head))


def _is_fifo(mode: int) -> bool:
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


def _stdin() -> IO[bytes]:
    return sys.stdin.buffer


def _peek(stream: IO[bytes], size: int) -> bytes:
    peek = getattr(stream, "peek", None)
    if peek is not None:
        data: bytes = peek(size)
        return data[:size]
    if stream.seekable():
        position = stream.tell()
        data = stream.read(size)
        stream.seek(position)
        return data
    return b""  # an unpeekable, unseekable stream is read as plain text


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower() if exc.strerror[:1].isupper() else exc.strerror
    if isinstance(exc, EOFError):
        return "the gzip stream ends early (truncated file?)"
    return str(exc) or type(exc).__name__


class Inputs:
    """Every named input opened up front, so a missing file fails before any output."""

    def __init__(self, names: Sequence[str]) -> None:
        if list(names).count(STDIN) > 1:
            raise InputError("stdin ('-') can be read only once")
        self.inputs: list[Input] = []
        try:
            for name in names:
                self.inputs.append(_open(name))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for item in self.inputs:
            item.close()

    def watch(self, on_progress: Callable[[int, int | None], None]) -> None:
        """Report ``(bytes read, total size or None)`` over all inputs, as they are read."""
        sizes = [item.size() for item in self.inputs]
        total = None if any(size is None for size in sizes) else sum(s or 0 for s in sizes)
        done = [0] * len(self.inputs)

        def make(index: int) -> Callable[[int], None]:
            def seen(position: int) -> None:
                done[index] = position
                on_progress(sum(done), total)

            return seen

        for index, item in enumerate(self.inputs):
            item.on_read = make(index)

    def __enter__(self) -> list[Input]:
        return self.inputs

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _open(name: str) -> Input:
    try:
        if name == STDIN:
            stdin = _stdin()
            if not hasattr(stdin, "peek"):
                stdin = io.BufferedReader(stdin)  # type: ignore[type-var]
            return Input(name, stdin)
        if os.path.isdir(name):
            raise InputError(f"cannot read {name}: is a directory")
        return Input(name, open(name, "rb"))
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read {name}: {_reason(exc)}") from None
