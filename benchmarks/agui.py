"""Per-request cost of ``CvdiagMiddleware`` on a realistic AG-UI agent endpoint.

Run: ``python benchmarks/agui.py [--rounds 30] [--requests 100] [--json]``.

The app is what an AG-UI backend looks like: FastAPI, a POST whose JSON body FastAPI validates
as an AG-UI ``RunAgentInput``, and a run streamed as server-sent events: 24 AG-UI events built
as ``ag_ui.core`` models (RUN_STARTED, TEXT_MESSAGE_START, 20 TEXT_MESSAGE_CONTENT,
TEXT_MESSAGE_END, RUN_FINISHED) and encoded by the AG-UI ``EventEncoder``, with one event-loop
iteration per token (``await asyncio.sleep(0)``), as a model's stream gives.

Variants, interleaved in every round (the order rotates from round to round): the bare app,
cvdiag disabled, default, verbose and debug tiers, and opentelemetry-instrumentation-asgi with
its own SDK tracer provider and in-memory exporter (no global provider is set).

In-process, no network; timing, sinks and ratios as in benchmarks/harness.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import orjson
from ag_ui.core import (
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ag_ui.encoder import EventEncoder
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
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

from cvdiag import CvdiagMiddleware, Settings, configure

TOKENS = [f"token{i} " for i in range(20)]
VARIANTS = (
    "bare app",
    "cvdiag disabled",
    "cvdiag default",
    "cvdiag verbose",
    "cvdiag debug",
    "OTel asgi",
)
BIG: dict[str, Any] = {
    "queue_size": 1_000_000,
    "debug_max_envelopes": 10**9,
    "debug_max_seconds": 1e9,
}
BODY = orjson.dumps(
    {
        "threadId": "thread-0190d6a0",
        "runId": "run-5c2e7c3a",
        "state": {"step": 1},
        "messages": [
            {"id": "msg-1", "role": "system", "content": "You are a helpful assistant."},
            {"id": "msg-2", "role": "user", "content": "What is the weather in Amsterdam?"},
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "The weather for a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
        "context": [{"description": "user locale", "value": "nl-NL"}],
        "forwardedProps": {},
    }
)


def agui_app() -> FastAPI:
    app = FastAPI()

    @app.post("/agent")
    async def run_agent(run: RunAgentInput, request: Request) -> StreamingResponse:
        encoder = EventEncoder(accept=request.headers.get("accept"))

        async def events() -> AsyncIterator[str]:
            yield encoder.encode(RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id))
            yield encoder.encode(TextMessageStartEvent(message_id="m1", role="assistant"))
            for token in TOKENS:
                await asyncio.sleep(0)  # the model's next token
                yield encoder.encode(TextMessageContentEvent(message_id="m1", delta=token))
            yield encoder.encode(TextMessageEndEvent(message_id="m1"))
            yield encoder.encode(RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id))

        return StreamingResponse(events(), media_type=encoder.get_content_type())

    return app


def with_cvdiag(settings: Settings | None) -> FastAPI:
    app = agui_app()
    app.add_middleware(CvdiagMiddleware, settings=settings)
    return app


def cvdiag_app(tier: str) -> FastAPI:
    return with_cvdiag(Settings(enabled=True, tier=tier, **BIG))  # type: ignore[arg-type]


SCOPE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.3"},
    "http_version": "1.1",
    "method": "POST",
    "scheme": "http",
    "path": "/agent",
    "raw_path": b"/agent",
    "query_string": b"",
    "root_path": "",
    "headers": [
        (b"host", b"127.0.0.1:8000"),
        (b"user-agent", b"bench/1.0"),
        (b"accept", b"text/event-stream"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
        (b"x-test-id", b"0190d6a0-5c2e-7c3a-9f1e-2b3c4d5e6f70"),
    ],
    "client": ("127.0.0.1", 50000),
    "server": ("127.0.0.1", 8000),
    "state": {},
}


async def bench(rounds: int, requests: int) -> tuple[str, list[Any], dict[str, Any]]:
    configure(Settings(enabled=False))  # "disabled" reads the process-wide emitter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    apps: list[App] = [
        agui_app(),
        with_cvdiag(None),
        cvdiag_app("default"),
        cvdiag_app("verbose"),
        cvdiag_app("debug"),
        OpenTelemetryMiddleware(agui_app(), tracer_provider=provider),
    ]
    variants = dict(zip(VARIANTS, apps, strict=True))
    await check_all(variants, SCOPE, BODY, events=24)
    call = partial(_call, body=BODY)
    spans = 0

    def between() -> None:
        nonlocal spans
        spans += len(exporter.get_finished_spans())
        exporter.clear()

    results = await interleave(variants, call, rounds=rounds, requests=requests, between=between)
    emitters = [
        layer._emitter
        for app in variants.values()
        for layer in layers(app)
        if isinstance(layer, CvdiagMiddleware) and layer._emitter is not None
    ]
    title = f"AG-UI app (24 events), {rounds} rounds x {requests} requests"
    extra = {
        "envelopes_emitted": sum(e.emitted for e in emitters),
        "envelopes_dropped": sum(e.stats()["queue_dropped"] for e in emitters),
        "spans_otel_asgi": spans,
    }
    return title, summarize(results, VARIANTS[0]), extra


async def _call(app: App, *, body: bytes) -> int:
    return await run_once(app, SCOPE, body)


def main() -> None:
    args = arguments(__doc__, rounds=30, requests=100).parse_args()
    title, rows, extra = run_with_stdout_at_devnull(lambda: bench(args.rounds, args.requests))
    report(title, rows, as_json=args.json, extra=extra)


if __name__ == "__main__":
    main()
