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

Line numbers stay exact: a worker numbers its range's lines from 1 and counts the newlines it
read; the caller shifts each range's numbers by the newlines of the ranges before it. Byte
offsets are shifted by the range's start. Memory per worker is one read block plus its partial.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Final, TypeVar, cast

from cvdiag.analysis.inputs import Input, InputError

if TYPE_CHECKING:
    from concurrent.futures import Future

# multiprocessing and concurrent.futures are imported when a file is read in parallel: most
# reads are of small files, and ``cvdiag grep`` never reads in parallel.

#: Files smaller than this are read sequentially (module-level: the tests lower it).
PARALLEL_MIN = 32 << 20
#: About this many bytes per range: more ranges than workers even out their load and let the
#: progress line move, and each partial stays small.
RANGE_SIZE = 16 << 20
#: Bytes read at a time when looking for the newline that ends a range.
_PROBE: Final = 1 << 16

T = TypeVar("T")


def workers() -> int:
    """How many worker processes to use: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def plan(source: Input) -> list[tuple[int, int]] | None:
    """The ranges to read ``source`` in parallel, or None: read it sequentially."""
    if not sys.platform.startswith("linux") or workers() < 2 or not source.plain_file:
        return None
    if threading.active_count() > 1:
        return None  # forking a process that runs threads (``main`` called by a host) is unsafe
    size = source.size()
    if size is None or size < PARALLEL_MIN:
        return None
    try:
        with open(source.name, "rb", buffering=0) as file:
            if os.fstat(file.fileno()).st_size != size:
                return None  # the name no longer names the file opened: read what was opened
            return split(file, size, RANGE_SIZE)
    except OSError:
        return None


def split(file: IO[bytes], size: int, step: int) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` covering ``size`` bytes of ``file``: each edge is moved forward to
    just after the next newline, so every line lies in one range."""
    edges = [0]
    target = step
    while target < size:
        edge = _line_start(file, max(target, edges[-1] + 1), size)
        if edge >= size:
            break
        edges.append(edge)
        target = edge + step
    edges.append(size)
    return list(itertools.pairwise(edges))


def _line_start(file: IO[bytes], at: int, size: int) -> int:
    """The offset just after the first newline at ``at - 1`` or later (``size`` when none)."""
    position = at - 1
    file.seek(position)
    while position < size:
        data = file.read(_PROBE)
        if not data:
            break
        found = data.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(data)
    return size


class _Range:
    """``read1`` over ``[start, end)`` of a file, counting the newlines it hands out."""

    def __init__(self, name: str, start: int, end: int) -> None:
        self.file = open(name, "rb", buffering=0)  # noqa: SIM115 - closed by Input.close
        self.file.seek(start)
        self.left = end - start
        self.newlines = 0

    def read1(self, size: int) -> bytes:
        if self.left <= 0:
            return b""
        data = self.file.read(min(size, self.left)) or b""
        if not data:
            raise OSError(f"the file ended {self.left} bytes early (was it cut while read?)")
        self.left -= len(data)
        self.newlines += data.count(b"\n")
        return data

    def seekable(self) -> bool:
        return False  # read as plain text: a range may start with gzip's magic bytes

    def close(self) -> None:
        self.file.close()


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
        with open(name, "rb", buffering=0) as file:
            file.seek(start)
            at, lines = 0, 1  # ``lines``: the number of the line holding byte ``at``
            for offset in offsets:
                while at < offset:
                    data = file.read(min(offset - at, 1 << 20))
                    if not data:
                        raise OSError(f"the file ended before byte {start + offset}")
                    lines += data.count(b"\n")
                    at += len(data)
                numbers.append(lines)
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None
    return numbers


def _quiet() -> None:
    # Ctrl-C is the parent's to handle: a worker interrupted while waiting would print a trace.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run(
    job: Callable[[str, int, int], T],
    name: str,
    ranges: list[tuple[int, int]],
    *,
    on_done: Callable[[int], None] | None = None,
) -> Iterator[T]:
    """``job(name, start, end)`` for each range, in worker processes; the results in file order.
    ``on_done(end)`` is called as each range's result arrives. A worker that dies, or a job
    that raises, ends the run with ``InputError`` or the job's own exception."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # A forked worker holds a copy of every unflushed stdio buffer; flushed first, no child
    # can ever write the parent's lines a second time (defensive: today's workers do not).
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        max_workers=min(workers(), len(ranges)), mp_context=context, initializer=_quiet
    )
    try:
        futures: list[Future[T]] = [pool.submit(job, name, s, e) for s, e in ranges]
        for future, (_, end) in zip(futures, ranges, strict=True):
            result = future.result()
            if on_done is not None:
                on_done(end)
            yield result
    except BrokenProcessPool:  # from ``submit`` too, when a worker died early
        raise InputError(
            f"cannot read {name}: a worker process reading it ended unexpectedly"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
