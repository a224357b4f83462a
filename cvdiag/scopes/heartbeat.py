"""One heartbeat scheduler for the whole process.

An outstanding LLM call must say "still waiting" every few seconds, and a busy agent backend can
have thousands of calls outstanding at once. A sleeping task or thread per call would cost
thousands of timers, would tie the heartbeat to the caller's event loop (a closed or blocked loop
would silence it) and would need a different design for sync code. Instead one daemon thread owns
a heap of due times: each tick pops only the calls that are due, lets each emit its heartbeat and
pushes it back. Registration is O(log n); ending a call only flips its ``ended`` flag and the heap
entry is dropped lazily when it surfaces (with a compaction when dead entries dominate).

The thread is started on the first registration, so a process whose emitter is disabled (and
therefore never registers anything) never starts it.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from typing import Final, Protocol

from cvdiag.core.guard import record_failure

#: At most this many due beats are taken per lock hold, so registration never waits long.
_BATCH: Final = 1024
#: Dead heap entries tolerated before the heap is rebuilt without them.
_COMPACT_MIN: Final = 1024


class Beating(Protocol):
    """What the scheduler drives: an outstanding call that emits its own heartbeat."""

    @property
    def heartbeat_ended(self) -> bool:
        """True once the call has ended; read without a lock (a stale read is re-checked)."""
        ...

    def heartbeat(self) -> None:
        """Emit one heartbeat unless the call has ended (the call checks under its own lock)."""
        ...


_Entry = tuple[float, int, float, Beating]  # (due, sequence, interval, call)


class HeartbeatScheduler:
    """A heap of due times and one daemon thread that works it off."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[_Entry] = []
        #: Registered calls that have not ended; heap entries beyond these are dead.
        self._live = 0
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    @property
    def outstanding(self) -> int:
        """Calls registered and not yet ended."""
        with self._cond:
            return self._live

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def schedule(self, call: Beating, interval: float) -> None:
        """Beat ``call`` every ``interval`` seconds, the first time one interval from now."""
        entry = (time.monotonic() + interval, next(self._seq), interval, call)
        with self._cond:
            if self._thread is None:
                self._start()
            heapq.heappush(self._heap, entry)
            self._live += 1
            if self._heap[0] is entry:
                # The new call is due before anything the thread is sleeping towards.
                self._cond.notify()

    def ended(self) -> None:
        """Account for a call that has ended; its heap entry is dropped when it surfaces."""
        with self._cond:
            self._live = max(0, self._live - 1)  # never negative, even after a fork
            heap = self._heap
            dead = len(heap) - self._live
            if dead >= _COMPACT_MIN and dead * 2 > len(heap):
                # Rebuilding is O(n) but happens at most once per n/2 endings: O(1) amortized,
                # and it bounds memory when the interval is long and the call rate high.
                heap = [entry for entry in heap if not entry[3].heartbeat_ended]
                heapq.heapify(heap)
                self._heap = heap

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name="cvdiag-heartbeat", daemon=True)
        thread.start()
        self._thread = thread

    def _take_due(self) -> list[Beating]:
        """Wait until something is due; pop it and push it back one interval later."""
        cond = self._cond
        with cond:
            while True:
                heap = self._heap
                while heap and heap[0][3].heartbeat_ended:
                    heapq.heappop(heap)
                if not heap:
                    cond.wait()
                    continue
                now = time.monotonic()
                delay = heap[0][0] - now
                if delay > 0:
                    cond.wait(delay)
                    continue
                due: list[Beating] = []
                while heap and heap[0][0] <= now and len(due) < _BATCH:
                    when, seq, interval, call = heap[0]
                    if call.heartbeat_ended:
                        heapq.heappop(heap)
                        continue
                    following = when + interval
                    if following <= now:
                        # Behind schedule (a stalled process, a huge batch): skip the missed
                        # beats rather than emit a burst of them.
                        following = now + interval
                    heapq.heapreplace(heap, (following, seq, interval, call))
                    due.append(call)
                return due

    def _run(self) -> None:
        while True:
            try:
                due = self._take_due()
            except Exception as exc:  # pragma: no cover - defensive: keep the thread alive
                record_failure("heartbeat", exc)
                time.sleep(0.1)
                continue
            for call in due:
                try:
                    call.heartbeat()
                except Exception as exc:
                    record_failure("heartbeat", exc)

    def _reset_after_fork(self) -> None:
        """A forked child has no scheduler thread and none of the parent's calls."""
        self._cond = threading.Condition(threading.Lock())
        self._heap = []
        self._live = 0
        self._thread = None


_scheduler = HeartbeatScheduler()


def scheduler() -> HeartbeatScheduler:
    """The process-wide heartbeat scheduler."""
    return _scheduler


os.register_at_fork(after_in_child=_scheduler._reset_after_fork)
