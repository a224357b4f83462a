"""Per-request cost of ``CvdiagMiddleware`` on a 20-event SSE endpoint, against the bare app.

Run: ``python benchmarks/middleware.py [--rounds 30] [--requests 200] [--spec 2.3] [--json]``.

Everything is in-process: the ASGI app is called directly with a fake ``receive`` and ``send``,
no network. Variants, interleaved in every round (the order rotates from round to round):

  (a) the bare Starlette app
  (b) CvdiagMiddleware, cvdiag disabled (the process-wide emitter, as with the variable unset)
  (c) default tier, (d) verbose tier, (e) debug tier (each middleware owning its emitter)
  (f) opentelemetry-instrumentation-asgi, its own SDK tracer provider, in-memory exporter
  (g) verbose tier with the OpenTelemetry bridge on, its own SDK provider (see below)
  (h) the floor (benchmarks/floor.py): not cvdiag, but the least any middleware doing this job
      must do per request: wrap ``send`` (its terminal comes after the final body message), set
      a context variable, mint a UUIDv7 trace id, build one envelope-sized line shaped like
      cvdiag's ``backend.response.complete`` (about 650 bytes) and write it through its own
      StdoutSink, the sink cvdiag uses. Its ``send`` wrapper is a coroutine, as cvdiag's was.
  (i) the same floor with a plain-function ``send`` wrapper: mid-stream messages cost one call
      returning the server's own awaitable, no extra coroutine.
  What (c) costs above (i) is cvdiag's own.

No global OpenTelemetry provider is set: (f) and (g) each get an SDK provider of their own, so no
other variant traces or pays for spans. cvdiag's bridge reads the global provider (it takes its
tracer from ``trace.get_tracer`` and asks ``trace.get_tracer_provider()`` per request whether
tracing is configured), so (g)'s bridge is pointed at its own provider's tracer instead.

Timing and sinks: see benchmarks/harness.py. Every variant's lines are written (to /dev/null)
inside its own block's timing. ``--spec`` sets the scope's ASGI spec_version: "2.3" (uvicorn's)
makes Starlette's StreamingResponse listen for disconnects in a task group; "2.4" skips that,
so the bare app is cheaper and the ratios stricter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from floor import Floor, PlainFloor
from harness import (
    App,
    arguments,
    check_all,
    interleave,
    layers,
    report,
    run_once,
    run_with_stdout_at_devnull,
    summarize,
)
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, Settings, __version__, configure
from cvdiag.pipeline.emitter import Emitter

EVENTS = 20
VARIANTS = (
    "(a) bare app",
    "(b) cvdiag disabled",
    "(c) cvdiag default",
    "(d) cvdiag verbose",
    "(e) cvdiag debug",
    "(f) OTel asgi",
    "(g) verbose + OTel bridge",
    "(h) floor, async wrapper",
    "(i) floor, plain wrapper",
)
#: Room for a whole block's envelopes: the benchmark measures the work, not drops.
BIG: dict[str, Any] = {
    "queue_size": 1_000_000,
    "debug_max_envelopes": 10**9,
    "debug_max_seconds": 1e9,
}


async def sse(request: Request) -> Response:
    async def events() -> AsyncIterator[bytes]:
        for i in range(EVENTS):
            yield (
                b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"token %d"}\n\n' % i
            )

    return StreamingResponse(events(), media_type="text/event-stream")


def starlette_app() -> Starlette:
    return Starlette(routes=[Route("/chat/sse", sse)])


def wrapped(middleware: Any, **options: Any) -> Starlette:
    app = starlette_app()
    app.add_middleware(middleware, **options)
    return app


def own_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def bridge_on_own_provider(app: Starlette, provider: TracerProvider) -> None:
    """Point (g)'s bridge at ``provider`` without making it global (see the module docstring).
    Starlette builds the stack on the first request, so this runs after one."""
    for layer in layers(app):
        if isinstance(layer, CvdiagMiddleware) and layer._emitter is not None:
            bridge = layer._emitter.otel
            assert bridge is not None
            bridge._tracer = provider.get_tracer("cvdiag", __version__)  # type: ignore[assignment]
            bridge.tracing = lambda: True  # type: ignore[method-assign]
            return
    raise RuntimeError("no cvdiag bridge found")


def scope(spec: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/chat/sse",
        "raw_path": b"/chat/sse",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"user-agent", b"bench/1.0"),
            (b"accept", b"text/event-stream"),
            (b"x-test-id", b"0190d6a0-5c2e-7c3a-9f1e-2b3c4d5e6f70"),
            (b"cf-ray", b"8f1e2d3c4b5a6978-AMS"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


def cvdiag_app(tier: str, **options: Any) -> Starlette:
    settings = Settings(enabled=True, tier=tier, **BIG, **options)  # type: ignore[arg-type]
    return wrapped(CvdiagMiddleware, settings=settings)


async def bench(rounds: int, requests: int, spec: str) -> tuple[str, list[Any], dict[str, Any]]:
    configure(Settings(enabled=False))  # (b) reads the process-wide emitter, as in production
    asgi_provider, asgi_spans = own_provider()
    bridge_provider, bridge_spans = own_provider()
    apps: list[App] = [
        starlette_app(),
        wrapped(CvdiagMiddleware, settings=None),
        cvdiag_app("default"),
        cvdiag_app("verbose"),
        cvdiag_app("debug"),
        OpenTelemetryMiddleware(starlette_app(), tracer_provider=asgi_provider),
        cvdiag_app("verbose", otel=True),
        wrapped(Floor, events=EVENTS, queue_size=BIG["queue_size"]),
        wrapped(PlainFloor, events=EVENTS, queue_size=BIG["queue_size"]),
    ]
    variants = dict(zip(VARIANTS, apps, strict=True))
    request_scope = scope(spec)
    await check_all(variants, request_scope, b"", events=EVENTS)
    call = partial(_call, request_scope=request_scope)
    await call(variants["(g) verbose + OTel bridge"])
    bridge_on_own_provider(variants["(g) verbose + OTel bridge"], bridge_provider)  # type: ignore[arg-type]

    spans = {"spans_otel_asgi": 0, "spans_otel_bridge": 0}

    def between() -> None:
        for key, exporter in (("spans_otel_asgi", asgi_spans), ("spans_otel_bridge", bridge_spans)):
            spans[key] += len(exporter.get_finished_spans())
            exporter.clear()

    results = await interleave(variants, call, rounds=rounds, requests=requests, between=between)
    rows = summarize(results, VARIANTS[0])
    emitters = _emitters(variants)
    title = f"{EVENTS}-event SSE, ASGI spec {spec}, {rounds} rounds x {requests} requests"
    return (
        title,
        rows,
        {
            "envelopes_emitted": sum(e.emitted for e in emitters),
            "envelopes_dropped": sum(e.stats()["queue_dropped"] for e in emitters),
            **spans,
        },
    )


async def _call(app: App, *, request_scope: dict[str, Any]) -> int:
    return await run_once(app, request_scope)


def _emitters(variants: dict[str, Any]) -> list[Emitter]:
    """The emitters the cvdiag variants own (found through Starlette's built middleware stack)."""
    return [
        layer._emitter
        for app in variants.values()
        for layer in layers(app)
        if isinstance(layer, CvdiagMiddleware) and layer._emitter is not None
    ]


def main() -> None:
    parser = arguments(__doc__, rounds=30, requests=200)
    parser.add_argument("--spec", default="2.3", help="the scope's ASGI spec_version")
    args = parser.parse_args()
    title, rows, extra = run_with_stdout_at_devnull(
        lambda: bench(args.rounds, args.requests, args.spec)
    )
    report(title, rows, as_json=args.json, extra=extra)


if __name__ == "__main__":
    main()
