"""One OpenTelemetry SDK for the whole test session, with in-memory exporters.

A process can set its global tracer and meter providers once; every test that needs the SDK
uses these. When another test already installed an SDK tracer provider, our exporter joins it.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import version

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from packaging.version import Version


@cache
def sdk() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # Delta temporality: each collection holds only what was recorded since the one before.
    delta = {Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.DELTA}
    reader = InMemoryMetricReader(preferred_temporality=delta)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return exporter, reader


#: Starlette's router puts the matched route in the scope from 1.7 on (FastAPI's always did);
#: cvdiag names its SERVER span ``METHOD /route`` once the route is known, and ``METHOD`` before.
ROUTE_IN_SCOPE = Version(version("starlette")) >= Version("1.7")


def server_span_name(method: str, route: str) -> str:
    """The name of cvdiag's SERVER span for a plain Starlette app on the installed Starlette."""
    return f"{method} {route}" if ROUTE_IN_SCOPE else method
