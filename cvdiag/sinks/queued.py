"""A bounded queue of ``CVDIAG {json}`` lines, drained from the event loop or one writer thread.

Stdout and file sinks never block the caller: lines go into a bounded queue. On an event loop
the stdout sink drains it from the loop itself, once per burst, with non-blocking writes to a
descriptor of its own (cvdiag/sinks/descriptor.py); elsewhere, and for flush and exit, one writer
thread drains it. A slow or wedged pipe costs dropped (and counted) envelopes, never latency.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cvdiag.core.guard import record_failure
from cvdiag.sinks.base import PREFIX, BaseSink
from cvdiag.sinks.exit_flush import install_exit_hooks, live_sinks
from cvdiag.sinks.lane import Lane
from cvdiag.sinks.loop_drain import LoopDrain
from cvdiag.sinks.losses import (
    AT_SHUTDOWN,
    WRITE_FAILED,
    Abandoned,
    Losses,
    owed,
    report_lines,
    split_lines,
)

#: Between two lines of a batch: joined in one C call, the writer spends no Python per line.
_LINE_BREAK = b"\n" + PREFIX


def _new_bell() -> threading.Lock:
    """A lock held from the start: the writer waits on ``acquire``, a producer rings it with
    ``release`` (one C call; a second ring before the writer answers raises and is ignored)."""
    bell = threading.Lock()
    bell.acquire()
    return bell


class QueuedLineSink(LoopDrain, BaseSink):
    """``CVDIAG {json}`` lines through a bounded queue and one daemon writer thread.

    When the queue is full the oldest line is dropped and counted; once the writer gets a line
    through again it first writes one ``cvdiag.queue_dropped`` line with the count. What is still
    queued when the shutdown bound runs out is counted too (``abandon``), and said on stderr.

    The writer is woken once per burst, not once per line: the first line after it went idle rings
    a bell (a bare lock, released from C), and the writer then lingers ``LINGER`` seconds so that
    the burst goes out in one write. Waking a thread per line would cost every request two GIL
    hand-offs and a ``threading.Condition`` round trip, several times the price of the envelope.
    """

    #: Seconds the writer lets a burst gather before writing it; a line reaches the pipe at most
    #: this much later (``flush()`` and exit write everything regardless).
    LINGER = 0.01

    def __init__(self, *, queue_size: int = 5000) -> None:
        #: The queue and the loop's drain, compiled with the request path (sinks/lane.py).
        self._lane = Lane(self, queue_size)
        #: The lines given up on, by reason (cvdiag/sinks/losses.py).
        self.losses = Losses()
        self.written = 0
        self._queue = self._lane.lines
        if type(self).write_line is QueuedLineSink.write_line:
            # The lane's own ``put``: a line costs its caller no Python frame of the sink's.
            self.write_line = self._lane.put  # type: ignore[method-assign]
        self._bell = _new_bell()
        self._idle = True  # the writer waits for the bell (or has not started)
        self._busy = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        #: Held by whoever takes lines off the queue and writes them (the loop or the thread),
        #: so batches go out whole and in emit order.
        self._write_lock = threading.Lock()
        #: A flush wants the thread to write now, whoever was to.
        self._forced = False
        #: Builds a ``cvdiag.queue_dropped`` line for a count, under a test id of its own (None)
        #: or of the story that lost its terminal; the emitter that owns the sink sets it.
        self.drop_report: Callable[[int, str | None], bytes | None] | None = None
        #: Set while the shutdown bound has run out: a writer waiting for room gives up.
        self._stopping = False
        #: When a report written at shutdown stops waiting for room (``time.monotonic()``).
        self._report_until = float("inf")
        #: A blocking stream's write in progress: what of the batch is not written yet, in
        #: case the write never returns (counted by ``abandon``, which cannot take the lock).
        self._inflight: bytes | memoryview = b""

    @property
    def dropped(self) -> int:
        """Envelopes this sink did not write, whatever the reason."""
        return self.losses.total

    # -- the caller's side: O(1), never blocks ---------------------------------------------

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        self.write_line(line)

    def write_line(self, line: bytes) -> None:
        """Queue one serialized envelope: what this sink needs of it (the emitter's templated
        path, which builds no envelope dict, calls this directly). Never blocks; when the queue
        is full the oldest line is dropped and counted (``Lane.put``)."""
        self._lane.put(line)

    @property
    def queue_size(self) -> int:
        """Lines the queue holds at most (the lane's bound)."""
        return self._lane.size

    @queue_size.setter
    def queue_size(self, size: int) -> None:
        self._lane.size = size

    @property
    def _rest(self) -> bytes:
        """What a write could not place yet: written before anything (the lane's)."""
        return self._lane.rest

    @_rest.setter
    def _rest(self, rest: bytes) -> None:
        self._lane.rest = rest

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

    def _take(self, count: int) -> list[bytes]:
        return self._lane.take(count)

    def _lost(self, data: bytes, exc: BaseException) -> None:
        lines = split_lines(data)
        self.written -= len(lines)
        self._lose(WRITE_FAILED, lines)
        record_failure("sink", exc)

    def _drop_report(self) -> tuple[int, bytes, list[tuple[str, int]]]:
        """The ``cvdiag.queue_dropped`` lines owed to the log: the count, then one line under
        each test id whose terminal was lost; the count and the ids they report."""
        if not self.losses.owing or self.drop_report is None:
            return 0, b"", []
        count = self.losses.take_unreported()
        cut = self.losses.take_cut()
        try:
            lines = report_lines(self.drop_report, count, cut)
        except Exception as exc:
            self.losses.owe(count)
            self.losses.owe_cut(cut)
            record_failure("sink", exc)
            return 0, b"", []
        return count, b"".join(PREFIX + line + b"\n" for line in lines), cut

    def _stopped(self) -> bool:
        """A writer waiting for room gives up: the shutdown bound ran out (or, for the report
        written at shutdown, what was left of it)."""
        return self._stopping or time.monotonic() >= self._report_until

    def _lose(self, reason: str, lines: Iterable[bytes] = (), *, number: int = 0) -> None:
        self.losses.count(reason, lines, number=number)

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
                        self._write_counted(rest, 0)
                    while queue and not self._stopping:
                        lines = self._take(512)
                        if self._write_counted(PREFIX + _LINE_BREAK.join(lines) + b"\n", 0):
                            self.written += len(lines)
                            self._report_drops()
                    # Also after a burst that ended in a failed write: the report must not
                    # wait for lines that may never come (flush, close and exit still report).
                    self._report_drops()
            finally:
                self._busy = False

    def _write_counted(
        self, data: bytes, report: int, cut: list[tuple[str, int]] | None = None
    ) -> bool:
        """Write a batch (or a drop report of ``report``, naming the ``cut`` test ids) from the
        thread; what cannot be written is counted under its reason (a report's count and ids
        wait for the next report)."""
        try:
            self._write_bytes(data)
            return True
        except Abandoned as stop:  # the shutdown bound ran out: the rest is counted
            rest, reason, exc = stop.rest, AT_SHUTDOWN, None
        except Exception as error:  # a broken pipe or closed file: the batch is lost
            rest, reason, exc = data, WRITE_FAILED, error
        if cut is not None:  # a report: whole lines went out before the rest, the rest is owed
            count, ids = owed(data, rest, report, cut)
            self.losses.owe(count)
            self.losses.owe_cut(ids)
        else:
            self._lose(reason, split_lines(rest))
        if exc is not None:
            record_failure("sink", exc)
        return False

    def _report_drops(self) -> None:
        """Write one ``cvdiag.queue_dropped`` line for the drops not yet reported. A report that
        cannot be written keeps its count for the next attempt, so no drop goes unreported."""
        if not self.losses.owing:
            return
        count, report, cut = self._drop_report()
        if report:
            self._write_counted(report, count, cut)

    def abandon(self, until: float | None = None) -> None:
        """The shutdown bound ran out: count what is still queued (and a batch's unwritten
        rest) as lost, so stderr and the log can say it. The writer thread, if it is waiting
        for room, gives up at once and counts its rest itself. Then the report — the count, and
        a line under each test id that lost its terminal — is written, waiting for room until
        ``until`` (``time.monotonic()``; None: only if the pipe takes it now)."""
        self._stopping = True
        try:
            held = self._write_lock.acquire(timeout=1.0)
            try:
                rest, self._rest = self._rest + (b"" if held else bytes(self._inflight)), b""
                self._lose(AT_SHUTDOWN, [*split_lines(rest), *self._take(len(self._queue))])
                if held:  # the report, in what is left of the bound, before the rest is given up
                    waits = until is not None and until > time.monotonic()
                    self._stopping = not waits  # no time left: what the pipe takes now
                    self._report_until = until if until is not None and waits else float("inf")
                    self._report_drops()
            finally:
                if held:
                    self._write_lock.release()
        finally:
            self._stopping = False
            self._report_until = float("inf")

    def _write_bytes(self, data: bytes) -> None:
        raise NotImplementedError

    def _reset_after_fork(self) -> None:
        self._thread = None
        self._write_lock = threading.Lock()
        self._lane.drain_on = None
        self._start_lock = threading.Lock()
        self._bell = _new_bell()
        self._idle = True
        self._busy = False
