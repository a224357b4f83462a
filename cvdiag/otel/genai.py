"""The GenAI semantic conventions for an LLM call: span name and attributes, metric attributes.

Every key and well-known value comes from ``cvdiag.core.conventions`` (the
``opentelemetry-semantic-conventions`` package when installed). What a provider's request and
response say comes from ``cvdiag.providers``; hand-written ``llm_call`` scopes carry only their
provider and model, and are ``chat`` operations.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from cvdiag.core import conventions as sc
from cvdiag.providers.catalog import convention_name
from cvdiag.scrubbing.redact import scrub_identifier

if TYPE_CHECKING:
    from cvdiag.providers import RequestFacts, ResponseFacts


class CallView(Protocol):
    """What the bridge reads of an LLM call (``cvdiag.scopes.LLMCall`` has it): the bridge sits
    below the scopes and knows a call only by these attributes."""

    provider: str
    model: str
    request_facts: RequestFacts | None
    response_facts: ResponseFacts | None
    response_token_count: int | None
    started_at: float | None
    first_chunk_at: float | None
    after_request_end_ms: int | None


#: cvdiag's own provider name, beside the convention's: it tells an OpenAI-compatible endpoint
#: (``gen_ai.provider.name = openai``) from OpenAI itself, and joins the span to the envelopes.
CVDIAG_PROVIDER: Final = "cvdiag.provider"
#: ``HTTP429``, the error class cvdiag's envelopes give an HTTP error status: on spans and
#: metrics ``error.type`` is the status code itself, as the HTTP conventions write it.
_HTTP_STATUS: Final = re.compile(r"HTTP(\d{3})")
#: How long a call went on after the terminal of the request it began in (the model kept
#: generating after the client left): the envelope's ``after_request_end_ms``.
AFTER_REQUEST_END: Final = "cvdiag.llm.after_request_end_ms"
#: The error code the provider reported in its body (a mock's ``no_fixture_match``), as the
#: envelopes' ``provider_error_code``: which failures are the test's fixtures.
PROVIDER_ERROR_CODE: Final = "cvdiag.llm.provider_error_code"


def name(value: str) -> str:
    """A name as spans carry it: scrubbed like an envelope's identifiers, and bounded."""
    return scrub_identifier(value)[:256]


def error_type(error_class: str) -> str:
    found = _HTTP_STATUS.fullmatch(error_class)
    return found.group(1) if found else error_class


def operation_of(facts: RequestFacts | None) -> str:
    return facts.operation if facts is not None else sc.OP_CHAT


def start(provider: str, model: str, facts: RequestFacts | None) -> tuple[str, dict[str, Any]]:
    """The span name ``{operation} {model}`` and the attributes known at its start."""
    model = name(model)
    operation = operation_of(facts)
    attributes: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: operation,
        sc.GEN_AI_PROVIDER_NAME: name(convention_name(provider)),
        sc.GEN_AI_REQUEST_MODEL: model,
        CVDIAG_PROVIDER: name(provider),
    }
    if facts is not None:
        if facts.api_type is not None:
            attributes[sc.OPENAI_API_TYPE] = facts.api_type
        if facts.streaming:
            attributes[sc.GEN_AI_REQUEST_STREAM] = True
        if facts.server_address:
            attributes[sc.SERVER_ADDRESS] = facts.server_address[:256]
            if facts.server_port is not None:
                attributes[sc.SERVER_PORT] = facts.server_port
    return f"{operation} {model}", attributes


def metric_attributes(call: CallView, error_class: str | None) -> dict[str, Any]:
    """What the duration and token-usage metrics carry (the conventions' metric attributes)."""
    facts = call.request_facts
    attributes: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: operation_of(facts),
        sc.GEN_AI_PROVIDER_NAME: name(convention_name(call.provider)),
        sc.GEN_AI_REQUEST_MODEL: name(call.model),
    }
    response = call.response_facts
    if response is not None and response.model:
        attributes[sc.GEN_AI_RESPONSE_MODEL] = name(response.model)
    if facts is not None and facts.server_address:
        attributes[sc.SERVER_ADDRESS] = facts.server_address[:256]
        if facts.server_port is not None:
            attributes[sc.SERVER_PORT] = facts.server_port
    if error_class is not None:
        attributes[sc.ERROR_TYPE] = error_type(error_class)
    return attributes


def tokens(call: CallView) -> Mapping[str, int]:
    """Token type → count, for the span and the usage metric: what the provider reported."""
    counts: dict[str, int] = {}
    response = call.response_facts
    if response is not None and response.input_tokens is not None:
        counts[sc.TOKEN_INPUT] = response.input_tokens
    if call.response_token_count is not None:
        counts[sc.TOKEN_OUTPUT] = call.response_token_count
    return counts


def end(call: CallView, started_at: float, error_class: str | None) -> dict[str, Any]:
    """The span attributes known at the end of the call."""
    attributes: dict[str, Any] = {}
    counts = tokens(call)
    if sc.TOKEN_INPUT in counts:
        attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] = counts[sc.TOKEN_INPUT]
    if sc.TOKEN_OUTPUT in counts:
        attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = counts[sc.TOKEN_OUTPUT]
    response = call.response_facts
    if response is not None:
        if response.model:
            attributes[sc.GEN_AI_RESPONSE_MODEL] = name(response.model)
        if response.response_id:
            attributes[sc.GEN_AI_RESPONSE_ID] = name(response.response_id)
        if response.finish_reasons:
            attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] = [
                name(reason) for reason in response.finish_reasons
            ]
        if response.error_code:
            attributes[PROVIDER_ERROR_CODE] = response.error_code
    # The conventions define the time to first chunk for streaming responses only: not for a
    # JSON answer, and not for an error (a 429's body is no first chunk of an answer).
    # ``first_chunk_at`` is only set for an SSE body (or by hand, for a hand-written stream).
    if call.first_chunk_at is not None and error_class is None:
        attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = max(
            0.0, call.first_chunk_at - started_at
        )
    if call.after_request_end_ms is not None:
        attributes[AFTER_REQUEST_END] = call.after_request_end_ms
    return attributes
