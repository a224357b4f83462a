"""The queued sink's hot path, compiled with the request path: a line queued, a burst drained.

Every line a request writes is queued here (``Lane.put``), and on an event loop each burst is
drained from the loop here (``Lane.drain``): what a line costs its caller, and what a burst costs
the loop. The sink (``QueuedLineSink``, sinks/queued.py) keeps everything else — the writer
thread, the loss reports, flush and exit — and holds one lane, whose queue is its own. A class of
its own, not the sink's: mypyc compiles a class as a native one, and the sink mixes in its loop
drain, is subclassed in Python (stdout, file, the tests' sinks) and held in a ``WeakSet``; a lane
is none of these, and the sink reaches it with no Python frame of its own (``write_line`` is the
lane's ``put`` itself, where a subclass does not override it).

What the lane asks of its sink on the way (its descriptor, a loss counted, the thread started,
a drop report written) goes through ``Owner``; the state a line or a burst reads each time (the
queue, the drain scheduled, the rest of a batch the pipe did not take) is the lane's own.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from cvdiag.sinks.base import PREFIX
from cvdiag.sinks.descriptor import PIPE_BUF, write_lines
from cvdiag.sinks.losses import QUEUE_FULL, Losses

_LINE_BREAK: Final = b"\n" + PREFIX
#: Lines joined per write from the loop (about 64 KiB of envelopes).
_LOOP_SLICE: Final = 100
#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round). The C
#: function itself: no Python frame of ours per line.
_running_loop: Final = asyncio._get_running_loop


class Owner(Protocol):
    """What a lane asks of its sink (``QueuedLineSink``): each only once a burst, or rarer."""

    LINGER: float
    losses: Losses
    written: int
    _write_lock: threading.Lock
    _thread: threading.Thread | None
    _idle: bool

    def _lose(self, reason: str, lines: Iterable[bytes] = (), *, number: int = 0) -> None: ...

    def _loop_descriptor(self) -> int | None: ...

    def atomic_limit(self) -> int | None: ...

    def _start(self) -> None: ...

    def _ring(self) -> None: ...

    def _report_from_loop(self, fd: int) -> bool: ...

    def _lost(self, data: bytes, exc: BaseException) -> None: ...

    def _refuse_loop(self, exc: Exception) -> None: ...


class Lane:
    """A sink's bounded queue of lines, and its drain from the event loop (sinks/loop_drain.py
    says how a drain writes; sinks/queued.py, what the thread does)."""

    def __init__(self, owner: Owner, size: int) -> None:
        self.owner = owner
        self.size = size
        self.lines: collections.deque[bytes] = collections.deque()
        self._append: Callable[[bytes], None] = self.lines.append
        #: The loop a drain is scheduled on (one per burst).
        self.drain_on: asyncio.AbstractEventLoop | None = None
        #: A blocking-call detector refused the loop's write: the thread writes from now on.
        self.refused = False
        #: What a non-blocking write on the loop could not place yet: written before anything.
        self.rest = b""
        #: The descriptor the sink writes ``sys.stdout`` on from the loop, and which
        #: ``sys.stdout`` object it is for (``known``); None: ask the sink.
        self.fd_of: object = None
        self.fd: int | None = None

    def known(self, stdout: object, fd: int | None) -> None:
        """The sink's descriptor for ``stdout``, while ``sys.stdout`` is that object (a stdout
        sink tells its lane; None, None when the descriptor changes)."""
        self.fd_of = stdout
        self.fd = fd

    def put(self, line: bytes) -> None:
        """Queue one serialized envelope; never blocks. When the queue is full the oldest line
        is dropped and counted."""
        lines = self.lines
        if len(lines) >= self.size:
            try:
                old = lines.popleft()
            except IndexError:
                pass
            else:
                self.owner._lose(QUEUE_FULL, (old,))
        self._append(line)
        loop = _running_loop()
        if loop is not None:
            if self.drain_on is loop:
                return  # this burst's drain is already due on this loop: it takes the line too
            owner = self.owner
            if self.refused:
                fd = None
            elif self.fd_of is not None and self.fd_of is sys.stdout:
                fd = self.fd  # the descriptor the sink found for this stdout, asked once
            else:
                fd = owner._loop_descriptor()
            if fd is not None:
                # On the loop: drain from the loop, once per burst; no thread wakes.
                self.drain_on = loop
                loop.call_later(owner.LINGER, self.drain, fd)
                if owner._thread is None:
                    owner._start()  # idle: it writes for flush, exit and a closed loop
                return
        owner = self.owner
        if owner._idle:
            owner._idle = False
            owner._ring()

    def take(self, count: int) -> list[bytes]:
        """Up to ``count`` queued lines, oldest first."""
        lines = self.lines
        popleft = lines.popleft
        batch: list[bytes] = []
        # One line at a time: another thread may queue a line meanwhile, never lost.
        while lines and len(batch) < count:
            batch.append(popleft())
        return batch

    def drain(self, fd: int) -> None:
        """Write what is queued without blocking; what the pipe cannot take now waits. Writes go
        in pieces of whole lines the kernel keeps whole (cvdiag/sinks/descriptor.py), and a
        piece taken in part is finished before anything else is written."""
        self.drain_on = None
        owner = self.owner
        lock = owner._write_lock
        if not lock.acquire(False):
            return  # the thread is writing, and takes what is queued with it
        try:
            # A burst goes out in slices of at most _LOOP_SLICE lines: a few hundred KiB joined
            # at once costs fresh pages (a new mapping) every drain, a slice stays in cache.
            while True:
                if not self.rest:
                    if owner.losses.owing and not owner._report_from_loop(fd):
                        break  # the pipe is full: the report, and the lines after it, wait
                    lines = self.take(_LOOP_SLICE)
                    if not lines:
                        break
                    self.rest = PREFIX + _LINE_BREAK.join(lines) + b"\n"
                    owner.written += len(lines)
                data = self.rest
                # A sink's limit is PIPE_BUF or none: a batch within PIPE_BUF (a burst of a few
                # lines, the usual one) is one write either way, and only a larger one asks.
                if len(data) <= PIPE_BUF:
                    try:  # ``os.write`` looked up each time: a blocking-call detector patches it
                        done = os.write(fd, data)
                    except BlockingIOError:  # the pipe is full
                        done = 0
                else:
                    done = write_lines(fd, data, owner.atomic_limit())
                self.rest = data[done:] if done < len(data) else b""
                if self.rest:
                    break  # the pipe is full: the rest waits for the next drain
                if not self.lines and not owner.losses.owing:
                    break  # all out (the usual end): no second look at the queue
        except OSError as exc:  # a broken pipe: what was taken is lost, and counted
            owner._lost(self.rest, exc)
            self.rest = b""
        except Exception as exc:  # a blocking-call detector refused the write: not lost
            owner._refuse_loop(exc)
        finally:
            lock.release()
        if self.refused:
            owner._ring()
        elif self.rest or self.lines:
            loop = _running_loop()
            if loop is not None and self.drain_on is None:  # a full pipe: try again later
                self.drain_on = loop
                loop.call_later(owner.LINGER, self.drain, fd)
