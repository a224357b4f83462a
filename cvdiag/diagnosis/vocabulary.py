"""What the words in envelopes mean to the classifier: termination kinds, error classes, events.

Logs of two wire generations are read alike. CVDIAG v1 ``termination_kind`` is one of ``rst``,
``timeout``, ``chunk_error`` and ``fin_premature``, with cvdiag's finer cause in the additive
``termination_cause``; older cvdiag logs wrote the finer word in ``termination_kind`` itself
(``client_disconnect``, ``client_close``, ``cancelled``, ``incomplete``, ``no_response``). Both
are reduced to one ``Termination``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Final

#: The CVDIAG v1 termination kinds.
V1_KINDS: Final = frozenset({"rst", "timeout", "chunk_error", "fin_premature"})
#: An older log's word in ``termination_kind`` → the v1 kind it became.
_OLD_KINDS: Final = {
    "client_disconnect": "rst",
    "send_failed": "rst",
    "client_close": "fin_premature",
    "incomplete": "fin_premature",
    "no_response": "fin_premature",
    # A cancelled request task (server shutdown, a deadline around the app): not the client,
    # and written today as fin_premature with the cause "cancelled".
    "cancelled": "fin_premature",
}
#: Causes that mean the client went away (rather than the server cutting the stream).
CLIENT_CAUSES: Final = frozenset(
    {"client_disconnect", "client_close", "send_failed", "left_before_response"}
)
#: Causes that say when the backend found the client gone, not when it left (before that).
FOUND_GONE: Final = frozenset({"send_failed", "left_before_response"})


@dataclasses.dataclass(frozen=True, slots=True)
class Termination:
    """How a stream ended: the v1 kind (or the unknown word as written) and the finer cause."""

    kind: str
    cause: str | None
    #: ``termination_kind`` as the envelope wrote it (an older log's word, shown as is).
    written: str

    @property
    def by_client(self) -> bool:
        """The peer went away: ``rst``, or a cause that names the client."""
        if self.cause is not None:
            return self.cause in CLIENT_CAUSES
        return self.kind == "rst"

    def __str__(self) -> str:
        if self.written != self.kind or self.cause is None:
            return self.written
        return f"{self.kind}/{self.cause}"


def termination(metadata: dict[str, Any]) -> Termination:
    """The termination of a ``backend.sse.aborted`` (or completion) envelope's metadata."""
    kind = metadata.get("termination_kind")
    kind = kind if isinstance(kind, str) and kind else "?"
    cause = metadata.get("termination_cause")
    cause = cause if isinstance(cause, str) and cause else None
    if kind in _OLD_KINDS:  # a log from before the v1 vocabulary: the word is the cause
        return Termination(_OLD_KINDS[kind], cause or kind, kind)
    return Termination(kind, cause, kind)


# --- errors ---------------------------------------------------------------------------------

#: Exception names (lowercased) that mean the provider failed or could not be reached: the
#: openai and anthropic SDKs' server and connection errors, httpx/httpcore/aiohttp/requests
#: transport errors. Timeouts and cancellations are not here: they are a call left waiting.
_PROVIDER_FAILURES: Final = frozenset(
    {
        "internalservererror",
        "apiconnectionerror",
        "serviceunavailableerror",
        "overloadederror",
        "badgatewayerror",
        "gatewaytimeouterror",
        "apierror",
        "connecterror",
        "connectionerror",
        "connectionreseterror",
        "connectionrefusederror",
        "remoteprotocolerror",
        "readerror",
        "writeerror",
        "networkerror",
        "transporterror",
        "protocolerror",
        "serverdisconnectederror",
        "clientconnectorerror",
        "clientconnectionerror",
        "chunkedencodingerror",
        "incompleteread",
        # A provider's in-body error, named by cvdiag/providers/usage.py: Chat Completions'
        # ``server_error``, and an error that names no code or type.
        "servererror",
        "providererror",
    }
)
_HTTP_STATUS: Final = re.compile(r"HTTP(\d{3})")
#: Error classes (lowercased) that mean the call was cut, not answered: cvdiag's own
#: ``Shutdown`` ends a call still outstanding when the process exits (cvdiag/scopes/llm_calls.py).
_CUT_NAMES: Final = frozenset({"shutdown"})
#: Exceptions that mean the client left: not an application error (older logs caught them).
CLIENT_EXCEPTIONS: Final = frozenset({"WebSocketDisconnect", "ClientDisconnect"})

#: What an LLM call's ``error_class`` (or a caught exception's type) says about the provider.
OK, CUT, RATE_LIMITED, FAILED, OTHER = "ok", "cut", "rate-limited", "failed", "other"


def error_kind(name: str | None, outcome: str | None = None) -> str:
    """``ok``, ``cut`` (a timeout or cancellation ended it), ``rate-limited`` (the provider said
    429), ``failed`` (a 5xx or a transport error) or ``other`` (a 4xx, the app's own error)."""
    if not name:
        return CUT if outcome == "timeout" else OK if outcome in (None, "ok") else OTHER
    lowered = name.rsplit(".", 1)[-1].lower()
    if outcome == "timeout" or "timeout" in lowered or "cancel" in lowered or lowered in _CUT_NAMES:
        return CUT
    status = _HTTP_STATUS.fullmatch(name)
    if status is not None:
        code = int(status.group(1))
        return RATE_LIMITED if code == 429 else FAILED if code >= 500 else OTHER
    if "ratelimit" in lowered:
        return RATE_LIMITED
    if lowered in _PROVIDER_FAILURES:
        return FAILED
    return OTHER


#: Exception names (lowercased) of a provider refusing the request it was sent (a 4xx other than
#: 429): the SDKs' own, and those named from a provider's in-body error (providers/usage.py).
_REFUSALS: Final = frozenset(
    {
        "authenticationerror",
        "badrequesterror",
        "permissiondeniederror",
        "permissionerror",
        "notfounderror",
        "unprocessableentityerror",
        "conflicterror",
        "invalidrequesterror",
        "requesttoolarge",
        "contextlengthexceeded",
    }
)


def is_refusal(name: str | None) -> bool:
    """Whether an ``error_class`` says the provider refused the request (a 4xx but 429), as
    opposed to an error of the app's own before any answer (``RuntimeError``)."""
    if not name:
        return False
    status = _HTTP_STATUS.fullmatch(name)
    if status is not None:
        return 400 <= int(status.group(1)) < 500 and status.group(1) != "429"
    return name.rsplit(".", 1)[-1].lower() in _REFUSALS


# --- finish reasons ---------------------------------------------------------------------------

#: Finish reasons (lowercased) that say a content filter or safety system stopped the answer:
#: OpenAI ``content_filter``, Anthropic ``refusal``, Gemini ``SAFETY``, ``BLOCKLIST``,
#: ``PROHIBITED_CONTENT``, ``SPII``, ``RECITATION``.
_FILTERED: Final = frozenset(
    {"content_filter", "refusal", "safety", "blocklist", "prohibited_content", "spii", "recitation"}
)
#: Finish reasons (lowercased) that say the answer was cut at its token limit: OpenAI
#: ``length``, Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``, Responses ``max_output_tokens``.
_CUT_SHORT: Final = frozenset({"length", "max_tokens", "max_output_tokens"})


def finish_cause(reasons: list[str]) -> tuple[str, str] | None:
    """``(what stopped the answer, the reason as written)`` when a finish reason names a
    content filter or a length cut, else None."""
    for reason in reasons:
        if reason.lower() in _FILTERED:
            return "a content filter", reason
    for reason in reasons:
        if reason.lower() in _CUT_SHORT:
            return "its length limit", reason
    return None


# --- stream events --------------------------------------------------------------------------

#: Event types a backend uses to report an error inside a stream that itself succeeds: AG-UI
#: ``RUN_ERROR``, OpenAI Responses ``error`` and ``response.failed``, Anthropic ``error``, and
#: the ``{"type": "error"}`` of common WebSocket protocols. Compared lowercased.
_ERROR_EVENTS: Final = frozenset({"run_error", "error", "response.failed", "response.error"})
#: Substrings of event types that carry model output (tokens, tool-call arguments): AG-UI
#: ``TEXT_MESSAGE_*``/``TOOL_CALL_*``/``THINKING_*``, Responses ``*.delta``, generic chunks.
_CONTENT_MARKS: Final = (
    "content",
    "delta",
    "chunk",
    "token",
    "text_message",
    "tool_call",
    "thinking",
    "reasoning",
    "output_text",
)
#: Event names a stream without its own vocabulary gets (plain SSE ``data:``, WebSocket text).
_PLAIN: Final = frozenset({"message", "text", "bytes"})


# Event types repeat through a log, and these run for every event of ``ls``/``stats --by-class``.
@functools.lru_cache(maxsize=1024)
def is_error_event(event_type: str) -> bool:
    return event_type.lower() in _ERROR_EVENTS


@functools.lru_cache(maxsize=1024)
def is_content_event(event_type: str) -> bool:
    """Whether the event carries model output, so an LLM call's tokens were flowing.

    Lifecycle events (``RUN_STARTED``, ``STEP_STARTED``, ``STATE_SNAPSHOT``,
    ``response.created``, pings) are not: an AG-UI stream sends them before any call answers.
    """
    lowered = event_type.lower()
    if lowered in _PLAIN:
        return True
    if is_error_event(lowered):
        return False
    return any(mark in lowered for mark in _CONTENT_MARKS)
