"""A bounded queue of ``CVDIAG {json}`` lines, drained from the event loop or one writer thread.

Stdout and file sinks never block the caller: lines go into a bounded queue. On an event loop
the stdout sink drains it from the loop itself, once per burst, with non-blocking writes to a
descriptor of its own (cvdiag/sinks/descriptor.py); elsewhere, and for flush and exit, one writer
thread drains it. A slow or wedged pipe costs dropped (and counted) envelopes, never latency.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from cvdiag.core.guard import record_failure
from cvdiag.sinks.base import PREFIX, BaseSink
from cvdiag.sinks.descriptor import write_some
from cvdiag.sinks.exit_flush import install_exit_hooks, live_sinks, running_loop

#: Between two lines of a batch: joined in one C call, the writer spends no Python per line.
_LINE_BREAK = b"\n" + PREFIX
#: Lines joined per write from the loop (about 64 KiB of envelopes).
_LOOP_SLICE = 100


def _new_bell() -> threading.Lock:
    """A lock held from the start: the writer waits on ``acquire``, a producer rings it with
    ``release`` (one C call; a second ring before the writer answers raises and is ignored)."""
    bell = threading.Lock()
    bell.acquire()
    return bell


class QueuedLineSink(BaseSink):
    """``CVDIAG {json}`` lines through a bounded queue and one daemon writer thread.

    When the queue is full the oldest line is dropped and counted; once the writer gets a line
    through again it first writes one ``cvdiag.queue_dropped`` line with the count.

    The writer is woken once per burst, not once per line: the first line after it went idle rings
    a bell (a bare lock, released from C), and the writer then lingers ``LINGER`` seconds so that
    the burst goes out in one write. Waking a thread per line would cost every request two GIL
    hand-offs and a ``threading.Condition`` round trip, several times the price of the envelope.
    """

    #: Seconds the writer lets a burst gather before writing it; a line reaches the pipe at most
    #: this much later (``flush()`` and exit write everything regardless).
    LINGER = 0.01

    def __init__(self, *, queue_size: int = 5000) -> None:
        self.queue_size = queue_size
        self.dropped = 0
        self.written = 0
        self._unreported = 0
        self._queue: collections.deque[bytes] = collections.deque()
        self._bell = _new_bell()
        self._idle = True  # the writer waits for the bell (or has not started)
        self._busy = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._count_lock = threading.Lock()  # only the drop path takes it
        self._closed = False
        #: Held by whoever takes lines off the queue and writes them (the loop or the thread),
        #: so batches go out whole and in emit order.
        self._write_lock = threading.Lock()
        #: What a non-blocking write on the loop could not place yet: written before anything.
        self._rest = b""
        #: The loop a drain is scheduled on (one per burst).
        self._drain_on: asyncio.AbstractEventLoop | None = None
        #: A flush wants the thread to write now, whoever was to.
        self._forced = False
        #: Builds the ``cvdiag.queue_dropped`` line; the emitter that owns the sink sets it.
        self.drop_report: Callable[[int], bytes | None] | None = None

    # -- the caller's side: O(1), never blocks ---------------------------------------------

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        self.write_line(line)

    def write_line(self, line: bytes) -> None:
        """Queue one serialized envelope: what this sink needs of it (the emitter's templated
        path, which builds no envelope dict, calls this directly)."""
        queue = self._queue
        if len(queue) >= self.queue_size:
            try:
                queue.popleft()
            except IndexError:
                pass
            else:
                self._count_drop(1)
        queue.append(line)
        loop = running_loop()
        if loop is not None:
            if self._drain_on is loop:
                return  # this burst's drain is already due on this loop: it takes the line too
            fd = self._loop_descriptor()
            if fd is not None:
                # On the loop: drain from the loop, once per burst; no thread wakes.
                self._drain_on = loop
                loop.call_later(self.LINGER, self._drain_from_loop, fd)
                if self._thread is None:
                    self._start()  # idle: it writes for flush, exit and a closed loop
                return
        if self._idle:
            self._idle = False
            self._ring()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything queued has been written, at most ``timeout`` seconds."""
        if self._thread is None:
            return
        deadline = time.monotonic() + timeout
        self._forced = True
        self._ring()
        while (self._queue or self._busy or self._rest) and time.monotonic() < deadline:
            time.sleep(0.001)

    def close(self) -> None:
        self.flush()
        self._closed = True
        self._ring()

    def _ring(self) -> None:
        if self._thread is None:
            self._start()
        with contextlib.suppress(RuntimeError):  # already rung: the writer has yet to answer
            self._bell.release()

    # -- the loop's side --------------------------------------------------------------------

    def _loop_descriptor(self) -> int | None:
        """A non-blocking descriptor to write from the loop, or None to use the thread."""
        return None

    def _drain_from_loop(self, fd: int) -> None:
        """Write what is queued without blocking; what the pipe cannot take now waits."""
        self._drain_on = None
        if not self._write_lock.acquire(blocking=False):
            return  # the thread is writing, and takes what is queued with it
        try:
            # A burst goes out in slices of at most _LOOP_SLICE lines: a few hundred KiB joined
            # at once costs fresh pages (a new mapping) every drain, a slice stays in cache.
            while True:
                if not self._rest:
                    lines = self._take(_LOOP_SLICE)
                    if not lines:
                        break
                    self._rest = self._batch_bytes(lines)
                self._rest = self._rest[write_some(fd, self._rest) :]
                if self._rest:
                    break  # the pipe is full: the rest waits for the next drain
        except Exception as exc:  # a broken pipe: what was taken is lost, and counted
            self._lost(self._rest, exc)
            self._rest = b""
        finally:
            self._write_lock.release()
        if self._rest or self._queue:
            loop = running_loop()
            if loop is not None and self._drain_on is None:  # a full pipe: try again later
                self._drain_on = loop
                loop.call_later(self.LINGER, self._drain_from_loop, fd)

    def _loop_drains(self) -> bool:
        """Whether a live event loop will write what is queued, so the thread need not wake
        (unless a flush asks it to): a loop that closed first leaves its lines to the thread."""
        loop = self._drain_on
        return loop is not None and not self._forced and not loop.is_closed()

    def _take(self, count: int) -> list[bytes]:
        queue = self._queue
        batch: list[bytes] = []
        while queue and len(batch) < count:
            batch.append(queue.popleft())
        return batch

    def _batch_bytes(self, lines: list[bytes]) -> bytes:
        """The batch's bytes, after the drop report it owes, if any; counts it written."""
        data = PREFIX + _LINE_BREAK.join(lines) + b"\n"
        self.written += len(lines)
        report = self._drop_report_line()
        return report + data if report else data

    def _lost(self, data: bytes, exc: BaseException) -> None:
        lines = data.count(b"\n")
        self.written -= lines
        self._count_drop(lines)
        record_failure("sink", exc)

    def _drop_report_line(self) -> bytes:
        if not self._unreported or self.drop_report is None:
            return b""
        with self._count_lock:
            count, self._unreported = self._unreported, 0
        try:
            report = self.drop_report(count)
        except Exception as exc:
            with self._count_lock:
                self._unreported += count
            record_failure("sink", exc)
            return b""
        return PREFIX + report + b"\n" if report is not None else b""

    # -- the writer thread -------------------------------------------------------------------

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._run, name="cvdiag-writer", daemon=True)
            thread.start()
            self._thread = thread
            live_sinks.add(self)
            install_exit_hooks()

    def _run(self) -> None:
        queue = self._queue
        while not self._closed:
            if (not queue and not self._rest) or self._loop_drains():
                self._idle = True
                if not queue or self._loop_drains():  # a line may have come meanwhile
                    self._bell.acquire(timeout=0.5)
                self._idle = False
                continue
            self._forced = False
            time.sleep(self.LINGER)
            self._busy = True
            try:
                with self._write_lock:
                    if self._rest:
                        rest, self._rest = self._rest, b""
                        try:
                            self._write_bytes(rest)
                        except Exception as exc:
                            self._lost(rest, exc)
                    while queue:
                        if self._emit_batch(self._take(512)):
                            self._report_drops()
                    # Also after a burst that ended in a failed write: the report must not
                    # wait for lines that may never come (flush, close and exit still report).
                    self._report_drops()
            finally:
                self._busy = False

    def _emit_batch(self, batch: list[bytes]) -> bool:
        try:
            self._write_bytes(PREFIX + _LINE_BREAK.join(batch) + b"\n")
        except Exception as exc:  # a broken pipe or closed file: the batch is lost, counted
            self._count_drop(len(batch))
            record_failure("sink", exc)
            return False
        self.written += len(batch)
        return True

    def _report_drops(self) -> None:
        """Write one ``cvdiag.queue_dropped`` line for the drops not yet reported. A report that
        cannot be written keeps its count for the next attempt, so no drop goes unreported."""
        if not self._unreported or self.drop_report is None:
            return
        with self._count_lock:
            count, self._unreported = self._unreported, 0
        try:
            report = self.drop_report(count)
            if report is not None:
                self._write_bytes(PREFIX + report + b"\n")
        except Exception as exc:
            with self._count_lock:
                self._unreported += count
            record_failure("sink", exc)

    def _count_drop(self, count: int) -> None:
        with self._count_lock:
            self.dropped += count
            self._unreported += count

    def _write_bytes(self, data: bytes) -> None:
        raise NotImplementedError

    def _reset_after_fork(self) -> None:
        self._thread = None
        self._write_lock = threading.Lock()
        self._drain_on = None
        self._start_lock = threading.Lock()
        self._bell = _new_bell()
        self._idle = True
        self._busy = False
