"""``python -m examples otel_collector``: the app exporting over OTLP to a stand-in collector.

The collector here is a loopback OTLP/HTTP receiver in this process that decodes what the app
exports (``opentelemetry-proto``, which the OTLP exporter brings), so the run can say which
spans arrived and that they carry the trace id of the ``CVDIAG`` lines.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from examples.offline import Client, Example, Visit, World


def chat(client: Client, test_id: str) -> str:
    response = client.http.get("/chat", headers={"x-test-id": test_id})
    return f"HTTP {response.status_code}, {response.text.count('data:')} events"


def receiver() -> tuple[Any, list[Any]]:
    """A Starlette app taking OTLP/HTTP trace exports, and the spans it has decoded."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    spans: list[Any] = []

    async def traces(request: Request) -> Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                spans.extend(scope.spans)
        return Response(b"", media_type="application/x-protobuf")

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])]), spans


@contextlib.contextmanager
def collector() -> Iterator[World]:
    from cvdiag.cli.demo import serve  # uvicorn in a thread on a free loopback port

    app, spans = receiver()

    def report(envelopes: list[dict[str, Any]]) -> list[str]:
        if not spans:
            return ["", "the collector received no span"]
        names = ", ".join(sorted({span.name for span in spans}))
        traces = ", ".join(sorted({span.trace_id.hex() for span in spans}))
        logged = ", ".join(sorted({str(e.get("trace_id")) for e in envelopes}))
        same = "the same as" if traces == logged else f"not {logged}, the one on"
        return [
            "",
            f"the collector received {len(spans)} spans: {names}",
            f"  their trace id {traces} is {same} the CVDIAG lines",
        ]

    with serve(app) as url:
        yield World(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": url},
            describe=[
                f"the collector: an OTLP/HTTP receiver on {url} (OTEL_EXPORTER_OTLP_ENDPOINT)"
            ],
            report=report,
        )


EXAMPLE = Example(
    name="otel_collector",
    summary="cvdiag's boundaries as OpenTelemetry spans, exported over OTLP to a collector",
    env={"CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_OTEL": "1"},
    visits=[Visit("otel-1-chat", "GET /chat: an agent turn and its LLM call", chat, "healthy")],
    needs=("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http", "opentelemetry.proto"),
    world=collector,
)
