"""The streaming GenAI metrics: time to first chunk and time per output chunk, streams only.

The real ``openai`` and ``anthropic`` SDKs, on instrumented httpx2 clients, call the fake provider
(examples/fake_provider.py) on loopback; the real OpenTelemetry SDK's in-memory metric reader
holds what the bridge recorded. Metric and attribute names are the constants of the
``opentelemetry-semantic-conventions`` package, never strings written here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as G
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as M
from opentelemetry.semconv.attributes import error_attributes as E
from opentelemetry.trace import SpanKind

from cvdiag import MemorySink, Settings, configure, instrument_httpx, llm_call
from cvdiag.otel.instruments import streaming_times
from examples.fake_provider import FakeProvider
from tests.support.otel import sdk
from tests.support.servers import serve_uvicorn

PROMPT = [{"role": "user", "content": "Say hello"}]
DURATION = M.GEN_AI_CLIENT_OPERATION_DURATION
TO_FIRST = M.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK
PER_CHUNK = M.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK
#: What the GenAI conventions advise for all three histograms in seconds: 10 ms, doubling.
ADVISED = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeProvider, str]]:
    provider = FakeProvider(reply="one two three four five")
    with serve_uvicorn(provider.app) as url:
        yield provider, url


@pytest.fixture
def reader(served: tuple[FakeProvider, str]) -> Iterator[InMemoryMetricReader]:
    exporter, metric_reader = sdk()
    metric_reader.get_metrics_data()  # drain what earlier tests recorded
    configure(Settings(enabled=True, otel=True), sinks=[MemorySink()])
    yield metric_reader
    configure(Settings(), sinks=[MemorySink()])
    exporter.clear()


def oai(url: str) -> openai.OpenAI:
    client = instrument_httpx(httpx2.Client(), llm_hosts={url.removeprefix("http://"): "openai"})
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0, http_client=client)


def claude(url: str) -> anthropic.Anthropic:
    client = instrument_httpx(httpx2.Client(), llm_hosts={url.removeprefix("http://"): "anthropic"})
    return anthropic.Anthropic(
        base_url=url, api_key="sk-ant-test", max_retries=0, http_client=client
    )


def recorded(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Metric name → its data points since the last collection (cvdiag's scope only)."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            if scope.scope.name != "cvdiag":
                continue
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def span_attributes(exporter: InMemorySpanExporter) -> dict[str, Any]:
    (span,) = [
        s
        for s in exporter.get_finished_spans()
        if s.kind is SpanKind.CLIENT and s.instrumentation_scope.name == "cvdiag"
    ]
    return dict(span.attributes or {})


def test_a_streamed_chat_records_both_with_the_duration_metrics_attributes(
    reader: InMemoryMetricReader, served: tuple[FakeProvider, str]
) -> None:
    provider, url = served
    exporter, _ = sdk()
    exporter.clear()
    stream = oai(url).chat.completions.create(
        model="gpt-4o-mini",
        messages=PROMPT,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).split() == (
        provider.words
    )
    found = recorded(reader)
    (duration,) = found[DURATION]
    (to_first,) = found[TO_FIRST]
    (per_chunk,) = found[PER_CHUNK]
    # The same attributes as the duration metric: operation, provider, models, server.
    assert dict(to_first.attributes) == dict(duration.attributes)
    assert dict(per_chunk.attributes) == dict(duration.attributes)
    assert duration.attributes[G.GEN_AI_PROVIDER_NAME] == "openai"
    assert E.ERROR_TYPE not in duration.attributes
    # One point each per call, in seconds, on the boundaries the conventions advise.
    assert (to_first.count, per_chunk.count) == (1, 1)
    assert list(to_first.explicit_bounds) == ADVISED
    assert list(per_chunk.explicit_bounds) == ADVISED
    assert list(duration.explicit_bounds) == ADVISED
    usage = found[M.GEN_AI_CLIENT_TOKEN_USAGE]
    assert {tuple(p.explicit_bounds) for p in usage} == {tuple(4.0**k for k in range(14))}
    # The span's attribute and the metric are one measurement.
    assert to_first.sum == span_attributes(exporter)[G.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    assert 0.0 <= to_first.sum <= duration.sum
    # The time after the first chunk, shared among the output tokens after the first.
    expected = (duration.sum - to_first.sum) / (provider.completion_tokens - 1)
    assert math.isclose(per_chunk.sum, expected, rel_tol=1e-9, abs_tol=1e-12)


def test_an_anthropic_stream_records_both(
    reader: InMemoryMetricReader, served: tuple[FakeProvider, str]
) -> None:
    _, url = served
    with claude(url).messages.stream(
        model="claude-sonnet",
        max_tokens=64,
        messages=PROMPT,  # type: ignore[arg-type]
    ) as stream:
        stream.get_final_message()
    found = recorded(reader)
    (duration,) = found[DURATION]
    (to_first,) = found[TO_FIRST]
    (per_chunk,) = found[PER_CHUNK]
    assert duration.attributes[G.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert dict(to_first.attributes) == dict(per_chunk.attributes) == dict(duration.attributes)


def test_a_hand_written_stream_records_both(reader: InMemoryMetricReader) -> None:
    """A stream cvdiag does not see, told by hand: the first chunk, then the token count."""
    with llm_call("my-gateway", "my-model") as call:
        call.mark_first_chunk()
        call.record_response(3)
    found = recorded(reader)
    (duration,) = found[DURATION]
    (to_first,) = found[TO_FIRST]
    (per_chunk,) = found[PER_CHUNK]
    assert duration.attributes[G.GEN_AI_PROVIDER_NAME] == "my-gateway"
    assert dict(to_first.attributes) == dict(per_chunk.attributes) == dict(duration.attributes)
    assert math.isclose(per_chunk.sum, (duration.sum - to_first.sum) / 2, abs_tol=1e-12)


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_a_json_answer_records_neither(
    reader: InMemoryMetricReader, served: tuple[FakeProvider, str], api: str
) -> None:
    _, url = served
    if api == "chat":
        oai(url).chat.completions.create(model="gpt-4o-mini", messages=PROMPT)  # type: ignore[arg-type]
    else:
        claude(url).messages.create(model="claude-sonnet", max_tokens=64, messages=PROMPT)  # type: ignore[arg-type]
    found = recorded(reader)
    assert len(found[DURATION]) == 1  # the call was recorded
    assert TO_FIRST not in found
    assert PER_CHUNK not in found


def test_a_stream_without_usage_has_no_time_per_chunk(
    reader: InMemoryMetricReader, served: tuple[FakeProvider, str]
) -> None:
    """Without ``include_usage`` OpenAI sends no token count: the mean has no denominator."""
    _, url = served
    for _ in oai(url).chat.completions.create(
        model="gpt-4o-mini",
        messages=PROMPT,  # type: ignore[arg-type]
        stream=True,
    ):
        pass
    found = recorded(reader)
    assert len(found[TO_FIRST]) == 1
    assert PER_CHUNK not in found


def test_a_stream_that_fails_after_its_first_chunk_keeps_its_time_to_first_chunk(
    reader: InMemoryMetricReader, served: tuple[FakeProvider, str]
) -> None:
    """HTTP 200, one word, then the provider's in-band error: the first chunk came, on time."""
    _, url = served
    with pytest.raises(openai.APIError):
        for _ in oai(url).chat.completions.create(
            model="gpt-4o-mini",
            messages=PROMPT,  # type: ignore[arg-type]
            stream=True,
            extra_headers={"x-fake-provider": "fail-mid"},
        ):
            pass
    found = recorded(reader)
    (duration,) = found[DURATION]
    (to_first,) = found[TO_FIRST]
    assert duration.attributes[E.ERROR_TYPE]  # the call failed ...
    assert dict(to_first.attributes) == dict(duration.attributes)  # ... and says so here too
    assert PER_CHUNK not in found  # a failed stream's mean is not known


@pytest.mark.parametrize("status", [429, 500])
def test_an_error_status_records_neither(
    reader: InMemoryMetricReader, served: tuple[FakeProvider, str], status: int
) -> None:
    """A streamed request answered with an error status: its body is no first chunk."""
    _, url = served
    with pytest.raises(openai.APIStatusError):
        oai(url).chat.completions.create(
            model="gpt-4o-mini",
            messages=PROMPT,  # type: ignore[arg-type]
            stream=True,
            extra_headers={"x-fake-provider": str(status)},
        )
    found = recorded(reader)
    (duration,) = found[DURATION]
    assert duration.attributes[E.ERROR_TYPE] == str(status)
    assert TO_FIRST not in found
    assert PER_CHUNK not in found


@dataclass
class Call:
    """A ``CallView``: what the bridge reads of an LLM call."""

    started_at: float | None
    first_chunk_at: float | None
    response_token_count: int | None
    provider: str = "openai"
    model: str = "m"
    request_facts: Any = None
    response_facts: Any = None
    after_request_end_ms: int | None = None


times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@given(
    started=times,
    first=st.one_of(st.none(), times),
    seconds=st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
    tokens=st.one_of(st.none(), st.integers(min_value=0, max_value=10**9)),
    error=st.sampled_from([None, "HTTP429", "HTTP500", "ReadTimeout", "StreamCancelled"]),
)
def test_the_two_values_from_any_record(
    started: float, first: float | None, seconds: float, tokens: int | None, error: str | None
) -> None:
    """Never negative, never a division by zero; absent exactly where the docs say."""
    to_first, per_chunk = streaming_times(Call(started, first, tokens), seconds, error)
    if first is None or (error is not None and error.startswith("HTTP")):
        assert (to_first, per_chunk) == (None, None)
        return
    assert to_first is not None
    assert to_first >= 0.0  # a first chunk stamped "before" the start (clock grain) is 0
    if error is not None or tokens is None or tokens < 2:
        assert per_chunk is None
    else:
        assert per_chunk is not None
        assert 0.0 <= per_chunk <= max(seconds, 0.0)
