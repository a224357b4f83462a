"""Kubernetes CRI partial lines joined back into the line the process wrote.

The CRI log format (containerd, CRI-O) writes each line as ``<RFC 3339 time> <stdout|stderr>
<P|F> <content>``, and a line longer than 16 KiB of content as parts tagged ``P`` followed by a
final ``F``; the other stream's lines may stand between the parts. A debug-tier envelope (up to
16 KiB of JSON, with ``CVDIAG `` in front) can be split so. Every reader joins the parts first:

- blocks (``joined_blocks``, for ``cvdiag.logs.reading``): a run whose first part starts
  an envelope (`` P CVDIAG {``; containerd cuts 16 KiB into the line, so the first part always
  holds the marker) has its content moved onto its first line (tag ``F``), and each later part
  is left as its head turned to spaces, so a block keeps its length and its newlines: line
  numbers stay exact, and so do the byte offsets of every line but the other stream's lines
  between two parts (they move down by the content moved over them, never onto another line).
  A block without `` P CVDIAG {`` costs one ``find`` and nothing else;
- lines (``joined_lines``, for ``cvdiag tail``): a run is held until its ``F`` and shown as one
  line; lines of the other stream meanwhile wait behind it, in their order;
- a range edge (``outside_run``, for ``cvdiag.logs.ranges``) is moved past a run it would cut.

A run with no ``F`` within ``limit`` bytes (or before the input ends) is left as written: its
first part is then reported as an envelope with invalid JSON, never silently completed.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Final

__all__ = ["HINTS", "joined_blocks", "joined_lines", "may_continue", "outside_run"]

#: What a partial line's head holds after its time: searched for before any line is looked at.
HINTS: Final = (b" stdout P ", b" stderr P ")
#: What the first part of an envelope cut into parts holds: the one search made per block.
_ENVELOPE_RUN: Final = b" P CVDIAG {"
#: No CRI head is longer (a 35-byte time, `` stdout P ``): a line's partial tail shorter than
#: this may be a head not yet read whole.
_HEAD_MAX: Final = 64
#: Bytes looked at before a range edge for a run it would cut.
_BACK: Final = 1 << 18


@functools.cache
def _head() -> re.Pattern[bytes]:
    # Compiled when first needed: most logs never hold a partial line.
    return re.compile(
        rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) (stdout|stderr) ([PF]) "
    )


def _hinted(data: bytes | bytearray, start: int = 0, end: int | None = None) -> int:
    """The first hint in ``data[start:end]``, or -1."""
    stop = len(data) if end is None else end
    out = data.find(HINTS[0], start, stop)
    err = data.find(HINTS[1], start, stop if out < 0 else out)
    return err if err >= 0 else out


# --- blocks ---------------------------------------------------------------------------------


def joined_blocks(read: Callable[[int], bytes], block: int, limit: int) -> Iterator[bytes]:
    """What ``read(block)`` returns, never empty, with every CRI run joined (see the module
    docstring): the same bytes where there is none. A run is held back whole until its ``F``
    (up to ``limit`` bytes), so blocks may be cut at other places than ``read`` cut them."""
    held = b""  # bytes not handed out yet, from a line's start
    mid = False  # whether the next bytes go on a line whose start was handed out already
    while True:
        data = read(block)
        if not data:
            if held:
                yield _join(held, mid=False, final=True, limit=limit)[0]
            return
        if held:
            data, held = held + data, b""
        cut = data.rfind(b"\n") + 1
        if data.find(_ENVELOPE_RUN) < 0:
            # The common case: no partial line here. Only a short unfinished last line that
            # starts as a time does might be a head cut by the block's end: that one is held
            # (a copy of the block, only then).
            start = cut if cut or not mid else -1  # where the unfinished last line starts
            if (
                start >= 0
                and len(data) - start < _HEAD_MAX
                and (start == len(data) or 48 <= data[start] <= 57)  # an ASCII digit
            ):
                held = data[start:]
                if start:
                    yield data[:start] if held else data
                mid = False
            else:
                yield data
                mid = mid if cut == 0 else cut < len(data)
            continue
        out, held = _join(data, mid=mid, final=False, limit=limit)
        if out:
            yield out
            mid = False if held else not out.endswith(b"\n")


def _join(data: bytes, *, mid: bool, final: bool, limit: int) -> tuple[bytes, bytes]:
    """``(ready, waiting)``: ``data`` with its runs joined, cut where an unfinished run or last
    line begins, which waits for more bytes (nothing waits when ``final``)."""
    head = _head().match
    cut = len(data) if final else data.rfind(b"\n") + 1
    first = data.find(b"\n") + 1 if mid else 0  # heads stand only at a line's start
    if mid and first == 0:
        return data, b""
    buffer: bytearray | None = None
    view: bytes | bytearray = data
    pos, hold = first, -1
    while True:
        hit = view.find(_ENVELOPE_RUN, pos, cut)
        if hit < 0:
            break
        begin = view.rfind(b"\n", 0, hit) + 1
        found = head(view, begin) if begin >= first else None
        if found is None or found.start(2) != hit + 1 or found.group(2) != b"P":
            pos = hit + 1
            continue
        parts = _run(view, found, cut)
        if parts is None:
            if final or len(data) - begin > limit:
                end = view.find(b"\n", begin, cut)
                pos = (end if end >= 0 else cut) + 1  # left as written
                continue
            hold = begin  # waits for its F
            break
        if buffer is None:
            view = buffer = bytearray(data)
        pos = _rewrite(buffer, begin, parts)
    if final:
        keep = len(data)
    elif hold >= 0:
        keep = hold
    else:  # the unfinished last line waits, unless it is past ``limit``: the reader skips it
        keep = cut if len(data) - cut <= limit else len(data)
    if buffer is not None:  # what waits is taken from the joined bytes too
        return bytes(buffer[:keep]), bytes(buffer[keep:])
    return (data, b"") if keep == len(data) else (data[:keep], data[keep:])


def _run(
    data: bytes | bytearray, found: re.Match[bytes], cut: int
) -> list[tuple[int, int, int]] | None:
    """``(line start, content start, line end)`` of each part of the run ``found`` begins, up to
    its ``F``; None when it does not end before ``cut``."""
    head = _head().match
    stream = found.group(1)
    end = data.find(b"\n", found.end(), cut)
    if end < 0:
        return None
    parts = [(found.start(), found.end(), end)]
    at = end + 1
    while at < cut:
        end = data.find(b"\n", at, cut)
        if end < 0:
            end = cut
        line = head(data, at)
        if line is not None and line.group(1) == stream:
            parts.append((at, line.end(), end))
            if line.group(2) == b"F":
                return parts
        at = end + 1
    return None


def _rewrite(buffer: bytearray, begin: int, parts: list[tuple[int, int, int]]) -> int:
    """Joins the run ``parts`` in place (same length, same newlines); returns the offset just
    after the joined first line."""
    _, content, end = parts[0]
    joined = bytearray(buffer[begin:end])
    joined[content - begin - 2] = ord("F")  # the tag, before its space
    for _, start, stop in parts[1:]:
        joined += buffer[start:stop]
    after = begin + len(joined) + 1
    previous = end
    for line, start, stop in parts[1:]:
        joined += buffer[previous:line]  # the newline before, and the other stream's lines
        joined += b" " * (start - line)  # the part's head, as spaces: the line stays
        previous = stop
    buffer[begin:previous] = joined
    return after


# --- lines ----------------------------------------------------------------------------------


def joined_lines(lines: Iterable[bytes], limit: int) -> Iterator[bytes]:
    """``lines`` (each with its newline) with each CRI run given as one line, at its first
    part's place; a run held past ``limit`` bytes is given as written."""
    head = _head().match
    waiting: deque[list[bytes]] = deque()  # in order; a run's entry grows until its F
    runs: dict[bytes, list[bytes]] = {}  # the open run of each stream
    done: set[int] = set()  # ids of the entries that are whole
    held = 0
    for raw in lines:
        if not runs and _hinted(raw) < 0:  # nothing waits, and this is no partial line
            yield raw
            continue
        line = raw.rstrip(b"\n")
        found = head(line)
        stream = found.group(1) if found is not None else b""
        entry = runs.get(stream)
        if entry is not None and found is not None:
            entry.append(line[found.end() :])
            held += len(line)
            if found.group(2) == b"F":
                del runs[stream]
                done.add(id(entry))
        elif found is not None and found.group(2) == b"P":
            entry = [line[: found.start(2)] + b"F ", line[found.end() :]]
            runs[stream] = entry
            waiting.append(entry)
            held += len(line)
        else:
            entry = [raw]
            waiting.append(entry)
            done.add(id(entry))
            held += len(raw)
        if held > limit:  # given up: what waits goes out as it is
            runs.clear()
            done.update(id(item) for item in waiting)
        while waiting and id(waiting[0]) in done:
            first = waiting.popleft()
            done.discard(id(first))
            held -= sum(len(piece) for piece in first)
            yield b"".join(first) + (b"" if first[-1].endswith(b"\n") else b"\n")
        if not waiting:
            held = 0
    for entry in waiting:
        yield b"".join(entry) + (b"" if entry[-1].endswith(b"\n") else b"\n")


# --- one line, an edge ----------------------------------------------------------------------


def may_continue(line: bytes) -> bool:
    """Whether ``line`` may be part of a longer one: a CRI ``P`` line, or a CRI line whose
    content does not start with ``CVDIAG {`` (it may end a run)."""
    if _hinted(line, 0, _HEAD_MAX) < 0 and b" F " not in line[:_HEAD_MAX]:
        return False
    found = _head().match(line)
    if found is None:
        return False
    return found.group(2) == b"P" or not line.startswith(b"CVDIAG {", found.end())


def outside_run(read_at: Callable[[int, int], bytes], edge: int, size: int, limit: int) -> int:
    """``edge`` (just after a newline), or, when it falls inside a CRI run, just after the
    run's ``F`` (the runs it then cuts too included); ``edge`` when no ``F`` comes within
    ``limit`` bytes."""
    low = max(0, edge - _BACK)
    before = read_at(low, edge - low)
    if _hinted(before) < 0:
        return edge
    head = _head().match
    lines = before.split(b"\n")[:-1]
    if low:
        lines = lines[1:]  # may start mid-line
    last: dict[bytes, bytes] = {}
    for line in reversed(lines):
        found = head(line)
        if found is not None and found.group(1) not in last:
            last[found.group(1)] = found.group(2)
            if len(last) == 2:
                break
    open_ = {stream for stream, tag in last.items() if tag == b"P"}
    at, pending = edge, b""
    while open_ and at - edge <= limit:
        data = read_at(at + len(pending), 1 << 16)
        if not data:
            return size
        pending += data
        while open_:
            end = pending.find(b"\n")
            if end < 0:
                break
            found = head(pending, 0, end)
            if found is not None:
                stream, tag = found.group(1), found.group(2)
                if tag == b"F":
                    open_.discard(stream)
                else:
                    open_.add(stream)
            at += end + 1
            pending = pending[end + 1 :]
    return at if not open_ else edge
