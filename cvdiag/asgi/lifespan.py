"""The lifespan's ``send``: queued envelopes are written before the server hears that shutdown
is complete."""

from __future__ import annotations

import asyncio
from typing import Final

from starlette.types import Message, Send

from cvdiag.core.guard import record_failure
from cvdiag.pipeline.emitter import Emitter
from cvdiag.scopes import end_outstanding_calls

#: How long lifespan shutdown may wait for queued envelopes to be written.
_SHUTDOWN_FLUSH_SECONDS: Final = 5.0


def flushing_at_shutdown(send: Send, emitter: Emitter) -> Send:
    """The lifespan's ``send``, unchanged, except that the envelopes still queued are written
    before the server is told shutdown is complete.

    Servers stop on SIGTERM by running lifespan shutdown; uvicorn then restores the signal
    handlers it found and raises SIGTERM again, which ends the process before any atexit
    handler runs. This is the last moment cvdiag is sure to have.
    """

    async def send_after_flush(message: Message) -> None:
        if message.get("type") in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            try:
                end_outstanding_calls()  # each ends with one response saying so
                await asyncio.to_thread(emitter.flush, _SHUTDOWN_FLUSH_SECONDS)
            except Exception as exc:
                record_failure("middleware", exc)
        await send(message)

    return send_after_flush
