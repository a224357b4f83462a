"""The lines of a regular file that hold a fixed string, found at memory speed.

``cvdiag grep --test-id`` spends nearly all its time looking for a rare id in a large log, so
this is the one place the reader leaves plain Python: the file is cut into ``CHUNK``-sized byte
ranges, with no regard for lines, and up to ``THREADS`` threads each read their own ranges with
``os.preadv`` into a buffer of their own and search it with the C library's ``memmem`` (through
``ctypes``, which lets go of the GIL for the call, as ``preadv`` does: the threads really run
side by side). Where there is no ``memmem``, ``bytearray.find`` does the same job more slowly.

Not ``mmap``: a log truncated while it is mapped kills the process with SIGBUS.

Each range is read with ``len(needle) - 1`` bytes of the next, so a needle across the cut is
found, by the range it starts in. A worker cuts out the line around each hit when the whole line
is in its range; a line that crosses a cut is handed back as a bare hit, and the caller, which
takes the ranges back in file order, finds its ends with a few reads of its own (a line is
yielded once however many hits and ranges it spans). Hits come in runs (a test's envelopes;
every envelope, for the marker), so after a hit the next is looked for close by with
``bytearray.find``, cheaper per call than ``ctypes``, and further on with ``memmem``. Memory:
one buffer per thread, and at most one finished range per thread waiting to be taken.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterator

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["CHUNK", "MEMMEM", "THREADS", "USABLE", "lines_with"]

#: Bytes a worker reads and searches at a time (the tests shrink it).
CHUNK: Final = 4 << 20
#: Threads that search: two (a third gains nothing on a search bound by memory), or one on a
#: single CPU.
THREADS: Final = min(2, os.cpu_count() or 1)
#: Whether to use the C library's ``memmem`` when there is one (the tests turn it off).
MEMMEM: Final = True
#: Whether this platform can read a file at an offset (Windows cannot): else, no search here.
USABLE: Final = hasattr(os, "pread")
#: After a hit, the next is looked for this far with ``bytearray.find`` before ``memmem``.
_NEAR: Final = 1 << 14
#: Reads made to find the ends of a line that crosses a cut, and to check an overlong one.
_STEP: Final = 1 << 16

# What a range yields: a hit in a line that may begin before the range (or -1), the lines
# wholly in the range as ``(offset, line or None)``, a hit in a line that goes on past it (or -1).
_Found = tuple[int, list[tuple[int, "bytes | None"]], int]
# ``find(buffer, start, stop)``: the first needle in ``buffer`` that starts in ``[start, stop)``.
_Finder = Callable[[bytearray, int, int], int]

_memmem: Any = None  # the ctypes function, once loaded; False when there is none


def _load_memmem() -> Any:
    global _memmem
    if _memmem is None:
        try:
            import ctypes

            function: Any = ctypes.CDLL(None).memmem
            function.restype = ctypes.c_void_p
            function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
        except Exception:  # no ctypes, no C library, no memmem: bytearray.find will do
            function = False
        _memmem = function
    return _memmem


def _finder(buffer: bytearray, needle: bytes) -> _Finder:
    width = len(needle)
    memmem: Any = _load_memmem() if MEMMEM else False
    if not memmem:

        def find(data: bytearray, start: int, stop: int) -> int:
            return data.find(needle, start, stop + width - 1)

        return find
    import ctypes

    base = ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))

    def find_c(data: bytearray, start: int, stop: int) -> int:
        if stop <= start:
            return -1
        found = memmem(base + start, stop - start + width - 1, needle, width)
        return found - base if found else -1

    return find_c


def _read(fd: int, buffer: bytearray, offset: int, size: int) -> int:
    """Fill ``buffer[:size]`` from ``offset``; fewer bytes only at the end of the file. The
    buffer is the thread's own, reused: a fresh ``bytes`` per range costs page faults, which
    the threads would take one at a time."""
    view = memoryview(buffer)
    done = 0
    while done < size:
        if _preadv is not None:
            got = _preadv(fd, [view[done:size]], offset + done)
        else:
            data = os.pread(fd, size - done, offset + done)
            got = len(data)
            view[done : done + got] = data
        if not got:
            break
        done += got
    return done


_preadv = getattr(os, "preadv", None)


def _scan(
    fd: int, needle: bytes, start: int, stop: int, buffer: bytearray, find: _Finder, limits: Any
) -> _Found:
    """The hits of one range ``[start, stop)``: whole lines cut out, and at most two bare hits,
    in lines that may cross the range's start or its end."""
    max_line, marker = limits
    width = len(needle)
    size = _read(fd, buffer, start, stop - start + width - 1)
    cut = min(stop - start, size - width + 1)  # needles that start before here are ours
    view = memoryview(buffer)
    line_start, line_end, near_find = buffer.rfind, buffer.find, buffer.find
    lines: list[tuple[int, bytes | None]] = []
    add, nearby, copy = lines.append, _NEAR, bytes
    head = tail = -1
    pos = find(buffer, 0, cut) if cut > 0 else -1
    while pos >= 0:
        begin = line_start(b"\n", 0, pos) + 1
        end = line_end(b"\n", pos + width, size)
        if begin == 0 and start:  # the line may begin in the range before
            head = start + pos
        elif end < 0:  # the line goes on into the next range
            tail = start + pos
        elif end - begin <= max_line:
            add((start + begin, copy(view[begin:end])))
        elif buffer.find(marker, begin, end) >= 0:
            add((start + begin, None))
        if end < 0:
            break
        near = end + 1 + nearby
        pos = near_find(needle, end + 1, (near if near < cut else cut) + width - 1)
        if pos < 0 and near < cut:
            pos = find(buffer, near, cut)
    return head, lines, tail


def lines_with(
    fd: int,
    needle: bytes,
    *,
    max_line: int,
    marker: bytes,
    on_read: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, bytes | None]]:
    """``(offset, line)`` for each line of the regular file ``fd`` that holds ``needle``, in
    file order, without its newline; ``None`` for a line over ``max_line`` bytes that holds
    ``marker`` too (longer lines without it are dropped). ``needle`` is not empty and holds no
    newline. The file is read up to the size it had when the search began, with ``pread``, so
    the descriptor's position does not matter. ``on_read`` is told how far the search got."""
    size = os.fstat(fd).st_size
    chunk = CHUNK  # read at call time: the tests shrink it
    limits = (max_line, marker)
    ranges = [(start, min(start + chunk, size)) for start in range(0, size, chunk)]
    threads = max(1, min(THREADS, len(ranges)))
    if threads == 1:
        buffer = bytearray(chunk + len(needle) - 1)
        find = _finder(buffer, needle)
        results: Iterator[_Found] = (
            _scan(fd, needle, start, stop, buffer, find, limits) for start, stop in ranges
        )
    else:
        results = _threaded(fd, needle, ranges, threads, chunk, limits)
    done = 0  # lines that start before this offset were yielded (or dropped) already
    for (_, stop), (head, lines, tail) in zip(ranges, results, strict=True):
        if head >= done:
            done = yield from _bare(fd, head, len(needle), size, limits)
        yield from lines  # lines wholly in one range: never seen before
        if tail >= done:
            done = yield from _bare(fd, tail, len(needle), size, limits)
        if on_read is not None:
            on_read(stop)


def _bare(
    fd: int, hit: int, width: int, size: int, limits: Any
) -> Generator[tuple[int, bytes | None], None, int]:
    """The line around a hit whose line crosses a cut, if it is to be yielded; returns the
    offset past its end."""
    max_line, marker = limits
    begin, end = _ends(fd, hit, width, size)
    line = _whole(fd, begin, end, max_line, marker)
    if line != b"":
        yield begin, line
    return end + 1


def _ends(fd: int, hit: int, width: int, size: int) -> tuple[int, int]:
    """The start of the line holding ``hit`` and the offset of its newline (or ``size``)."""
    begin = hit
    while begin > 0:
        low = max(0, begin - _STEP)
        newline = os.pread(fd, begin - low, low).rfind(b"\n")
        if newline >= 0:
            begin = low + newline + 1
            break
        begin = low
    end = hit + width
    while end < size:
        data = os.pread(fd, min(_STEP, size - end), end)
        if not data:  # truncated while read: the line ends where the file now does
            break
        newline = data.find(b"\n")
        if newline >= 0:
            return begin, end + newline
        end += len(data)
    return begin, min(end, size)


def _whole(fd: int, begin: int, end: int, max_line: int, marker: bytes) -> bytes | None:
    """The line ``[begin, end)``; over ``max_line`` bytes, None if it holds ``marker``, else
    ``b""`` (dropped). An overlong line is searched a step at a time: memory stays bounded."""
    if end - begin <= max_line:
        return os.pread(fd, end - begin, begin)
    overlap = len(marker) - 1
    for low in range(begin, end, _STEP):
        if marker in os.pread(fd, min(_STEP + overlap, end - low), low):
            return None
    return b""


def _threaded(
    fd: int,
    needle: bytes,
    ranges: list[tuple[int, int]],
    threads: int,
    chunk: int,
    limits: Any,
) -> Iterator[_Found]:
    """The results of ``_scan`` over ``ranges``, in order: thread ``i`` takes every ``i``-th
    range and hands each result through a queue of its own that holds one, so memory is
    bounded and the order is kept without sorting."""
    import queue
    import threading

    stop = threading.Event()
    queues: list[queue.Queue[_Found | BaseException]] = [
        queue.Queue(maxsize=1) for _ in range(threads)
    ]

    def work(index: int) -> None:
        buffer = bytearray(chunk + len(needle) - 1)
        find = _finder(buffer, needle)
        for start, end in ranges[index::threads]:
            if stop.is_set():
                return
            try:
                result: _Found | BaseException = _scan(fd, needle, start, end, buffer, find, limits)
            except BaseException as exc:  # handed to the caller, who raises it
                result = exc
            queues[index].put(result)
            if isinstance(result, BaseException):
                return

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    try:
        for number in range(len(ranges)):
            result = queues[number % threads].get()
            if isinstance(result, BaseException):
                raise result
            yield result
    finally:
        stop.set()
        for worker in workers:
            while worker.is_alive():  # a worker may wait to hand over a result: take it
                for waiting in queues:
                    with contextlib.suppress(queue.Empty):
                        waiting.get_nowait()
                worker.join(0.01)
