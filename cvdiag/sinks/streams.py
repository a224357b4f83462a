"""The queued sinks that write somewhere: stdout (the default) and a file."""

from __future__ import annotations

import os
import re
import stat
import sys
from typing import IO, Any

from cvdiag.core.guard import record_failure
from cvdiag.sinks import host_stdout
from cvdiag.sinks.descriptor import (
    PIPE_BUF,
    close_descriptor,
    cut_at,
    own_descriptor,
    stream_limit,
    write_all,
)
from cvdiag.sinks.losses import Abandoned
from cvdiag.sinks.queued import QueuedLineSink

#: Outside strings orjson writes only ASCII, so escaping these keeps every line valid JSON.
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # outside the BMP: a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class StdoutSink(QueuedLineSink):
    """The default sink. ``sys.stdout`` is looked up at write time, so redirection still works
    (but not into a logger: Celery's ``LoggingProxy`` is passed over for the process's own
    stdout, cvdiag/sinks/host_stdout.py).

    Where ``sys.stdout`` is an unbuffered or line-buffered pipe, terminal or file, lines go to a
    descriptor of cvdiag's own for it (see cvdiag/sinks/descriptor.py), written from the event loop
    without blocking or from the writer thread; otherwise (block-buffered, a ``StringIO``,
    pytest's capture) through ``sys.stdout``, from the writer thread.
    """

    def __init__(self, *, queue_size: int = 5000) -> None:
        super().__init__(queue_size=queue_size)
        self._stream: object = None
        self._fd: int | None = None
        self._limit_of: tuple[object, int | None] = (None, None)
        host_stdout.want()

    def atomic_limit(self) -> int | None:
        stream = host_stdout.target()[0]
        seen, limit = self._limit_of
        if stream is not seen:  # asked once per stdout object, not per batch
            limit = stream_limit(stream)
            self._limit_of = (stream, limit)
        return limit

    def _loop_descriptor(self) -> int | None:
        key = sys.stdout  # what ``host_stdout.target`` resolves by
        stream, per_line = host_stdout.target()
        if per_line:
            return None  # a logger's proxy: the thread writes it, one record per line
        if stream is not self._stream:  # resolved once per stdout object, not per line
            if not self._write_lock.acquire(blocking=False):
                return None  # the thread is writing: it takes this line too
            try:
                self._resolve(stream)
            finally:
                self._write_lock.release()
        # The lane asks again only when ``sys.stdout`` is another object (sinks/lane.py).
        self._lane.known(key, self._fd)
        return self._fd

    def _resolve(self, stream: object) -> None:
        """Open the descriptor of cvdiag's own for ``stream`` (under the write lock)."""
        self._lane.known(None, None)  # the lane's descriptor may be the one closed here
        close_descriptor(self._fd)
        self._fd = own_descriptor(stream) if _whole_lines(stream) else None
        self._stream = stream

    def _write_bytes(self, data: bytes) -> None:
        stream, per_line = host_stdout.target()
        if stream is None:
            raise OSError("sys.stdout is None")
        if per_line:  # a logger's proxy: one record per line, each with the logger's prefix
            self._write_records(stream, data)
            return
        limit = self.atomic_limit()
        if stream is not self._stream:  # the thread too writes on the descriptor of its own,
            self._resolve(stream)  # where it can wait for room and give up at the bound
        if self._fd is not None:
            done = write_all(self._fd, data, limit, stopped=self._stopped)
            if done < len(data):
                raise Abandoned(data[done:])
            return
        if limit is None:  # a regular file (or no descriptor): the batch in one write
            self._inflight = data
            _write_text(stream, data)
        else:
            # Through the host's stream: what it holds first, then each piece flushed alone,
            # so that every write(2) the stream makes carries whole lines within the limit.
            stream.flush()
            view, at = memoryview(data), 0
            for piece in cut_at(data, limit):
                self._inflight = view[at:]  # what abandon counts if this write never returns
                at += len(piece)
                _write_text(stream, piece)
        self._inflight = b""

    def _write_records(self, stream: Any, data: bytes) -> None:
        view, at = memoryview(data), 0
        for line in data.splitlines(keepends=True):
            self._inflight = view[at:]
            at += len(line)
            _write_text(stream, line)
        self._inflight = b""


def _write_text(stream: Any, data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        stream.write(text)
    except UnicodeEncodeError:
        # A stdout that cannot encode every character (PYTHONIOENCODING=ascii, a latin-1
        # console) would lose the whole batch over one accented name: write JSON's own
        # \\uXXXX escapes instead, which every encoding can carry.
        stream.write(_NON_ASCII.sub(_json_escape, text))
    stream.flush()


def _path_limit(path: str) -> int | None:
    """``PIPE_BUF`` for a path that exists and is not a regular file, else None."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # not there yet: a regular file is about to be made
        return None
    return None if regular else PIPE_BUF


def _whole_lines(stream: Any) -> bool:
    """Whether the host's own writes reach the descriptor as whole lines: unbuffered
    (``PYTHONUNBUFFERED=1``, as most container images set) or line-buffered (a terminal).
    A block-buffered stdout flushes mid-line, and a line of ours written beside it, rather
    than through the same buffer, would be glued to the host's half line."""
    try:
        return bool(getattr(stream, "write_through", False) or stream.line_buffering)
    except Exception:  # no such attribute, or a closed stream refusing to answer
        return False


class FileSink(QueuedLineSink):
    """Appends ``CVDIAG {json}`` lines to a file (created if missing)."""

    def __init__(self, path: str | os.PathLike[str], *, queue_size: int = 5000) -> None:
        super().__init__(queue_size=queue_size)
        self.path = os.fspath(path)
        self._file: IO[bytes] | None = None
        #: Known before the first write, so that the emitter's cap fits a named pipe (a path
        #: such as /dev/stdout); asked again of the file once it is open.
        self._limit: int | None = _path_limit(self.path)

    def atomic_limit(self) -> int | None:
        return self._limit  # a regular file's None, or PIPE_BUF for a named pipe

    def _write_bytes(self, data: bytes) -> None:
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for the sink's life
            self._limit = stream_limit(self._file)
        try:
            for piece in cut_at(data, self._limit):
                self._file.write(piece)
                self._file.flush()
        except BaseException:
            # The batch is lost (and counted); let the next one reopen the file, which heals a
            # descriptor closed or a disk filled under us.
            self._close_file()
            raise

    def _close_file(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()  # flushes: may fail like the writes did; it is closed regardless
            except Exception as exc:
                record_failure("sink", exc)

    def close(self) -> None:
        super().close()
        self._close_file()
