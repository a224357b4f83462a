"""The OpenTelemetry semantic-convention names cvdiag writes: attribute keys and well-known values.

They come from the ``opentelemetry-semantic-conventions`` package (the ``otel`` extra) whenever it
is installed, so a name the conventions rename cannot silently drift here. Without that package
(only ``opentelemetry-api``, a runtime dependency) the bridge still works: each name then falls
back to the string the conventions define today, and ``tests/otel/test_genai_conventions.py``
checks every fallback against the installed package, so the two cannot disagree unnoticed. A
name missing from an older package version falls back one by one, the same way.

The GenAI names live in the package's ``_incubating`` modules (the GenAI conventions are still in
development); that is where the package publishes them, so that is where they are read from.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Final, NamedTuple

__all__ = ["SEMCONV_PACKAGE", "MetricNames", "fallbacks_used", "metric_names"]


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception:  # not installed, or broken: the fallbacks stand in
        return None


_GEN_AI: Final = _module("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
_OPENAI: Final = _module("opentelemetry.semconv._incubating.attributes.openai_attributes")
_SERVER: Final = _module("opentelemetry.semconv.attributes.server_attributes")
_ERROR: Final = _module("opentelemetry.semconv.attributes.error_attributes")
#: Whether the conventions package could be read at all.
SEMCONV_PACKAGE: Final = _GEN_AI is not None
_fallbacks: list[str] = []


def _name(module: ModuleType | None, constant: str, fallback: str) -> str:
    value = getattr(module, constant, None)
    if isinstance(value, str):
        return value
    _fallbacks.append(constant)
    return fallback


def _value(module: ModuleType | None, enum: str, member: str, fallback: str) -> str:
    value = getattr(getattr(getattr(module, enum, None), member, None), "value", None)
    if isinstance(value, str):
        return value
    _fallbacks.append(f"{enum}.{member}")
    return fallback


def fallbacks_used() -> tuple[str, ...]:
    """The constants that were not found in the installed package (all, without it)."""
    return tuple(_fallbacks)


# --- attribute keys ------------------------------------------------------------------------------

GEN_AI_OPERATION_NAME: Final = _name(_GEN_AI, "GEN_AI_OPERATION_NAME", "gen_ai.operation.name")
GEN_AI_PROVIDER_NAME: Final = _name(_GEN_AI, "GEN_AI_PROVIDER_NAME", "gen_ai.provider.name")
GEN_AI_REQUEST_MODEL: Final = _name(_GEN_AI, "GEN_AI_REQUEST_MODEL", "gen_ai.request.model")
GEN_AI_REQUEST_STREAM: Final = _name(_GEN_AI, "GEN_AI_REQUEST_STREAM", "gen_ai.request.stream")
GEN_AI_RESPONSE_MODEL: Final = _name(_GEN_AI, "GEN_AI_RESPONSE_MODEL", "gen_ai.response.model")
GEN_AI_RESPONSE_ID: Final = _name(_GEN_AI, "GEN_AI_RESPONSE_ID", "gen_ai.response.id")
GEN_AI_RESPONSE_FINISH_REASONS: Final = _name(
    _GEN_AI, "GEN_AI_RESPONSE_FINISH_REASONS", "gen_ai.response.finish_reasons"
)
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = _name(
    _GEN_AI, "GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK", "gen_ai.response.time_to_first_chunk"
)
GEN_AI_USAGE_INPUT_TOKENS: Final = _name(
    _GEN_AI, "GEN_AI_USAGE_INPUT_TOKENS", "gen_ai.usage.input_tokens"
)
GEN_AI_USAGE_OUTPUT_TOKENS: Final = _name(
    _GEN_AI, "GEN_AI_USAGE_OUTPUT_TOKENS", "gen_ai.usage.output_tokens"
)
GEN_AI_TOKEN_TYPE: Final = _name(_GEN_AI, "GEN_AI_TOKEN_TYPE", "gen_ai.token.type")
GEN_AI_AGENT_NAME: Final = _name(_GEN_AI, "GEN_AI_AGENT_NAME", "gen_ai.agent.name")
OPENAI_API_TYPE: Final = _name(_OPENAI, "OPENAI_API_TYPE", "openai.api.type")
SERVER_ADDRESS: Final = _name(_SERVER, "SERVER_ADDRESS", "server.address")
SERVER_PORT: Final = _name(_SERVER, "SERVER_PORT", "server.port")
ERROR_TYPE: Final = _name(_ERROR, "ERROR_TYPE", "error.type")

# --- metrics ------------------------------------------------------------------------------------

#: The GenAI semantic conventions the metric fallbacks and bucket boundaries below come from: the
#: streaming histograms were added in semantic-conventions v1.41.0 (status Development), and the
#: GenAI conventions have since moved to their own repository, open-telemetry/
#: semantic-conventions-genai, whose ``gen-ai-metrics.md`` still defines them the same way. The
#: package marks its GenAI constants deprecated ("moved") but still publishes them; a release that
#: drops them falls back here, one name at a time.
GENAI_METRICS_VERSION: Final = "semantic-conventions v1.41.0 (GenAI, Development)"


class MetricNames(NamedTuple):
    """The GenAI client metrics cvdiag records, by their convention names."""

    duration: str
    token_usage: str
    time_to_first_chunk: str
    time_per_output_chunk: str


def metric_names() -> MetricNames:
    """``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage`` and the two streaming
    histograms, ``gen_ai.client.operation.time_to_first_chunk`` and ``…time_per_output_chunk``.

    Read when the bridge starts, not at import: the package's metrics module imports
    ``opentelemetry.metrics``, which an instrumented client with the bridge off never needs.
    """
    module = _module("opentelemetry.semconv._incubating.metrics.gen_ai_metrics")
    return MetricNames(
        _name(module, "GEN_AI_CLIENT_OPERATION_DURATION", "gen_ai.client.operation.duration"),
        _name(module, "GEN_AI_CLIENT_TOKEN_USAGE", "gen_ai.client.token.usage"),
        _name(
            module,
            "GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK",
            "gen_ai.client.operation.time_to_first_chunk",
        ),
        _name(
            module,
            "GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK",
            "gen_ai.client.operation.time_per_output_chunk",
        ),
    )


#: The explicit bucket boundaries the conventions advise (``SHOULD``) for the duration and the two
#: streaming histograms — seconds doubling from 10 ms to 81.92 s — and for token usage — powers of
#: four from 1 to 4**13. The package publishes no boundaries, so they are made here, from the
#: conventions ``GENAI_METRICS_VERSION`` names (doubling a float is exact: 0.01 * 8 is 0.08).
SECONDS_BUCKETS: Final = tuple(0.01 * 2**k for k in range(14))
TOKEN_BUCKETS: Final = tuple(float(4**k) for k in range(14))

# --- well-known values ---------------------------------------------------------------------------

_OPS: Final = "GenAiOperationNameValues"
OP_CHAT: Final = _value(_GEN_AI, _OPS, "CHAT", "chat")
OP_TEXT_COMPLETION: Final = _value(_GEN_AI, _OPS, "TEXT_COMPLETION", "text_completion")
OP_EMBEDDINGS: Final = _value(_GEN_AI, _OPS, "EMBEDDINGS", "embeddings")
OP_GENERATE_CONTENT: Final = _value(_GEN_AI, _OPS, "GENERATE_CONTENT", "generate_content")
OP_INVOKE_AGENT: Final = _value(_GEN_AI, _OPS, "INVOKE_AGENT", "invoke_agent")

_TOKENS: Final = "GenAiTokenTypeValues"
TOKEN_INPUT: Final = _value(_GEN_AI, _TOKENS, "INPUT", "input")
TOKEN_OUTPUT: Final = _value(_GEN_AI, _TOKENS, "OUTPUT", "output")

_API: Final = "OpenaiApiTypeValues"
API_CHAT_COMPLETIONS: Final = _value(_OPENAI, _API, "CHAT_COMPLETIONS", "chat_completions")
API_RESPONSES: Final = _value(_OPENAI, _API, "RESPONSES", "responses")

_PROVIDERS: Final = "GenAiProviderNameValues"
PROVIDER_OPENAI: Final = _value(_GEN_AI, _PROVIDERS, "OPENAI", "openai")
PROVIDER_ANTHROPIC: Final = _value(_GEN_AI, _PROVIDERS, "ANTHROPIC", "anthropic")
PROVIDER_AZURE_OPENAI: Final = _value(_GEN_AI, _PROVIDERS, "AZURE_AI_OPENAI", "azure.ai.openai")
PROVIDER_AZURE_INFERENCE: Final = _value(
    _GEN_AI, _PROVIDERS, "AZURE_AI_INFERENCE", "azure.ai.inference"
)
PROVIDER_GEMINI: Final = _value(_GEN_AI, _PROVIDERS, "GCP_GEMINI", "gcp.gemini")
PROVIDER_VERTEX_AI: Final = _value(_GEN_AI, _PROVIDERS, "GCP_VERTEX_AI", "gcp.vertex_ai")
PROVIDER_GCP_GEN_AI: Final = _value(_GEN_AI, _PROVIDERS, "GCP_GEN_AI", "gcp.gen_ai")
PROVIDER_MISTRAL: Final = _value(_GEN_AI, _PROVIDERS, "MISTRAL_AI", "mistral_ai")
PROVIDER_X_AI: Final = _value(_GEN_AI, _PROVIDERS, "X_AI", "x_ai")
PROVIDER_GROQ: Final = _value(_GEN_AI, _PROVIDERS, "GROQ", "groq")
PROVIDER_DEEPSEEK: Final = _value(_GEN_AI, _PROVIDERS, "DEEPSEEK", "deepseek")
PROVIDER_PERPLEXITY: Final = _value(_GEN_AI, _PROVIDERS, "PERPLEXITY", "perplexity")
PROVIDER_COHERE: Final = _value(_GEN_AI, _PROVIDERS, "COHERE", "cohere")
PROVIDER_BEDROCK: Final = _value(_GEN_AI, _PROVIDERS, "AWS_BEDROCK", "aws.bedrock")
PROVIDER_WATSONX: Final = _value(_GEN_AI, _PROVIDERS, "IBM_WATSONX_AI", "ibm.watsonx.ai")
