"""Envelopes out of log files: plain, gzip or stdin, merged in time order.

A log is mostly other text, so lines are found with a bytes search over large blocks (the test
id when there is one, else the ``CVDIAG {`` marker) and only the lines that contain it are
decoded and parsed. Memory is one block per input plus what the caller keeps.

**Which lines are envelopes.** A line holds an envelope when ``CVDIAG {`` starts it, or follows
one of the prefixes log collectors add, and nothing else: a docker compose service label
(``web-1  | ``, coloured or not), an RFC 3339 timestamp (``docker logs -t``, ``kubectl logs
--timestamps``, CI runners), a Kubernetes CRI line head (``<timestamp> stdout F ``), or the head
Celery's default log format gives a record (``[2026-12-07 16:08:02,550: WARNING/ForkPoolWorker-2]
``: an envelope a worker wrote through Celery's stdout proxy, one record per line), in that
order, each optional. The rest of the line, trailing whitespace aside, must be one JSON object.
A ``CVDIAG {`` anywhere else in a line (glued after a host's own text, quoted in another log
record, forged inside a client-supplied string) is never read as an envelope and never dropped
silently: it is reported to the caller as *set aside*. A CRI line the runtime split into
``P`` parts and an ``F`` is joined back first (``cvdiag.logs.partial``), at its first part.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import re
from collections.abc import Callable, Iterable, Iterator

import orjson

# Re-exported (inputs, times): they were part of this module, and callers import them from here.
from cvdiag.logs.inputs import STDIN, Input, InputError, Inputs
from cvdiag.logs.partial import joined_blocks, may_continue
from cvdiag.logs.shape import shape_problem
from cvdiag.logs.times import CANONICAL_TS, format_key, key_millis, parse_time, ts_key

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = [
    "BLOCK",
    "MARKER",
    "MAX_LINE",
    "SET_ASIDE",
    "STDIN",
    "Input",
    "InputError",
    "Inputs",
    "Malformed",
    "OnMalformed",
    "Record",
    "candidate_lines",
    "envelope_text",
    "format_key",
    "key_millis",
    "merged",
    "parse_time",
    "parsed_lines",
    "records",
    "split_envelope",
    "ts_key",
]

MARKER: Final = b"CVDIAG {"
#: Bytes read from an input at a time.
BLOCK: Final = 1 << 20
#: A line longer than this is skipped (and reported when it holds the marker): envelopes are at
#: most 16 KiB, and a line without an end must not make the reader hold the whole input.
MAX_LINE: Final = 1 << 20

_ANSI: Final = rb"(?:\x1b\[[0-9;]*m)*"
_STAMP: Final = rb"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:[Zz]|[+-]\d\d:?\d\d)?"
#: The recognised collector prefixes (see the module docstring), anchored at the line's start.
#: Compiled when first needed (a third of this module's import time, and an envelope line
#: without a prefix never needs it): see ``_collector``.
_COLLECTOR_PATTERN: Final = (
    _ANSI
    + rb"(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,127}[ \t]*"
    + _ANSI
    + rb"\|[ \t]?)?"
    + _ANSI
    + rb"(?:"
    + _STAMP
    + rb"(?: (?:stdout|stderr) [FP])? )?"
    + _ANSI
    + rb"(?:\["
    + _STAMP
    + rb": [A-Z]{1,10}/[A-Za-z0-9_.-]{1,64}\] )?"
    + _ANSI
    + rb"CVDIAG \{"
)


@functools.cache
def _collector() -> re.Pattern[bytes]:
    return re.compile(_COLLECTOR_PATTERN)


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


# Not frozen: a frozen dataclass's __init__ costs a microsecond, paid for every envelope read.
@dataclasses.dataclass(slots=True)
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


# --- lines ----------------------------------------------------------------------------------


def candidate_lines(source: Input, needle: bytes) -> Iterator[tuple[int, bytes | None]]:
    """``(position, line)`` for each line containing ``needle``, without its newline.

    The position is the line's number, or, when the input is not ``numbered``, the byte offset
    of its start: counting newlines costs as much as the search for a rare test id, and
    ``grep``, ``stats`` and ``ls`` never show where an envelope was.
    ``None`` stands for a line over ``MAX_LINE`` bytes that holds the marker: it is skipped.

    Each block is searched in place with ``bytes.find``; line ends are looked for only around a
    hit, and blocks are never joined: only the partial line at a block's end is carried into
    the next, so lines without the needle cost no Python-level work at all.
    """
    block, max_line = BLOCK, MAX_LINE  # read at call time: the tests shrink them
    numbered = source.numbered
    # A test id in a plain file read with byte offsets: threads and memmem (see ``search``).
    # Not the marker: it is on every envelope line, so the time goes to the work per line,
    # which this loop does with less overhead than the search's threads (measured: a third
    # less on a 301 MB log).
    rare = needle and needle != MARKER and b"\n" not in needle
    fd = source.descriptor() if rare and not numbered else None
    if fd is not None:
        from cvdiag.logs import search

        if search.USABLE:
            # A hit in a CRI line that may be one part of a longer line (see
            # ``cvdiag.logs.partial``; the needle may even be in a later part only) sends
            # the rest of the file to the block reader, which joins the parts: the lines
            # yielded so far all start before that line's run.
            last = -1
            try:
                for position, line in search.lines_with(
                    fd, needle, max_line=max_line, marker=MARKER, on_read=_told(source)
                ):
                    if line is not None and may_continue(line):
                        break
                    last = position
                    yield position, line
                else:
                    return
            except OSError as exc:  # as ``Input.read`` words it
                raise source.failed(exc) from None
            for found in _blocks(source, needle, block, max_line):
                if found[0] > last:
                    yield found
            return
    yield from _blocks(source, needle, block, max_line)


def _blocks(
    source: Input, needle: bytes, block: int, max_line: int
) -> Iterator[tuple[int, bytes | None]]:
    """``candidate_lines`` read block by block, CRI partial lines joined."""
    numbered = source.numbered
    width = len(needle)
    lineno = 1  # the number of the line that starts at ``at`` (or of the carried ``tail``)
    tail = b""  # the partial line carried from earlier blocks
    tail_at = 0  # the byte offset of its start
    skipping = False  # inside an overlong line, already reported: drop bytes until its end
    at = 0  # the byte offset of ``data[0]``
    for data in joined_blocks(source.read, block, max_line):
        size = len(data)
        first = data.find(b"\n")
        if first < 0:  # no line ends in this block: it all belongs to the carried line
            if not skipping:
                tail += data
                if len(tail) > max_line:
                    if needle in tail and MARKER in tail:
                        yield (lineno if numbered else tail_at), None
                    tail, skipping = b"", True
            at += size
            continue
        start = 0
        if tail or skipping:
            # The line begun in earlier blocks ends here: join just that one line.
            if not skipping:
                line = tail + data[:first]
                if needle in line:
                    if len(line) <= max_line:
                        yield (lineno if numbered else tail_at), line
                    elif MARKER in line:
                        yield (lineno if numbered else tail_at), None
            lineno += 1
            tail, skipping = b"", False
            start = first + 1
        cut = data.rfind(b"\n") + 1
        counted = start  # newlines before this offset are already in ``lineno``
        pos = data.find(needle, start, cut) if cut - start >= width else -1
        while pos >= 0:
            begin = data.rfind(b"\n", start, pos) + 1 or start
            end = data.find(b"\n", pos, cut)
            if numbered:
                lineno += data.count(b"\n", counted, begin)
                counted = begin
            where = lineno if numbered else at + begin
            if end - begin <= max_line:
                yield where, data[begin:end]
            elif MARKER in data[begin:end]:
                yield where, None
            pos = data.find(needle, end + 1, cut)
        if numbered:
            lineno += data.count(b"\n", counted, cut)
        tail_at = at + cut
        if cut < size:
            tail = data[cut:]
            if len(tail) > max_line:
                if needle in tail and MARKER in tail:
                    yield (lineno if numbered else tail_at), None
                tail, skipping = b"", True
        at += size
    if tail and not skipping and needle in tail:  # the last line may lack its newline
        yield (lineno if numbered else tail_at), tail


def _told(source: Input) -> Callable[[int], None] | None:
    """``source.on_read`` fed as ``Input.read`` feeds it, for a read that bypasses it."""
    told = source.on_read
    if told is None:
        return None

    def seen(position: int) -> None:
        source.position = position
        told(position)

    return seen


SET_ASIDE: Final = "CVDIAG { after other text (not a recognised log-collector prefix): set aside"


def split_envelope(line: bytes) -> tuple[bytes | None, bool]:
    """``(JSON part, set aside)`` of a line: the envelope's JSON when the line holds one where
    an envelope may stand, else None, with ``True`` when ``CVDIAG {`` stood anywhere else."""
    if line.startswith(MARKER):
        return line[len(MARKER) - 1 :].rstrip(), False
    found = _collector().match(line)
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
        if line.startswith(MARKER):  # the common case, without a call
            text: bytes | None = line[7:].rstrip()
            aside = False
        else:
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


def written_as_is(test_id: str) -> bool:
    """Whether every JSON writer puts ``test_id`` in a line as its own bytes: printable ASCII
    but the quote and the backslash. Any other character may be written as an escape
    (``\\u001b``, ``\\"``, ``\\u00e9``), which a search for the id's bytes would never find."""
    return test_id.isascii() and test_id.isprintable() and not any(c in test_id for c in '"\\/')


def _ids(test_id: str | Iterable[str] | None) -> frozenset[str] | None:
    if test_id is None:
        return None
    return frozenset([test_id] if isinstance(test_id, str) else test_id) or None


def records(
    source: Input,
    on_malformed: OnMalformed,
    *,
    test_id: str | Iterable[str] | None = None,
    needle: bytes | None = None,
) -> Iterator[Record]:
    """The envelopes of one input in file order; only those of ``test_id`` (one id, or any of
    several) when given. One id is searched for as bytes, so other lines cost nearly nothing;
    ``needle``, when given, is searched for instead (only lines holding it are read)."""
    ids = _ids(test_id)
    if needle is None:
        one = next(iter(ids)) if ids is not None and len(ids) == 1 else None
        needle = one.encode() if one is not None and written_as_is(one) else MARKER
    name = source.name
    canonical = CANONICAL_TS.fullmatch
    for lineno, text, value in parsed_lines(source, on_malformed, needle=needle):
        problem = shape_problem(value)
        if problem is None:
            ts = value["ts"]
            # ``ts_key``'s fast path, inlined: it is paid for every envelope.
            key = ts[:23] + "000Z" if canonical(ts) else ts_key(ts)
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
