"""Envelopes out of log files: plain, gzip or stdin, merged in time order.

A log is mostly other text, so lines are found with a bytes search over large blocks (the test
id when there is one, else the ``CVDIAG {`` marker) and only the lines that contain it are
decoded and parsed. Memory is one block per input plus what the caller keeps.

**Which lines are envelopes.** A line holds an envelope when ``CVDIAG {`` starts it, or follows
one of the prefixes log collectors add, and nothing else: a docker compose service label
(``web-1  | ``, coloured or not), an RFC 3339 timestamp (``docker logs -t``, ``kubectl logs
--timestamps``, CI runners), or a Kubernetes CRI line head (``<timestamp> stdout F ``), in that
order, each optional. The rest of the line, trailing whitespace aside, must be one JSON object.
A ``CVDIAG {`` anywhere else in a line (glued after a host's own text, quoted in another log
record, forged inside a client-supplied string) is never read as an envelope and never dropped
silently: it is reported to the caller as *set aside*.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gzip
import heapq
import io
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import IO, Any, Final

import orjson

MARKER: Final = b"CVDIAG {"
STDIN: Final = "-"
#: Bytes read from an input at a time.
BLOCK: Final = 1 << 20
#: A line longer than this is skipped (and reported when it holds the marker): envelopes are at
#: most 16 KiB, and a line without an end must not make the reader hold the whole input.
MAX_LINE: Final = 1 << 20

_ANSI: Final = rb"(?:\x1b\[[0-9;]*m)*"
_STAMP: Final = rb"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:[Zz]|[+-]\d\d:?\d\d)?"
#: The recognised collector prefixes (see the module docstring), anchored at the line's start.
_COLLECTOR: Final = re.compile(
    _ANSI
    + rb"(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,127}[ \t]*"
    + _ANSI
    + rb"\|[ \t]?)?"
    + _ANSI
    + rb"(?:"
    + _STAMP
    + rb"(?: (?:stdout|stderr) [FP])? )?"
    + _ANSI
    + rb"CVDIAG \{"
)
_CANONICAL_TS: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


class InputError(Exception):
    """An input that cannot be read: missing, unreadable, or a damaged gzip stream."""


@dataclasses.dataclass(frozen=True, slots=True)
class Malformed:
    """A line that looks like an envelope but is not one, or holds one where none may stand."""

    source: str
    lineno: int
    reason: str
    #: ``CVDIAG {`` after other text: not malformed, but not read either (see the docstring).
    set_aside: bool = False
    #: ``lineno`` is a byte offset (an input read without line numbers).
    offset: bool = False

    @property
    def where(self) -> str:
        return (
            f"{self.source} byte {self.lineno}" if self.offset else f"{self.source}:{self.lineno}"
        )

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One envelope as read: where it was, its JSON text as written, and the parsed object."""

    source: str
    lineno: int
    text: bytes
    envelope: dict[str, Any]
    #: Merge order: UTC time (as a sortable string), then ``mono_ns``.
    key: tuple[str, int]

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


OnMalformed = Callable[[Malformed], None]


# --- time -----------------------------------------------------------------------------------


def ts_key(value: str) -> str | None:
    """``value`` as a sortable UTC string with microseconds, or None when it is not a date-time.

    cvdiag writes ``YYYY-MM-DDTHH:MM:SS.mmmZ``, which takes the fast path; other ISO-8601 forms
    (offsets, other fractions) are converted, and a time without an offset is taken as UTC.
    """
    if _CANONICAL_TS.fullmatch(value):
        return value[:23] + "000Z"
    parsed = parse_time(value)
    return None if parsed is None else format_key(parsed)


def parse_time(value: str) -> datetime.datetime | None:
    """An aware UTC datetime from an ISO-8601 date or date-time, or None."""
    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.astimezone(datetime.timezone.utc)


def format_key(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def key_millis(key: str) -> float:
    """Milliseconds since the epoch of a ``ts_key`` string."""
    moment = datetime.datetime.strptime(key, "%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000.0


# --- inputs ---------------------------------------------------------------------------------


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
            self.stream = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]

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
            raise InputError(f"cannot read {self.name}: {_reason(exc)}") from None
        if self.on_read is not None:
            self.position = (
                self._raw.tell() if self.stream is not self._raw else (self.position + len(data))
            )
            self.on_read(self.position)
        return data

    def size(self) -> int | None:
        """The file's size in bytes, or None for a pipe."""
        try:
            info = os.fstat(self._raw.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return None
        return info.st_size if info.st_size > 0 and not _is_fifo(info.st_mode) else None


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


# --- lines ----------------------------------------------------------------------------------


def candidate_lines(source: Input, needle: bytes) -> Iterator[tuple[int, bytes | None]]:
    """``(position, line)`` for each line containing ``needle``, without its newline.

    The position is the line's number, or, when the input is not ``numbered``, the byte offset
    of its start: counting newlines is half the cost of a search for a rare test id, and
    ``grep``, ``stats`` and ``ls`` never show where an envelope was.
    ``None`` stands for a line over ``MAX_LINE`` bytes that holds the marker: it is skipped.
    Whole blocks are searched with ``bytes.find`` (and newlines counted with ``bytes.count``),
    so lines without the needle cost no Python-level work at all.
    """
    numbered = source.numbered
    lineno = 1  # the number of the line that starts at buf[0]
    base = 0  # the byte offset of buf[0]
    consumed = 0  # bytes read so far
    buf = b""
    skipping = False  # inside an overlong line: drop bytes until its end
    final = False
    while not final:
        data = source.read(BLOCK)
        data_start = consumed
        consumed += len(data)
        if not data:
            if skipping or not buf:
                return
            final = True
            buf += b"\n"  # the last line may lack its newline
        elif skipping:
            end = data.find(b"\n")
            if end < 0:
                continue
            skipping = False
            lineno += 1
            buf = data[end + 1 :]
            base = data_start + end + 1
        elif buf:
            buf += data
        else:
            buf = data
            base = data_start
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            if len(buf) > MAX_LINE:
                if MARKER in buf:
                    yield (lineno if numbered else base), None
                buf = b""
                skipping = True
            continue
        counted = 0  # newlines before this offset are already in ``lineno``
        pos = buf.find(needle, 0, cut)
        while pos >= 0:
            start = buf.rfind(b"\n", 0, pos) + 1
            end = buf.find(b"\n", pos, cut)
            if numbered:
                lineno += buf.count(b"\n", counted, start)
                counted = start
            where = lineno if numbered else base + start
            if end - start <= MAX_LINE:
                yield where, buf[start:end]
            elif MARKER in buf[start:end]:
                yield where, None
            pos = buf.find(needle, end + 1, cut)
        if numbered:
            lineno += buf.count(b"\n", counted, cut)
        base += cut
        buf = buf[cut:]


SET_ASIDE: Final = "CVDIAG { after other text (not a recognised log-collector prefix): set aside"


def split_envelope(line: bytes) -> tuple[bytes | None, bool]:
    """``(JSON part, set aside)`` of a line: the envelope's JSON when the line holds one where
    an envelope may stand, else None, with ``True`` when ``CVDIAG {`` stood anywhere else."""
    if line.startswith(MARKER):
        return line[len(MARKER) - 1 :].rstrip(), False
    found = _COLLECTOR.match(line)
    if found is None:
        return None, MARKER in line
    return line[found.end() - 1 :].rstrip(), False


def envelope_text(line: bytes) -> bytes | None:
    """The JSON part of an envelope line (see the module docstring for the rule), or None."""
    return split_envelope(line)[0]


def parsed_lines(
    source: Input, on_malformed: OnMalformed, *, needle: bytes = MARKER
) -> Iterator[tuple[int, bytes, Any]]:
    """``(line number, JSON text, parsed value)`` for each envelope line holding ``needle``.

    Lines whose JSON does not parse are reported to ``on_malformed`` and skipped.
    """
    name = source.name
    loads = orjson.loads
    offset = not source.numbered
    for lineno, line in candidate_lines(source, needle):
        if line is None:
            too_long = f"line longer than {MAX_LINE} bytes, skipped"
            on_malformed(Malformed(name, lineno, too_long, offset=offset))
            continue
        text, aside = split_envelope(line)
        if text is None:
            if aside:
                on_malformed(Malformed(name, lineno, SET_ASIDE, set_aside=True, offset=offset))
            continue
        try:
            value = loads(text)
        except orjson.JSONDecodeError as exc:
            on_malformed(Malformed(name, lineno, f"invalid JSON: {exc}", offset=offset))
            continue
        yield lineno, text, value


# --- envelopes ------------------------------------------------------------------------------

#: The fields the analyses read, with the types they need. ``cvdiag validate`` checks the whole
#: schema; reading asks only for what the commands use, so a log from a newer writer still reads.
_STRING_FIELDS: Final = ("test_id", "boundary", "span_id", "slug", "outcome", "ts")
_OBJECT_FIELDS: Final = ("metadata", "edge_headers")


def shape_problem(value: Any) -> str | None:
    """Why ``value`` cannot be analysed as an envelope, or None when it can."""
    if not isinstance(value, dict):
        return f"not a JSON object but {_json_type(value)}"
    for key in _STRING_FIELDS:
        if not isinstance(value.get(key), str):
            return _field_problem(value, key, "a string")
    for key in _OBJECT_FIELDS:
        if not isinstance(value.get(key), dict):
            return _field_problem(value, key, "an object")
    mono = value.get("mono_ns")
    if type(mono) is not int:
        return _field_problem(value, "mono_ns", "an integer")
    parent = value.get("parent_span_id", 0)
    if parent is not None and not isinstance(parent, str):
        return _field_problem(value, "parent_span_id", "a string or null")
    duration = value.get("duration_ms", 0)
    if duration is not None and type(duration) not in (int, float):
        return _field_problem(value, "duration_ms", "a number or null")
    return None


def _field_problem(value: dict[str, Any], key: str, expected: str) -> str:
    if key not in value:
        return f"missing field {key!r}"
    return f"field {key!r} is {_json_type(value[key])}, expected {expected}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _ids(test_id: str | Iterable[str] | None) -> frozenset[str] | None:
    if test_id is None:
        return None
    return frozenset([test_id] if isinstance(test_id, str) else test_id) or None


def records(
    source: Input, on_malformed: OnMalformed, *, test_id: str | Iterable[str] | None = None
) -> Iterator[Record]:
    """The envelopes of one input in file order; only those of ``test_id`` (one id, or any of
    several) when given. One id is searched for as bytes, so other lines cost nearly nothing."""
    ids = _ids(test_id)
    needle = next(iter(ids)).encode() if ids is not None and len(ids) == 1 else MARKER
    name = source.name
    for lineno, text, value in parsed_lines(source, on_malformed, needle=needle):
        problem = shape_problem(value)
        if problem is None:
            key = ts_key(value["ts"])
            if key is None:
                problem = f"field 'ts' is not an ISO-8601 date-time: {value['ts'][:40]!r}"
        if problem is not None:
            on_malformed(Malformed(name, lineno, problem, offset=not source.numbered))
            continue
        if ids is not None and value["test_id"] not in ids:
            continue
        yield Record(name, lineno, text, value, (key, value["mono_ns"]))  # type: ignore[arg-type]


def merged(
    sources: Iterable[Input],
    on_malformed: OnMalformed,
    *,
    test_id: str | Iterable[str] | None = None,
) -> Iterator[Record]:
    """The envelopes of all inputs, merged by time (ts, then mono_ns).

    Each input is taken to be in the order it was written (a process writes its envelopes in
    emit order), so the inputs are merged lazily rather than sorted: memory is one pending
    envelope per input.
    """
    streams = [records(source, on_malformed, test_id=test_id) for source in sources]
    if len(streams) == 1:
        return streams[0]
    return heapq.merge(*streams, key=_order)


def _order(record: Record) -> tuple[str, int]:
    return record.key
