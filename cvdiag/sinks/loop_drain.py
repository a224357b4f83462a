"""The queued sink's drain from the event loop: non-blocking writes, once per burst.

On an event loop the stdout sink writes from the loop itself, so no thread has to wake (and take
the GIL from the loop) once per burst: a drain is scheduled ``LINGER`` seconds after the first
line of a burst, writes what the descriptor takes now, and schedules itself again while the pipe
is full. A write refused by a blocking-call detector (blockbuster's ``BlockingError`` on a
regular file, whose writes may block) hands everything to the writer thread instead, for good.
"""

from __future__ import annotations

import asyncio
import collections
import threading

from cvdiag.core.guard import say
from cvdiag.sinks.base import PREFIX
from cvdiag.sinks.descriptor import PIPE_BUF, write_lines, write_some
from cvdiag.sinks.exit_flush import running_loop
from cvdiag.sinks.losses import Losses

_LINE_BREAK = b"\n" + PREFIX
#: Lines joined per write from the loop (about 64 KiB of envelopes).
_LOOP_SLICE = 100


class LoopDrain:
    """What ``QueuedLineSink`` does on the loop; the state is the sink's (sinks/queued.py)."""

    LINGER: float
    losses: Losses
    written: int
    _queue: collections.deque[bytes]
    _write_lock: threading.Lock
    _rest: bytes
    _drain_on: asyncio.AbstractEventLoop | None
    _forced: bool
    _loop_refused: bool

    def atomic_limit(self) -> int | None:
        """The largest write that reaches this sink's descriptor whole beside other processes'
        writes (``PIPE_BUF`` on a pipe), or None: no limit (a regular file)."""
        return None

    def _loop_descriptor(self) -> int | None:
        """A non-blocking descriptor to write from the loop, or None to use the thread."""
        return None

    def _take(self, count: int) -> list[bytes]:
        raise NotImplementedError

    def _ring(self) -> None:
        raise NotImplementedError

    def _drop_report(self) -> tuple[int, bytes, list[tuple[str, int]]]:
        raise NotImplementedError

    def _lost(self, data: bytes, exc: BaseException) -> None:
        raise NotImplementedError

    def _drain_from_loop(self, fd: int) -> None:
        """Write what is queued without blocking; what the pipe cannot take now waits. Writes go
        in pieces of whole lines the kernel keeps whole (cvdiag/sinks/descriptor.py), and a
        piece taken in part is finished before anything else is written."""
        self._drain_on = None
        if not self._write_lock.acquire(blocking=False):
            return  # the thread is writing, and takes what is queued with it
        try:
            # A burst goes out in slices of at most _LOOP_SLICE lines: a few hundred KiB joined
            # at once costs fresh pages (a new mapping) every drain, a slice stays in cache.
            while True:
                if not self._rest:
                    if self.losses.owing and not self._report_from_loop(fd):
                        break  # the pipe is full: the report, and the lines after it, wait
                    lines = self._take(_LOOP_SLICE)
                    if not lines:
                        break
                    self._rest = PREFIX + _LINE_BREAK.join(lines) + b"\n"
                    self.written += len(lines)
                data = self._rest
                # A sink's limit is PIPE_BUF or none: a batch within PIPE_BUF (a burst of a few
                # lines, the usual one) is one write either way, and only a larger one asks.
                if len(data) <= PIPE_BUF:
                    done = write_some(fd, data)
                else:
                    done = write_lines(fd, data, self.atomic_limit())
                self._rest = self._rest[done:]
                if self._rest:
                    break  # the pipe is full: the rest waits for the next drain
                if not self._queue and not self.losses.owing:
                    break  # all out (the usual end): no second look at the queue
        except OSError as exc:  # a broken pipe: what was taken is lost, and counted
            self._lost(self._rest, exc)
            self._rest = b""
        except Exception as exc:  # a blocking-call detector refused the write: not lost
            self._refuse_loop(exc)
        finally:
            self._write_lock.release()
        if self._loop_refused:
            self._ring()
        elif self._rest or self._queue:
            loop = running_loop()
            if loop is not None and self._drain_on is None:  # a full pipe: try again later
                self._drain_on = loop
                loop.call_later(self.LINGER, self._drain_from_loop, fd)

    def _refuse_loop(self, exc: Exception) -> None:
        """Writing from the loop was refused (blockbuster's ``BlockingError`` on a blocking file):
        the writer thread takes over what is queued, the rest of a batch included."""
        self._loop_refused = True
        self._drain_on = None
        say(
            f"writing from the writer thread: the event loop's write was refused"
            f" ({type(exc).__name__}); nothing is dropped"
        )

    def _report_from_loop(self, fd: int) -> bool:
        """Write the drop report the log owes, alone and without blocking; whether it went."""
        count, report, cut = self._drop_report()
        if not report:
            return True
        written = write_lines(fd, report, self.atomic_limit())
        if written == 0:  # the pipe is full: the count and the ids wait for the next report
            self.losses.owe(count)
            self.losses.owe_cut(cut)
            return False
        self._rest = report[written:]  # a part taken (never on a pipe): finished first
        return not self._rest

    def _loop_drains(self) -> bool:
        """Whether a live event loop will write what is queued, so the thread need not wake
        (unless a flush asks it to): a loop that closed first leaves its lines to the thread."""
        loop = self._drain_on
        return loop is not None and not self._forced and not loop.is_closed()
