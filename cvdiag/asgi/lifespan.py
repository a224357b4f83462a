"""The lifespan's ``send``: queued envelopes are written before the server hears that shutdown
is complete.

The flush waits in a worker thread through anyio (Starlette's dependency), so the lifespan
works under asyncio and trio alike; on an event loop anyio does not know, it waits right there,
blocking that loop at shutdown only, the last moment there is.
"""

from __future__ import annotations

from typing import Final

from starlette.types import Message, Send

from cvdiag.core.guard import record_failure
from cvdiag.pipeline.emitter import Emitter
from cvdiag.scopes import end_outstanding_calls

_SHUTDOWN: Final = ("lifespan.shutdown.complete", "lifespan.shutdown.failed")


def flushing_at_shutdown(send: Send, emitter: Emitter) -> Send:
    """The lifespan's ``send``, unchanged, except that the envelopes still queued are written
    before the server is told shutdown is complete.

    Servers stop on SIGTERM by running lifespan shutdown; uvicorn then restores the signal
    handlers it found and raises SIGTERM again, which ends the process before any atexit
    handler runs. This is the last moment cvdiag is sure to have.
    """

    async def send_after_flush(message: Message) -> None:
        try:
            ending = message.get("type") in _SHUTDOWN
        except Exception:  # not a mapping: the server's to judge, passed on as it came
            ending = False
        if ending:
            try:
                end_outstanding_calls()  # each ends with one response saying so
                await _flush(emitter)
            except Exception as exc:
                record_failure("middleware", exc)
        await send(message)

    return send_after_flush


async def _flush(emitter: Emitter) -> None:
    """``emitter.shut_down`` in a worker thread, so the loop goes on meanwhile: what is queued
    is written within the settings' ``shutdown_flush_seconds``, and what is left is counted and
    said on stderr (uvicorn may end the process before any atexit handler runs)."""
    try:
        from anyio.to_thread import run_sync

        await run_sync(emitter.shut_down)
    except Exception:  # no event loop anyio knows: wait here (a second flush costs nothing)
        emitter.shut_down()
