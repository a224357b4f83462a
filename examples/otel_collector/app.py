"""cvdiag's boundaries as OpenTelemetry spans, exported over OTLP to a collector.

    pip install -e '.[otel]' uvicorn
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 CVDIAG_BACKEND_EMITTER=1 CVDIAG_OTEL=1 \\
        python examples/otel_collector/app.py

The SDK and the OTLP exporter come from the ``otel`` extra: cvdiag itself needs only
opentelemetry-api. Run a collector with ``collector.yaml`` beside this file (see README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, agent_scope, llm_call


def span_exporter() -> SpanExporter:
    """OTLP over HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter reads it itself)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def setup_tracing(exporter: SpanExporter | None = None) -> TracerProvider:
    """Install an SDK tracer provider; cvdiag's bridge uses whatever provider is global."""
    provider = TracerProvider(resource=Resource.create({"service.name": "cvdiag-example"}))
    provider.add_span_processor(BatchSpanProcessor(exporter or span_exporter()))
    trace.set_tracer_provider(provider)
    return provider


async def chat(request: Request) -> Response:
    async def tokens() -> AsyncIterator[bytes]:
        async with agent_scope("assistant", model_id="example-model"):
            with llm_call("example", "example-model") as call:
                await asyncio.sleep(0.05)  # the model thinks
                call.record_response(3)
            for word in ("hello", "from", "cvdiag"):
                yield f'data: {{"type": "TEXT_MESSAGE_CONTENT", "delta": "{word}"}}\n\n'.encode()

    return StreamingResponse(tokens(), media_type="text/event-stream")


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    yield
    # Export what the batch processor still holds before the server process ends.
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush()


app = Starlette(routes=[Route("/chat", chat)], lifespan=lifespan)
app.add_middleware(CvdiagMiddleware)

if __name__ == "__main__":
    import uvicorn

    setup_tracing()
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
