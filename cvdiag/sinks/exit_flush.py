"""Write out what is queued at exit and on SIGTERM, and start afresh in a forked child.

Queued sinks register here when their writer starts; ``before_exit`` lets other parts say what
must still be said first (a call outstanding at shutdown ends, cvdiag/scopes/llm_calls.py).
Shutdown waits for a slow reader at most ``shutdown_seconds`` (``CVDIAG_SHUTDOWN_FLUSH_SECONDS``),
then counts what is left as not written, says so in the log (a ``cvdiag.queue_dropped`` line, and
one under each test id whose terminal was lost, written in the last ``REPORT_SHARE`` of the bound,
kept for them) and on stderr in one line: a reader of the log can then tell a story the writer
cut from one that failed, or never happened.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Protocol

from cvdiag.core.guard import record_failure, say
from cvdiag.sinks.losses import Losses


class Queued(Protocol):
    """What the exit flush asks of a queued sink (``QueuedLineSink`` is one)."""

    def flush(self, timeout: float = 5.0) -> None: ...

    def abandon(self, until: float | None = None) -> None: ...

    @property
    def losses(self) -> Losses: ...

    def _reset_after_fork(self) -> None: ...


#: Every queued sink alive in the process: each registers itself when it is built.
live_sinks: weakref.WeakSet[Queued] = weakref.WeakSet()
_hooks_installed = False
#: How long shutdown waits for a slow reader before it counts the rest as not written; the
#: emitter sets it from ``Settings.shutdown_flush_seconds``. Below gunicorn's graceful timeout
#: (30 s), so the worker says what it left before the master kills it.
shutdown_seconds = 5.0


#: The share of the shutdown bound kept for the report of what was not written: the lines
#: queued get the rest, then the report is written, waiting for room, in this last part.
REPORT_SHARE = 0.25

#: Run before the exit flush: what must still be said (a call outstanding at shutdown ends).
_before_exit: list[Callable[[], object]] = []


def before_exit(fn: Callable[[], object]) -> None:
    """Have ``fn`` run at exit and on SIGTERM, just before the queued lines are written."""
    _before_exit.append(fn)


#: The running loop or None: the C function itself, with no Python frame of ours per line.
running_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio._get_running_loop


def flush_all(timeout: float | None = None, sinks: Iterable[Queued] | None = None) -> None:
    """Shutdown: write what is queued within ``timeout`` seconds (``shutdown_seconds`` unless
    given) less the report's share, then count what is left as not written, report it in the
    log (the count, and the test ids that lost their terminal) within the rest of the bound,
    and say on stderr, in one line, what this process did not write."""
    for fn in _before_exit:
        try:
            fn()
        except Exception as exc:
            record_failure("sink", exc)
    chosen = list(live_sinks if sinks is None else sinks)
    bound = shutdown_seconds if timeout is None else timeout
    deadline = time.monotonic() + bound
    for sink in chosen:
        sink.flush(max(0.0, deadline - bound * REPORT_SHARE - time.monotonic()))
    for sink in chosen:
        try:
            sink.abandon(deadline)
            line = sink.losses.stderr_line()
        except Exception as exc:
            record_failure("sink", exc)
            continue
        if line is not None:
            say(line)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    flush_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_exit_hooks(*, bound: float | None = None) -> None:
    """Flush at normal exit (uncaught exceptions included) and on SIGTERM.

    The SIGTERM handler is installed only where none is, and as early as possible: an enabled
    emitter calls this when it is built. That matters under uvicorn, which saves the handlers it
    finds at startup and, after its graceful shutdown, restores them and raises the signal again:
    found in place, this handler then flushes before the process ends.
    """
    global _hooks_installed, shutdown_seconds
    if bound is not None:
        shutdown_seconds = bound
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(flush_all)
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):  # not the main interpreter, or no signals here
            pass


def _after_fork_in_child() -> None:
    for sink in list(live_sinks):
        sink._reset_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
