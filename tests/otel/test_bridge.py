"""The OpenTelemetry bridge, against the real SDK with in-memory exporters."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from cvdiag import (
    CvdiagMiddleware,
    LLMCall,
    MemorySink,
    Settings,
    agent_scope,
    configure,
    instrument_httpx,
    llm_call,
)
from cvdiag.pipeline.emitter import get_emitter
from tests.support.otel import sdk, server_span_name
from tests.support.servers import free_port, serve_uvicorn

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN}-01"


@pytest.fixture
def otel() -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    exporter, reader = sdk()
    exporter.clear()
    reader.get_metrics_data()  # drain what earlier tests recorded
    yield exporter, reader
    exporter.clear()


@pytest.fixture
def bridge_on() -> Iterator[MemorySink]:
    sink = MemorySink()
    configure(
        Settings(enabled=True, tier="debug", otel=True, heartbeat_interval=0.05), sinks=[sink]
    )
    yield sink
    configure(Settings(), sinks=[MemorySink()])


async def two_beats(call: LLMCall) -> None:
    """Keep ``call`` outstanding until it has beaten twice into the emitter's memory sink, where
    the test asked for beats every 0.05 s (a moment otherwise). How many beats a fixed wait sees
    is the machine's load: a loaded machine keeps the heartbeat thread off the CPU for hundreds
    of milliseconds."""
    emitter = get_emitter()
    sinks = [sink for sink in emitter.sinks if isinstance(sink, MemorySink)]
    beating = emitter.allows("backend.llm.call.heartbeat")
    if not sinks or not beating or emitter.settings.heartbeat_interval > 0.05:
        await asyncio.sleep(0.1)
        return
    deadline = time.monotonic() + 60  # not a threshold: a heartbeat thread that never beats
    while (
        sum(
            e["boundary"] == "backend.llm.call.heartbeat" and e["parent_span_id"] == call.span_id
            for e in list(sinks[0].envelopes)
        )
        < 2
    ):
        assert time.monotonic() < deadline, "the call never beat twice"
        await asyncio.sleep(0.01)


async def chat(request: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        async with agent_scope("planner", model_id="gpt-test"):
            with llm_call("openai", "gpt-test") as call:
                await two_beats(call)  # heartbeats at 0.05 s
                call.record_response(42)
            yield b'data: {"type": "RUN_STARTED"}\n\n'  # sent while the agent span is active
        for i in range(3):
            yield f'data: {{"type": "TEXT_MESSAGE_CONTENT", "n": {i}}}\n\n'.encode()

    return StreamingResponse(body(), media_type="text/event-stream")


async def boom(request: Request) -> Response:
    with llm_call("anthropic", "claude-test"):
        raise RuntimeError("provider said no")


def app() -> Starlette:
    application = Starlette(routes=[Route("/chat", chat), Route("/boom", boom)])
    application.add_middleware(CvdiagMiddleware)
    return application


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    matches = [s for s in spans if s.name == name]
    assert len(matches) == 1, [s.name for s in spans]
    return matches[0]


def test_request_joins_the_callers_trace_and_scopes_nest(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], bridge_on: MemorySink
) -> None:
    exporter, _ = otel
    with serve_uvicorn(app()) as url:
        response = httpx.get(
            f"{url}/chat", headers={"traceparent": TRACEPARENT, "x-test-id": "d4-otel-1"}
        )
    assert response.status_code == 200
    spans = exporter.get_finished_spans()
    server = by_name(spans, server_span_name("GET", "/chat"))
    agent = by_name(spans, "invoke_agent planner")
    chat_span = by_name(spans, "chat gpt-test")
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE_ID}
    assert server.kind is SpanKind.SERVER
    assert f"{server.parent.span_id:016x}" == PARENT_SPAN  # type: ignore[union-attr]
    assert agent.parent.span_id == server.context.span_id  # type: ignore[union-attr]
    assert chat_span.parent.span_id == agent.context.span_id  # type: ignore[union-attr]
    assert agent.kind is SpanKind.INTERNAL
    assert chat_span.kind is SpanKind.CLIENT
    assert dict(server.attributes or {})["cvdiag.test_id"] == "d4-otel-1"
    assert dict(server.attributes or {})["http.response.status_code"] == 200
    assert dict(agent.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "planner",
        "gen_ai.request.model": "gpt-test",
    }
    chat_attributes = dict(chat_span.attributes or {})
    assert chat_attributes["gen_ai.operation.name"] == "chat"
    assert chat_attributes["gen_ai.provider.name"] == "openai"
    assert chat_attributes["gen_ai.usage.output_tokens"] == 42
    # Every envelope of the request carries the OpenTelemetry trace id.
    assert {env["trace_id"] for env in bridge_on.envelopes} == {TRACE_ID}


def test_a_request_no_test_sent_mints_a_uuid7_test_id_beside_the_otel_trace(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], bridge_on: MemorySink
) -> None:
    # Without the bridge such a request's one minted id is its trace id and its test id; with
    # it the trace id is OpenTelemetry's, which is no UUIDv7, so the test id is minted apart.
    with serve_uvicorn(app()) as url:
        assert httpx.get(f"{url}/chat", headers={"traceparent": TRACEPARENT}).status_code == 200
    assert {env["trace_id"] for env in bridge_on.envelopes} == {TRACE_ID}
    (test_id,) = {env["test_id"] for env in bridge_on.envelopes}
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", test_id
    )


def test_boundaries_become_span_events(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], bridge_on: MemorySink
) -> None:
    exporter, _ = otel
    with serve_uvicorn(app()) as url:
        httpx.get(f"{url}/chat")
    spans = exporter.get_finished_spans()
    chat_events = [e.name for e in by_name(spans, "chat gpt-test").events]
    assert chat_events[0] == "backend.llm.call.start"
    assert chat_events.count("backend.llm.call.heartbeat") >= 2  # from the heartbeat thread
    server_events = list(by_name(spans, server_span_name("GET", "/chat")).events)
    sse = [e for e in server_events if e.name == "backend.sse.event"]
    assert [dict(e.attributes or {})["event_type"] for e in sse] == ["TEXT_MESSAGE_CONTENT"] * 3
    assert server_events[0].name == "backend.request.ingress"
    assert server_events[-1].name == "backend.response.complete"
    agent_events = [e.name for e in by_name(spans, "invoke_agent planner").events]
    assert agent_events[0] == "backend.agent.enter"
    assert agent_events[-1] == "backend.agent.exit"
    assert "backend.sse.first_byte" in agent_events  # emitted while the agent span was active


def test_failures_mark_spans_and_metrics_are_recorded(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], bridge_on: MemorySink
) -> None:
    exporter, reader = otel
    with serve_uvicorn(app()) as url:
        assert httpx.get(f"{url}/boom").status_code == 500
        httpx.get(f"{url}/chat")
    spans = exporter.get_finished_spans()
    failed = by_name(spans, "chat claude-test")
    assert dict(failed.attributes or {})["error.type"] == "RuntimeError"
    assert not failed.status.is_ok
    points: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    durations = points["gen_ai.client.operation.duration"]
    assert {p.attributes["gen_ai.provider.name"] for p in durations} == {"openai", "anthropic"}
    (tokens,) = points["gen_ai.client.token.usage"]
    assert tokens.sum == 42
    assert tokens.attributes["gen_ai.token.type"] == "output"


def test_no_duplicate_server_span_under_the_asgi_instrumentation(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], bridge_on: MemorySink
) -> None:
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    exporter, _ = otel
    with serve_uvicorn(OpenTelemetryMiddleware(app())) as url:
        httpx.get(f"{url}/chat", headers={"x-test-id": "d4-otel-asgi"})
    spans = exporter.get_finished_spans()
    servers = [s for s in spans if s.kind is SpanKind.SERVER]
    assert len(servers) == 1
    assert dict(servers[0].attributes or {})["cvdiag.test_id"] == "d4-otel-asgi"
    agent = by_name(spans, "invoke_agent planner")
    assert agent.parent.span_id == servers[0].context.span_id  # type: ignore[union-attr]


def test_outbound_calls_carry_traceparent(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], bridge_on: MemorySink
) -> None:
    seen: list[dict[str, str]] = []

    async def downstream(request: Request) -> Response:
        seen.append(dict(request.headers))
        return PlainTextResponse("ok")

    with serve_uvicorn(Starlette(routes=[Route("/", downstream)])) as target:

        async def caller(request: Request) -> Response:
            async with instrument_httpx(httpx.AsyncClient()) as client:
                await client.get(target)
            return PlainTextResponse("done")

        upstream = Starlette(routes=[Route("/call", caller)])
        upstream.add_middleware(CvdiagMiddleware)
        with serve_uvicorn(upstream) as url:
            httpx.get(f"{url}/call", headers={"traceparent": TRACEPARENT, "x-test-id": "d4-out"})
    (headers,) = seen
    assert headers["x-test-id"] == "d4-out"
    assert headers["traceparent"].split("-")[1] == TRACE_ID


def test_bridge_off_changes_nothing(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader],
) -> None:
    exporter, _ = otel
    sink = MemorySink()
    configure(Settings(enabled=True, tier="debug"), sinks=[sink])
    try:
        with serve_uvicorn(app()) as url:
            httpx.get(f"{url}/chat", headers={"traceparent": TRACEPARENT})
    finally:
        configure(Settings(), sinks=[MemorySink()])
    assert exporter.get_finished_spans() == ()
    assert TRACE_ID not in {env["trace_id"] for env in sink.envelopes}


NO_SDK = textwrap.dedent(
    """
    import asyncio, json
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from cvdiag import CvdiagMiddleware, MemorySink, Settings, agent_scope, configure

    async def hello(request):
        async with agent_scope("a"):
            return PlainTextResponse("hi")

    sink = MemorySink()
    emitter = configure(Settings(enabled=True, tier="debug", otel=True), sinks=[sink])
    app = Starlette(routes=[Route("/", hello)])
    app.add_middleware(CvdiagMiddleware)
    sent = []

    async def main():
        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}
        async def send(message):
            sent.append(message)
        scope = {"type": "http", "method": "GET", "path": "/", "headers": [
            (b"traceparent", b"%s")], "query_string": b"", "asgi": {"version": "3.0"}}
        await app(scope, receive, send)

    asyncio.run(main())
    print(json.dumps({"status": sent[0]["status"],
                      "trace_ids": sorted({e["trace_id"] for e in sink.envelopes}),
                      "boundaries": [e["boundary"] for e in sink.envelopes],
                      "stats": emitter.stats()}))
    """
)


def test_bridge_without_an_sdk_is_a_no_op() -> None:
    result = subprocess.run(
        [sys.executable, "-c", NO_SDK % TRACEPARENT.encode()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == 200
    assert report["boundaries"][0] == "backend.request.ingress"
    assert TRACE_ID not in report["trace_ids"]  # no SDK: cvdiag's own UUIDv7 trace id
    assert not any(key.startswith("failures.") for key in report["stats"])


def test_the_collector_example_exports_over_otlp() -> None:
    """examples/otel_collector/app.py, run as its README says, exports to an OTLP receiver."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    received: list[ExportTraceServiceRequest] = []

    async def traces(request: Request) -> Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        received.append(message)
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
    port = free_port()
    with serve_uvicorn(collector) as endpoint:
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "CVDIAG_BACKEND_EMITTER": "1",
            "CVDIAG_OTEL": "1",
            "PORT": str(port),
        }
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "otel_collector" / "app.py")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            body = get_when_up(f"http://127.0.0.1:{port}/chat", {"x-test-id": "d4-collector"})
        finally:
            proc.send_signal(signal.SIGTERM)  # uvicorn shuts down; the SDK flushes at exit
            out, _ = proc.communicate(timeout=30)
    assert "cvdiag" in body
    spans = [
        span
        for message in received
        for resource in message.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    server_name = server_span_name("GET", "/chat")
    assert {server_name, "invoke_agent assistant", "chat example-model"} <= {s.name for s in spans}
    (server,) = [s for s in spans if s.name == server_name]
    attributes = {a.key: a.value.string_value for a in server.attributes}
    assert attributes["cvdiag.test_id"] == "d4-collector"
    # The stdout envelopes carry the very trace id the collector received.
    lines = [line for line in out.decode().splitlines() if line.startswith("CVDIAG {")]
    assert lines
    assert {json.loads(line[7:])["trace_id"] for line in lines} == {server.trace_id.hex()}


def get_when_up(url: str, headers: dict[str, str]) -> str:
    deadline = time.monotonic() + 20
    while True:
        try:
            return httpx.get(url, headers=headers, timeout=10).text
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
