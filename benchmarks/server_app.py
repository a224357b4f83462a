"""The app ``benchmarks/server.py`` serves: one variant per server process, chosen by the
environment (``BENCH_VARIANT``), built by uvicorn's ``--factory`` as a user's app is.

Routes, as a user's backend has them:

- ``GET /json``: a small JSON body.
- ``GET /sse``: 20 server-sent events, one event-loop iteration each.
- ``POST /agent``: a 2 KB JSON body read and parsed, then 24 events through sse-starlette's
  ``EventSourceResponse`` (an AG-UI run's shape), one event-loop iteration each.

Variants: ``bare``; cvdiag ``off`` (the middleware, disabled), ``default``, ``verbose``,
``debug``; ``floor`` (``benchmarks/floor.py``: the least a middleware writing the default tier's
one line per request must do, a lower bound); ``correlation`` (asgi-correlation-id: an id and a
context variable, no log line);
``otel`` (opentelemetry-instrumentation-asgi with the SDK and a batch processor exporting to
nothing, as a user with a collector elsewhere pays); ``accesslog`` (the bare app with uvicorn's
access log on, ``server.py`` starting uvicorn with ``--log-level info``: one line per request,
what every user of uvicorn already pays, and what cvdiag's default tier is held to).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

EVENTS = 20
AGENT_EVENTS = 24


async def small_json(request: Request) -> Response:
    return Response(b'{"ok":true,"items":[1,2,3]}', media_type="application/json")


async def sse(request: Request) -> StreamingResponse:
    async def stream() -> AsyncIterator[bytes]:
        for index in range(EVENTS):
            yield b'data: {"delta":"token %d"}\n\n' % index
            await asyncio.sleep(0)

    return StreamingResponse(stream(), media_type="text/event-stream")


async def agent(request: Request) -> Response:
    from sse_starlette.sse import EventSourceResponse

    body = orjson.loads(await request.body())
    run = str(body.get("runId", "run"))

    async def events() -> AsyncIterator[dict[str, str]]:
        for index in range(AGENT_EVENTS):
            yield {
                "data": orjson.dumps(
                    {"type": "TEXT_MESSAGE_CONTENT", "run": run, "delta": f"t{index} "}
                ).decode()
            }
            await asyncio.sleep(0)

    return EventSourceResponse(events(), ping=3600)


async def whoami(request: Request) -> Response:
    """The token ``benchmarks/server.py`` started this process with (see ``Server``)."""
    return Response(os.environ.get("BENCH_TOKEN", ""), media_type="text/plain")


def build() -> Any:
    """The app for ``BENCH_VARIANT`` (uvicorn ``--factory``)."""
    variant = os.environ.get("BENCH_VARIANT", "bare")
    wanted = os.environ.get("BENCH_BUILD")
    if wanted is not None:  # every variant: the floor mints and stamps with cvdiag's code too
        from cvdiag.core.version import BUILD

        found = "compiled" if BUILD == "compiled" else "pure"
        if found != wanted:
            raise SystemExit(f"asked to serve the {wanted} build, found the {found} one")
    app: Any = Starlette(
        routes=[
            Route("/json", small_json),
            Route("/sse", sse),
            Route("/agent", agent, methods=["POST"]),
            # Last, so that it costs the measured routes nothing: which server this is.
            Route("/whoami", whoami),
        ]
    )
    if variant in ("off", "default", "verbose", "debug"):
        from cvdiag import CvdiagMiddleware, Settings, configure

        big: dict[str, Any] = {"debug_max_envelopes": 10**9, "debug_max_seconds": 1e9}
        if variant == "off":
            configure(Settings(enabled=False))
        else:
            configure(Settings(enabled=True, tier=variant, **big))  # type: ignore[arg-type]
        app.add_middleware(CvdiagMiddleware)
    elif variant == "floor":
        from floor import PlainFloor

        app.add_middleware(PlainFloor, events=24)
    elif variant == "correlation":
        from asgi_correlation_id import CorrelationIdMiddleware

        app.add_middleware(CorrelationIdMiddleware)
    elif variant == "otel":
        from opentelemetry import trace
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Nowhere(SpanExporter):
            """A collector elsewhere: spans are built, batched and handed over, then dropped."""

            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Nowhere()))
        trace.set_tracer_provider(provider)
        app = OpenTelemetryMiddleware(app)
    elif variant not in ("bare", "accesslog"):  # the access log is uvicorn's, not the app's
        raise SystemExit(f"unknown BENCH_VARIANT {variant!r}")
    return app
