"""LLM calls as the OpenTelemetry GenAI semantic conventions describe them.

The real ``openai`` and ``anthropic`` SDKs, on instrumented httpx2 clients, call the fake provider
(examples/fake_provider.py) on loopback; the real OpenTelemetry SDK records into an
in-memory span exporter and metric reader. Every attribute is named by the constant of the
``opentelemetry-semantic-conventions`` package, never by a string written here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as G
from opentelemetry.semconv._incubating.attributes import openai_attributes as O
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as M
from opentelemetry.semconv.attributes import error_attributes as E
from opentelemetry.semconv.attributes import server_attributes as S
from opentelemetry.trace import SpanKind, StatusCode

from cvdiag import MemorySink, Settings, configure, instrument_httpx
from examples.fake_provider import PROMPT_TOKENS, FakeProvider
from tests.support.otel import sdk
from tests.support.servers import serve_uvicorn

PROMPT = [{"role": "user", "content": "Say hello"}]
OPENAI = G.GenAiProviderNameValues.OPENAI.value
ANTHROPIC = G.GenAiProviderNameValues.ANTHROPIC.value
CHAT = G.GenAiOperationNameValues.CHAT.value
INPUT = G.GenAiTokenTypeValues.INPUT.value
OUTPUT = G.GenAiTokenTypeValues.OUTPUT.value


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeProvider, str]]:
    provider = FakeProvider(reply="one two three")
    with serve_uvicorn(provider.app) as url:
        yield provider, url


@pytest.fixture
def otel(served: tuple[FakeProvider, str]) -> Iterator[tuple[InMemorySpanExporter, Any]]:
    exporter, reader = sdk()
    exporter.clear()
    reader.get_metrics_data()
    configure(Settings(enabled=True, tier="debug", otel=True), sinks=[MemorySink()])
    yield exporter, reader
    configure(Settings(), sinks=[MemorySink()])
    served[0].fail_status = None
    exporter.clear()


def hosts(url: str, provider: str) -> dict[str, str]:
    return {url.removeprefix("http://"): provider}


def oai(url: str, provider: str = "openai") -> openai.OpenAI:
    client = instrument_httpx(httpx2.Client(), llm_hosts=hosts(url, provider))
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0, http_client=client)


def claude(url: str) -> anthropic.Anthropic:
    client = instrument_httpx(httpx2.Client(), llm_hosts=hosts(url, "anthropic"))
    return anthropic.Anthropic(
        base_url=url, api_key="sk-ant-test", max_retries=0, http_client=client
    )


def the_span(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, dict[str, Any]]:
    # cvdiag's own: the anthropic SDK (2.x) records a span of its own for the same call.
    spans = [
        s
        for s in exporter.get_finished_spans()
        if s.kind is SpanKind.CLIENT and s.instrumentation_scope.name == "cvdiag"
    ]
    assert len(spans) == 1, [s.name for s in spans]
    (span,) = spans
    return span, dict(span.attributes or {})


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def assert_server(attributes: dict[str, Any], url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    assert attributes[S.SERVER_ADDRESS] == host
    assert attributes[S.SERVER_PORT] == int(port)


def test_chat_completion_not_streamed(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], served: tuple[FakeProvider, str]
) -> None:
    exporter, reader = otel
    provider, url = served
    oai(url).chat.completions.create(model="gpt-4o-mini", messages=PROMPT)  # type: ignore[arg-type]
    span, attributes = the_span(exporter)
    assert span.name == "chat gpt-4o-mini"
    assert attributes[G.GEN_AI_OPERATION_NAME] == CHAT
    assert attributes[G.GEN_AI_PROVIDER_NAME] == OPENAI
    assert attributes[O.OPENAI_API_TYPE] == O.OpenaiApiTypeValues.CHAT_COMPLETIONS.value
    assert attributes[G.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert attributes[G.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini"
    assert attributes[G.GEN_AI_RESPONSE_ID] == "chatcmpl-fake"
    assert attributes[G.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert attributes[G.GEN_AI_USAGE_INPUT_TOKENS] == PROMPT_TOKENS
    assert attributes[G.GEN_AI_USAGE_OUTPUT_TOKENS] == provider.completion_tokens
    assert_server(attributes, url)
    assert G.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in attributes  # not a stream
    assert G.GEN_AI_REQUEST_STREAM not in attributes
    found = points(reader)
    (duration,) = found[M.GEN_AI_CLIENT_OPERATION_DURATION]
    assert duration.attributes[G.GEN_AI_OPERATION_NAME] == CHAT
    assert duration.attributes[G.GEN_AI_PROVIDER_NAME] == OPENAI
    assert duration.attributes[G.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini"
    assert duration.attributes[S.SERVER_ADDRESS] == "127.0.0.1"
    usage = {p.attributes[G.GEN_AI_TOKEN_TYPE]: p.sum for p in found[M.GEN_AI_CLIENT_TOKEN_USAGE]}
    assert usage == {INPUT: PROMPT_TOKENS, OUTPUT: provider.completion_tokens}


def test_chat_completion_streamed(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], served: tuple[FakeProvider, str]
) -> None:
    exporter, _ = otel
    provider, url = served
    stream = oai(url).chat.completions.create(
        model="gpt-4o-mini",
        messages=PROMPT,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).split() == (
        provider.words
    )
    span, attributes = the_span(exporter)
    assert span.name == "chat gpt-4o-mini"
    assert attributes[G.GEN_AI_REQUEST_STREAM] is True
    assert attributes[G.GEN_AI_RESPONSE_ID] == "chatcmpl-fake"
    assert attributes[G.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini"
    assert attributes[G.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert attributes[G.GEN_AI_USAGE_INPUT_TOKENS] == PROMPT_TOKENS
    assert attributes[G.GEN_AI_USAGE_OUTPUT_TOKENS] == provider.completion_tokens
    assert attributes[G.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] >= 0.0
    assert_server(attributes, url)


def test_chat_stream_without_usage_still_has_its_id_and_finish_reason(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], served: tuple[FakeProvider, str]
) -> None:
    exporter, _ = otel
    _, url = served
    for _ in oai(url).chat.completions.create(
        model="gpt-4o-mini",
        messages=PROMPT,  # type: ignore[arg-type]
        stream=True,
    ):
        pass
    _, attributes = the_span(exporter)
    assert attributes[G.GEN_AI_RESPONSE_ID] == "chatcmpl-fake"
    assert attributes[G.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert G.GEN_AI_USAGE_OUTPUT_TOKENS not in attributes  # the provider sent no usage


def test_embeddings(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], served: tuple[FakeProvider, str]
) -> None:
    exporter, reader = otel
    _, url = served
    oai(url).embeddings.create(model="text-embedding-3-small", input="hello")
    span, attributes = the_span(exporter)
    embeddings = G.GenAiOperationNameValues.EMBEDDINGS.value
    assert span.name == f"{embeddings} text-embedding-3-small"
    assert attributes[G.GEN_AI_OPERATION_NAME] == embeddings
    assert attributes[G.GEN_AI_USAGE_INPUT_TOKENS] == PROMPT_TOKENS
    assert G.GEN_AI_USAGE_OUTPUT_TOKENS not in attributes
    assert O.OPENAI_API_TYPE not in attributes
    usage = {
        p.attributes[G.GEN_AI_TOKEN_TYPE]: p.sum
        for p in points(reader)[M.GEN_AI_CLIENT_TOKEN_USAGE]
    }
    assert usage == {INPUT: PROMPT_TOKENS}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_api(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader],
    served: tuple[FakeProvider, str],
    stream: bool,
) -> None:
    exporter, _ = otel
    provider, url = served
    client = oai(url)
    if stream:
        for _ in client.responses.create(model="gpt-4.1", input="Say hello", stream=True):
            pass
    else:
        client.responses.create(model="gpt-4.1", input="Say hello")
    span, attributes = the_span(exporter)
    assert span.name == "chat gpt-4.1"
    assert attributes[G.GEN_AI_OPERATION_NAME] == CHAT
    assert attributes[O.OPENAI_API_TYPE] == O.OpenaiApiTypeValues.RESPONSES.value
    assert attributes[G.GEN_AI_RESPONSE_ID] == "resp_fake"
    assert attributes[G.GEN_AI_RESPONSE_MODEL] == "gpt-4.1"
    assert attributes[G.GEN_AI_USAGE_INPUT_TOKENS] == PROMPT_TOKENS
    assert attributes[G.GEN_AI_USAGE_OUTPUT_TOKENS] == provider.completion_tokens
    assert (G.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in attributes) is stream
    assert G.GEN_AI_RESPONSE_FINISH_REASONS not in attributes  # the API returns none


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader],
    served: tuple[FakeProvider, str],
    stream: bool,
) -> None:
    exporter, _ = otel
    provider, url = served
    client = claude(url)
    if stream:
        with client.messages.stream(model="claude-sonnet", max_tokens=64, messages=PROMPT) as s:  # type: ignore[arg-type]
            s.get_final_message()
    else:
        client.messages.create(model="claude-sonnet", max_tokens=64, messages=PROMPT)  # type: ignore[arg-type]
    span, attributes = the_span(exporter)
    assert span.name == "chat claude-sonnet"
    assert attributes[G.GEN_AI_PROVIDER_NAME] == ANTHROPIC
    assert attributes[G.GEN_AI_RESPONSE_ID] == "msg_fake"
    assert attributes[G.GEN_AI_RESPONSE_MODEL] == "claude-sonnet"
    assert attributes[G.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert attributes[G.GEN_AI_USAGE_INPUT_TOKENS] == PROMPT_TOKENS
    assert attributes[G.GEN_AI_USAGE_OUTPUT_TOKENS] == provider.completion_tokens
    assert (G.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in attributes) is stream
    assert O.OPENAI_API_TYPE not in attributes
    assert_server(attributes, url)


@pytest.mark.parametrize(
    ("status", "error"), [(429, openai.RateLimitError), (404, openai.NotFoundError)]
)
@pytest.mark.parametrize("stream", [False, True])
def test_an_error_status(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader],
    served: tuple[FakeProvider, str],
    status: int,
    error: type[Exception],
    stream: bool,
) -> None:
    exporter, reader = otel
    provider, url = served
    provider.fail_status = status
    with pytest.raises(error):
        oai(url).chat.completions.create(model="gpt-4o-mini", messages=PROMPT, stream=stream)  # type: ignore[call-overload]
    span, attributes = the_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert attributes[E.ERROR_TYPE] == str(status)
    assert G.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in attributes
    assert G.GEN_AI_USAGE_OUTPUT_TOKENS not in attributes
    (duration,) = points(reader)[M.GEN_AI_CLIENT_OPERATION_DURATION]
    assert duration.attributes[E.ERROR_TYPE] == str(status)


def test_an_openai_compatible_endpoint_says_so(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], served: tuple[FakeProvider, str]
) -> None:
    """A host cvdiag does not know: the conventions' OpenAI flavor, and ``cvdiag.provider``."""
    exporter, _ = otel
    _, url = served
    client = instrument_httpx(httpx2.Client())
    openai.OpenAI(base_url=f"{url}/v1", api_key="k", http_client=client).chat.completions.create(
        model="local-llama",
        messages=PROMPT,  # type: ignore[arg-type]
    )
    _, attributes = the_span(exporter)
    assert attributes[G.GEN_AI_PROVIDER_NAME] == OPENAI
    assert attributes["cvdiag.provider"] == "openai-compatible"


def test_gemini_generate_content(
    otel: tuple[InMemorySpanExporter, InMemoryMetricReader], served: tuple[FakeProvider, str]
) -> None:
    exporter, _ = otel
    provider, url = served
    client = instrument_httpx(httpx2.Client(), llm_hosts=hosts(url, "google"))
    body = {"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]}
    client.post(f"{url}/v1beta/models/gemini-2.0-flash:generateContent", json=body)
    span, attributes = the_span(exporter)
    generate = G.GenAiOperationNameValues.GENERATE_CONTENT.value
    assert span.name == f"{generate} gemini-2.0-flash"
    assert attributes[G.GEN_AI_PROVIDER_NAME] == G.GenAiProviderNameValues.GCP_GEMINI.value
    assert attributes[G.GEN_AI_RESPONSE_ID] == "gemini-fake"
    assert attributes[G.GEN_AI_RESPONSE_MODEL] == "gemini-2.0-flash-001"
    assert attributes[G.GEN_AI_RESPONSE_FINISH_REASONS] == ("STOP",)
    assert attributes[G.GEN_AI_USAGE_INPUT_TOKENS] == PROMPT_TOKENS
    assert attributes[G.GEN_AI_USAGE_OUTPUT_TOKENS] == provider.completion_tokens


@pytest.mark.parametrize(
    ("cvdiag_name", "convention"),
    [
        ("azure-openai", G.GenAiProviderNameValues.AZURE_AI_OPENAI),
        ("google", G.GenAiProviderNameValues.GCP_GEMINI),
        ("vertex-ai", G.GenAiProviderNameValues.GCP_VERTEX_AI),
        ("mistral", G.GenAiProviderNameValues.MISTRAL_AI),
        ("xai", G.GenAiProviderNameValues.X_AI),
        ("groq", G.GenAiProviderNameValues.GROQ),
        ("deepseek", G.GenAiProviderNameValues.DEEPSEEK),
        ("openai", G.GenAiProviderNameValues.OPENAI),
        ("anthropic", G.GenAiProviderNameValues.ANTHROPIC),
        ("openrouter", G.GenAiProviderNameValues.OPENAI),
    ],
)
def test_every_known_provider_has_its_convention_name(cvdiag_name: str, convention: Any) -> None:
    from cvdiag.providers import convention_name

    assert convention_name(cvdiag_name) == convention.value
    assert convention_name(convention.value) == convention.value  # already conventional
    assert convention_name("my-gateway") == "my-gateway"  # a custom value, as allowed


def test_the_bridge_works_without_the_conventions_package() -> None:
    """Only opentelemetry-api: every name falls back to the string the package defines."""
    script = textwrap.dedent(
        """
        import json, sys
        sys.modules["opentelemetry.semconv"] = None  # as if not installed
        from cvdiag.core import conventions
        from cvdiag.otel import bridge
        names = {k: v for k, v in vars(conventions).items() if k.isupper() and isinstance(v, str)}
        names["metrics"] = list(conventions.metric_names())
        print(json.dumps([conventions.SEMCONV_PACKAGE, names]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    loaded, fallback = json.loads(done.stdout)
    assert loaded is False
    from cvdiag.core import conventions

    assert conventions.SEMCONV_PACKAGE
    here = {k: v for k, v in vars(conventions).items() if k.isupper() and isinstance(v, str)}
    here["metrics"] = list(conventions.metric_names())
    assert conventions.fallbacks_used() == ()  # the pinned package has every name
    assert fallback == here
