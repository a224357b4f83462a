"""Per-request cost of ``CvdiagMiddleware`` on a 20-event SSE endpoint, against the bare app.

Run: ``python benchmarks/middleware.py [--rounds 30] [--requests 200] [--spec 2.3]``.

Everything is in-process: the ASGI app is called directly with a fake ``receive`` and ``send``,
no network. Variants, interleaved in every round (the order rotates from round to round):

  (a) the bare Starlette app
  (b) CvdiagMiddleware, cvdiag disabled (the process-wide emitter, as with the variable unset)
  (c) default tier, (d) verbose tier, (e) debug tier (each middleware owning its emitter)
  (f) opentelemetry-instrumentation-asgi, SDK tracer provider, in-memory exporter
  (g) verbose tier with the OpenTelemetry bridge on (same SDK provider, set globally)
  (h) the floor: not cvdiag, but the least any middleware doing this job must do per request:
      wrap ``send`` (its terminal comes after the final body message), set a context variable,
      mint a UUIDv7 trace id and queue one orjson line. What (c) costs above (h) is cvdiag's own.

Sink: the real ``StdoutSink`` (its queue and writer thread included), with ``sys.stdout``
pointed at /dev/null for the run; each round ends with a flush, outside the timed calls. Each
request is timed on its own with ``perf_counter_ns``; the table shows the median and p90 per
request and the median's ratio to (a). ``--spec`` sets the scope's ASGI spec_version: "2.3"
(uvicorn's) makes Starlette's StreamingResponse listen for disconnects in a task group; "2.4"
skips that, so the bare app is cheaper and the ratios stricter.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, Settings, configure
from cvdiag.emitter import Emitter
from cvdiag.ids import new_uuid7

EVENTS = 20
App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def sse(request: Request) -> Response:
    async def events() -> AsyncIterator[bytes]:
        for i in range(EVENTS):
            yield (
                b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"token %d"}\n\n' % i
            )

    return StreamingResponse(events(), media_type="text/event-stream")


class Floor:
    """(h): a pure-ASGI middleware reduced to what observing a stream's end requires."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.lines: deque[bytes] = deque(maxlen=10_000)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        trace_id = new_uuid7()
        token = _FLOOR_CONTEXT.set(trace_id)

        async def observed(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.lines.append(orjson.dumps({"trace_id": trace_id, "boundary": "complete"}))

        try:
            await self.app(scope, receive, observed)
        finally:
            _FLOOR_CONTEXT.reset(token)


_FLOOR_CONTEXT: ContextVar[str | None] = ContextVar("floor", default=None)


def starlette_app() -> Starlette:
    return Starlette(routes=[Route("/chat/sse", sse)])


def floor_app() -> Starlette:
    app = starlette_app()
    app.add_middleware(Floor)
    return app


def with_cvdiag(settings: Settings | None) -> Starlette:
    app = starlette_app()
    app.add_middleware(CvdiagMiddleware, settings=settings)
    return app


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


async def run_once(app: App, request_scope: dict[str, Any]) -> int:
    """One request; returns its duration in ns. ``receive`` waits once the body is read, like a
    live client, until Starlette cancels its disconnect listener."""
    delivered = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        return None

    start = time.perf_counter_ns()
    await app(dict(request_scope), receive, send)
    return time.perf_counter_ns() - start


def _p(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


async def bench(rounds: int, requests: int, spec: str) -> None:
    big = {"queue_size": 1_000_000, "debug_max_envelopes": 10**9, "debug_max_seconds": 1e9}
    configure(Settings(enabled=False))  # (b) reads the process-wide emitter, as in production
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the bridge (g) uses the global provider, as users do
    variants: dict[str, App] = {
        "(a) bare app": starlette_app(),
        "(b) cvdiag disabled": with_cvdiag(None),
        "(c) cvdiag default": with_cvdiag(Settings(enabled=True, tier="default", **big)),  # type: ignore[arg-type]
        "(d) cvdiag verbose": with_cvdiag(Settings(enabled=True, tier="verbose", **big)),  # type: ignore[arg-type]
        "(e) cvdiag debug": with_cvdiag(Settings(enabled=True, tier="debug", **big)),  # type: ignore[arg-type]
        "(f) OTel asgi": OpenTelemetryMiddleware(starlette_app(), tracer_provider=provider),
        "(g) verbose + OTel bridge": with_cvdiag(
            Settings(enabled=True, tier="verbose", otel=True, **big)  # type: ignore[arg-type]
        ),
        "(h) floor": floor_app(),
    }
    request_scope = scope(spec)
    samples: dict[str, list[int]] = {name: [] for name in variants}
    names = list(variants)
    for name in names:  # warm up: build middleware stacks, fill caches
        for _ in range(50):
            await run_once(variants[name], request_scope)
    emitters = _emitters(variants)
    for round_no in range(rounds):
        order = names[round_no % len(names) :] + names[: round_no % len(names)]
        for name in order:
            app = variants[name]
            gc.collect()
            for _ in range(requests):
                samples[name].append(await run_once(app, request_scope))
        for emitter in emitters:
            emitter.flush(30)
        exporter.clear()
    base = statistics.median(samples["(a) bare app"])
    print(
        f"{EVENTS}-event SSE, ASGI spec {spec}, {rounds} rounds x {requests} requests per variant",
        file=sys.stderr,
    )
    print(f"{'variant':<26} {'median µs':>10} {'p90 µs':>9} {'ratio':>7}", file=sys.stderr)
    for name in names:
        median = statistics.median(samples[name])
        print(
            f"{name:<26} {median / 1000:>10.1f} {_p(samples[name], 0.9):>9.1f}"
            f" {median / base:>6.3f}x",
            file=sys.stderr,
        )
    dropped = sum(e.stats()["queue_dropped"] for e in emitters)
    emitted = sum(e.emitted for e in emitters)
    print(f"envelopes emitted {emitted}, dropped {dropped}", file=sys.stderr)


def _emitters(variants: dict[str, Any]) -> list[Emitter]:
    """The emitters the cvdiag variants own (found through Starlette's built middleware stack)."""
    found: list[Emitter] = []
    for app in variants.values():
        layer = getattr(app, "middleware_stack", None)
        while layer is not None:
            if isinstance(layer, CvdiagMiddleware) and layer._emitter is not None:
                found.append(layer._emitter)
            layer = getattr(layer, "app", None)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--requests", type=int, default=200, help="requests per variant per round")
    parser.add_argument("--spec", default="2.3", help="the scope's ASGI spec_version")
    args = parser.parse_args()
    # Line-buffered, as stdout is under PYTHONUNBUFFERED=1 (most container images) or on a
    # terminal: the stdout sink then writes from the event loop (docs/performance.md).
    devnull = open(os.devnull, "w", buffering=1)  # noqa: SIM115 - held for the whole run
    real_stdout, sys.stdout = sys.stdout, devnull
    try:
        asyncio.run(bench(args.rounds, args.requests, args.spec))
    finally:
        sys.stdout = real_stdout
        devnull.close()


if __name__ == "__main__":
    main()
