"""A large plain log file read in parallel: line-aligned byte ranges, one worker process each.

``cvdiag validate`` and ``cvdiag stats`` spend nearly all their time in Python per envelope, so
one process reads about 100-150 MB/s whatever the disk. On a large regular file the work is
split into byte ranges whose edges sit just after a newline (no line is cut), each read by a
worker process that returns a small partial result (counts, the first few problems); the
caller merges the partials in file order, so what it prints is what one sequential read prints.

Parallel reading is used only where it is safe and pays: on Linux, where ``fork`` is the
platform's default start method (a forked worker inherits the imported modules, so it starts in
a millisecond; elsewhere a fresh interpreter per worker would cost more than it saves), with two
CPUs or more, in a process running no other thread, for an uncompressed regular file of at
least ``PARALLEL_MIN`` bytes. Gzip, stdin, pipes and small files are read sequentially.

Line numbers stay exact: a worker counts its range's newlines and numbers from 1 the few
lines it reports; the caller shifts each range's numbers by the newlines of the ranges before
it. Byte offsets are shifted by the range's start. Workers read the file the command opened
(its descriptor, inherited through fork), not its name again. Memory per worker is one read
block plus its partial result.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Final, TypeVar, cast

from cvdiag.logs.inputs import Input, InputError
from cvdiag.logs.partial import outside_run

# The worker processes (``forked``, and multiprocessing with it) are imported when a file is read
# in parallel: most reads are of small files, and ``cvdiag grep`` never reads in parallel.

#: Files smaller than this are read sequentially (module-level: the tests lower it).
PARALLEL_MIN = 32 << 20
#: About this many bytes per range: more ranges than workers even out their load and let the
#: progress line move, and each partial stays small.
RANGE_SIZE = 16 << 20
#: How far past an edge the end of a CRI run it cuts is looked for (the reader joins no longer
#: run either: ``reading.MAX_LINE``).
RUN_LIMIT = 1 << 20
#: Bytes read at a time when looking for the newline that ends a range.
_PROBE: Final = 1 << 16

T = TypeVar("T")


def workers() -> int:
    """How many worker processes to use: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


#: The descriptor of each file being read in parallel, by name, set before the workers are
#: forked: a worker reads (with ``pread``, which moves no shared offset) the very file the
#: command opened, even when its name has since been given to another (a log rotated).
_OPENED: dict[str, int] = {}

ReadAt = Callable[[int, int], bytes]


def plan(source: Input) -> list[tuple[int, int]] | None:
    """The ranges to read ``source`` in parallel, or None: read it sequentially."""
    if not sys.platform.startswith("linux") or workers() < 2:
        return None
    if threading.active_count() > 1:
        return None  # forking a process that runs threads (``main`` called by a host) is unsafe
    size, descriptor = source.size(), source.descriptor()
    if size is None or size < PARALLEL_MIN or descriptor is None:
        return None
    try:
        return split(lambda at, count: os.pread(descriptor, count, at), size, RANGE_SIZE)
    except OSError:
        return None


def split(read_at: ReadAt, size: int, step: int) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` covering ``size`` bytes (``read_at(offset, count)``): each edge
    is moved forward to just after the next newline, so every line lies in one range, and past
    the ``F`` of a CRI line split into parts (``partial``), so every part of it does too."""
    edges = [0]
    target = step
    while target < size:
        edge = _line_start(read_at, max(target, edges[-1] + 1), size)
        if edge < size:
            edge = outside_run(read_at, edge, size, RUN_LIMIT)
        if edge >= size:
            break
        edges.append(edge)
        target = edge + step
    edges.append(size)
    return list(itertools.pairwise(edges))


def _line_start(read_at: ReadAt, at: int, size: int) -> int:
    """The offset just after the first newline at ``at - 1`` or later (``size`` when none)."""
    position = at - 1
    while position < size:
        data = read_at(position, _PROBE)
        if not data:
            break
        found = data.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(data)
    return size


def _reader(name: str) -> tuple[ReadAt, Callable[[], None]]:
    """``read_at`` over the file ``run`` was given (by name outside ``run``), and ``close``."""
    descriptor = _OPENED.get(name)
    if descriptor is not None:
        return (lambda at, count: os.pread(descriptor, count, at)), lambda: None
    opened = os.open(name, os.O_RDONLY)
    return (lambda at, count: os.pread(opened, count, at)), lambda: os.close(opened)


class _Range:
    """``read1`` over ``[start, end)`` of a file, counting the newlines it hands out."""

    def __init__(self, name: str, start: int, end: int) -> None:
        self.read_at, self.close = _reader(name)
        self.at, self.end = start, end
        self.newlines = 0

    def read1(self, size: int) -> bytes:
        if self.at >= self.end:
            return b""
        data = self.read_at(self.at, min(size, self.end - self.at))
        if not data:
            raise OSError(f"the file ended {self.end - self.at} bytes early (cut while read?)")
        self.at += len(data)
        self.newlines += data.count(b"\n")
        return data

    def seekable(self) -> bool:
        return False  # read as plain text: a range may start with gzip's magic bytes


def open_range(name: str, start: int, end: int) -> tuple[Input, Callable[[], int]]:
    """``name``'s bytes ``[start, end)`` as an ``Input`` (lines numbered from 1, or byte
    offsets from ``start``), and a function giving the newlines read so far."""
    try:
        stream = _Range(name, start, end)
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None
    source = Input(name, cast(IO[bytes], stream))
    return source, lambda: stream.newlines


def line_numbers(name: str, start: int, offsets: list[int]) -> list[int]:
    """The line numbers (from 1 at ``start``) of the lines at ``offsets`` (bytes from
    ``start``, ascending): a worker reads its range with byte offsets, which cost nothing per
    line, and numbers only the few lines it reports."""
    numbers: list[int] = []
    try:
        read_at, close = _reader(name)
        try:
            at, lines = 0, 1  # ``lines``: the number of the line holding byte ``at``
            for offset in offsets:
                while at < offset:
                    data = read_at(start + at, min(offset - at, 1 << 20))
                    if not data:
                        raise OSError(f"the file ended before byte {start + offset}")
                    lines += data.count(b"\n")
                    at += len(data)
                numbers.append(lines)
        finally:
            close()
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None
    return numbers


def run(
    job: Callable[[str, int, int], T],
    source: Input,
    ranges: list[tuple[int, int]],
    *,
    on_done: Callable[[int], None] | None = None,
) -> Iterator[T]:
    """``job(source.name, start, end)`` for each range, in worker processes (which read the
    file ``source`` opened); the results in file order.
    ``on_done(end)`` is called as each range's result arrives. A worker that dies, or a job
    that raises, ends the run with ``InputError`` or the job's own exception."""
    from cvdiag.logs.forked import WorkerDied, run_in_order

    # A forked worker holds a copy of every unflushed stdio buffer; flushed first, no child
    # can ever write the parent's lines a second time (defensive: today's workers do not).
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    name, descriptor = source.name, source.descriptor()
    if descriptor is not None:
        _OPENED[name] = descriptor
    results = run_in_order(job, [(name, s, e) for s, e in ranges], processes=workers())
    try:
        for (_, end), result in zip(ranges, results, strict=True):
            if on_done is not None:
                on_done(end)
            yield result
    except WorkerDied:
        raise InputError(
            f"cannot read {name}: a worker process reading it ended unexpectedly"
        ) from None
    finally:
        results.close()
        _OPENED.pop(name, None)
