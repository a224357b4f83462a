"""The floor: not cvdiag, but the least any middleware doing cvdiag's default-tier job must do
per request, written as plainly as Python allows. ``benchmarks/middleware.py`` runs it in-process
and ``benchmarks/server.py`` on a real server (the ``floor`` variant), so cvdiag's own cost is
what it pays above the floor.

Per request the floor mints a UUIDv7 trace id, sets a context variable, wraps ``send`` (its
terminal comes after the final body message) and writes one line shaped like cvdiag's
``backend.response.complete`` (same keys and order, about 650 bytes) through the StdoutSink
cvdiag uses. It reads no header, counts no byte or event (its figures are constants) and
scrubs nothing: a lower bound, below what the default tier must do.

``Floor``'s ``send`` wrapper is a coroutine; ``PlainFloor``'s is a plain function for mid-stream
messages, returning the server's own awaitable.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from contextvars import ContextVar
from random import getrandbits
from typing import Any

import orjson

from cvdiag.pipeline.envelope import NULL_EDGE_HEADERS, clock_now
from cvdiag.schema.ids import new_uuid7
from cvdiag.sinks import StdoutSink

App = Any
_FLOOR_CONTEXT: ContextVar[str | None] = ContextVar("floor", default=None)


class Floor:
    """A pure-ASGI middleware reduced to what observing a response's end requires."""

    def __init__(self, app: App, *, events: int = 20, queue_size: int = 1_000_000) -> None:
        self.app = app
        self.events = events
        self.sink = StdoutSink(queue_size=queue_size)

    def complete(self, trace_id: str, started: int) -> None:
        """One line shaped like cvdiag's ``backend.response.complete`` (same keys and order)."""
        duration = (time.monotonic_ns() - started) // 1_000_000
        self.sink.write_line(
            orjson.dumps(
                {
                    "schema_version": 1,
                    "test_id": "0190d6a0-5c2e-7c3a-9f1e-2b3c4d5e6f70",
                    "trace_id": trace_id,
                    "span_id": f"{getrandbits(64):016x}",
                    "parent_span_id": "ece8f97a83dd335f",
                    "layer": "backend",
                    "boundary": "backend.response.complete",
                    "slug": "unknown",
                    "demo": "chat",
                    "ts": clock_now(),
                    "mono_ns": time.monotonic_ns(),
                    "duration_ms": duration,
                    "outcome": "ok",
                    "edge_headers": NULL_EDGE_HEADERS,
                    "metadata": {
                        "http_status": 200,
                        "content_length": 1490,
                        "total_duration_ms": duration,
                        "sse_event_count": self.events,
                    },
                }
            )
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)  # type: ignore[no-any-return]
        trace_id = new_uuid7()
        started = time.monotonic_ns()
        token = _FLOOR_CONTEXT.set(trace_id)

        async def observed(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.complete(trace_id, started)

        try:
            await self.app(scope, receive, observed)
        finally:
            _FLOOR_CONTEXT.reset(token)


class PlainFloor(Floor):
    """``Floor`` with a ``send`` wrapper that is a plain function for mid-stream messages."""

    async def _last(self, send: Any, message: dict[str, Any], trace_id: str, started: int) -> None:
        await send(message)
        self.complete(trace_id, started)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)  # type: ignore[no-any-return]
        trace_id = new_uuid7()
        started = time.monotonic_ns()
        token = _FLOOR_CONTEXT.set(trace_id)

        def observed(message: dict[str, Any]) -> Awaitable[None]:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                return self._last(send, message, trace_id, started)
            return send(message)  # type: ignore[no-any-return]

        try:
            await self.app(scope, receive, observed)
        finally:
            _FLOOR_CONTEXT.reset(token)
