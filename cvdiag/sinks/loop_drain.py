"""The queued sink's drain from the event loop: non-blocking writes, once per burst.

On an event loop the stdout sink writes from the loop itself, so no thread has to wake (and take
the GIL from the loop) once per burst: a drain is scheduled ``LINGER`` seconds after the first
line of a burst, writes what the descriptor takes now, and schedules itself again while the pipe
is full. A write refused by a blocking-call detector (blockbuster's ``BlockingError`` on a
regular file, whose writes may block) hands everything to the writer thread instead, for good.
"""

from __future__ import annotations

from cvdiag.core.guard import say
from cvdiag.sinks.descriptor import write_lines
from cvdiag.sinks.lane import Lane
from cvdiag.sinks.losses import Losses


class LoopDrain:
    """What ``QueuedLineSink`` does on the loop around its lane's drain (sinks/lane.py): the
    descriptor, a refused write, the drop report; the state is the sink's (sinks/queued.py)."""

    LINGER: float
    losses: Losses
    written: int
    _lane: Lane
    _forced: bool

    def atomic_limit(self) -> int | None:
        """The largest write that reaches this sink's descriptor whole beside other processes'
        writes (``PIPE_BUF`` on a pipe), or None: no limit (a regular file)."""
        return None

    def _loop_descriptor(self) -> int | None:
        """A non-blocking descriptor to write from the loop, or None to use the thread."""
        return None

    def _ring(self) -> None:
        raise NotImplementedError

    def _drop_report(self) -> tuple[int, bytes, list[tuple[str, int]]]:
        raise NotImplementedError

    def _lost(self, data: bytes, exc: BaseException) -> None:
        raise NotImplementedError

    def _drain_from_loop(self, fd: int) -> None:
        """Write what is queued without blocking (``Lane.drain``, compiled with the request
        path); what the pipe cannot take now waits for the next drain."""
        self._lane.drain(fd)

    def _refuse_loop(self, exc: Exception) -> None:
        """Writing from the loop was refused (blockbuster's ``BlockingError`` on a blocking file):
        the writer thread takes over what is queued, the rest of a batch included."""
        lane = self._lane
        lane.refused = True
        lane.drain_on = None
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
        self._lane.rest = report[written:]  # a part taken (never on a pipe): finished first
        return not self._lane.rest

    def _loop_drains(self) -> bool:
        """Whether a live event loop will write what is queued, so the thread need not wake
        (unless a flush asks it to): a loop that closed first leaves its lines to the thread."""
        loop = self._lane.drain_on
        return loop is not None and not self._forced and not loop.is_closed()
