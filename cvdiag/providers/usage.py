"""What a provider's response says: tokens, response model and id, finish reasons.

One reader for every shape cvdiag knows, fed a parsed JSON body or one parsed SSE event:

- OpenAI Chat Completions, Completions, Embeddings: ``id``, ``model``, ``usage.prompt_tokens`` /
  ``completion_tokens``, ``choices[].finish_reason`` (streamed: the final usage chunk, and the
  chunk that finishes each choice);
- OpenAI Responses API: the same under ``response`` in its stream events, with
  ``usage.input_tokens`` / ``output_tokens`` (it returns no finish reasons);
- Anthropic Messages: ``id``, ``model``, ``usage.input_tokens`` (plus cache reads and writes,
  which the conventions count as input) / ``output_tokens``, ``stop_reason`` (streamed: under
  ``message`` in ``message_start``, and ``delta.stop_reason`` plus the final usage in
  ``message_delta``: the last count seen wins);
- Gemini and Vertex AI ``generateContent``: ``responseId``, ``modelVersion``,
  ``usageMetadata.promptTokenCount`` / ``candidatesTokenCount``, ``candidates[].finishReason``.

A provider that fails after answering 200 says so in the body: an ``error`` object (OpenAI Chat
Completions mid-stream, an OpenAI-compatible gateway's 200 JSON), Anthropic's ``error`` event,
the Responses API's ``error`` event or ``response.failed``. ``error`` holds its code or type as an
exception-like name (``overloaded_error`` → ``OverloadedError``), which becomes the call's
``error_class``.

Strings are bounded here; the bridge scrubs them like every other name it writes.
"""

from __future__ import annotations

import re
from typing import Final

#: Characters kept of a response id, model or finish reason: the 256 a span shows, and the
#: scrubber's seam past them (``cvdiag.scrubbing.redact.SEAM``), so that what the bridge scrubs
#: before it cuts holds whole any credential its cut splits.
_TEXT_MAX: Final = 256 + 1024
_MAX_REASONS: Final = 16
#: A finish reason in an SSE line that is not parsed (content chunks are skipped for speed).
FINISH_IN_LINE: Final = re.compile(
    rb'"(?:finish_reason|finishReason|stop_reason)"\s*:\s*"([A-Za-z0-9_.-]{1,64})"'
)
#: Output tokens in the tail of a JSON body too large to parse.
TOKENS_IN_TAIL: Final = re.compile(
    rb'"(?:completion_tokens|output_tokens|candidatesTokenCount)"\s*:\s*(\d{1,12})'
)
#: The cheap test for an SSE line worth parsing: it carries usage (or Gemini's usageMetadata).
USAGE_MARK: Final = b'"usage'
#: The cheap test for an SSE line that may report a failure (parsed to be sure).
ERROR_MARK: Final = b'"error"'
#: ``error`` when the provider's error names no code or type.
UNNAMED_ERROR: Final = "ProviderError"
_WORD: Final = re.compile(r"[A-Za-z0-9]+")
#: A provider's error ``code`` (else ``type``) as written on the wire: a closed set of
#: characters, bounded, so that no text of the body rides on it but a code's own.
_CODE: Final = re.compile(r"[a-z0-9_.-]{1,64}")
#: Characters kept of the provider's error message (scrubbed where it is written).
ERROR_MESSAGE_MAX: Final = 160


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _text(value: object) -> str | None:
    return value[:_TEXT_MAX] if isinstance(value, str) and value else None


class ResponseFacts:
    """What has been read of one response so far."""

    __slots__ = (
        "error",
        "error_code",
        "error_message",
        "finish_reasons",
        "input_tokens",
        "model",
        "output_tokens",
        "response_id",
    )

    def __init__(self) -> None:
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.finish_reasons: list[str] = []
        #: The failure the provider reported in the body, as an exception-like name.
        self.error: str | None = None
        #: That error's ``code`` (else ``type``) as written, and its message: a mock provider's
        #: ``no_fixture_match`` says the test's fixtures, not the backend, are at fault.
        self.error_code: str | None = None
        self.error_message: str | None = None

    def add_reason(self, reason: object) -> None:
        text = _text(reason)
        if text is not None and len(self.finish_reasons) < _MAX_REASONS:
            self.finish_reasons.append(text)

    def absorb(self, parsed: object) -> None:
        """Take what ``parsed`` (a response body or one stream event) says."""
        if isinstance(parsed, list):  # Gemini's streamGenerateContent without ?alt=sse
            for item in parsed[:4096]:
                if isinstance(item, dict):
                    self.absorb(item)
            return
        if not isinstance(parsed, dict):
            return
        error = reported_error(parsed)
        if error is not None and self.error is None:
            self.error = error
            self.error_code, self.error_message = error_detail(parsed)
        for holder in (parsed, parsed.get("message"), parsed.get("response")):
            if isinstance(holder, dict):
                self._absorb_object(holder)
        delta = parsed.get("delta")
        if isinstance(delta, dict):  # Anthropic's message_delta
            self.add_reason(delta.get("stop_reason"))

    def _absorb_object(self, holder: dict[str, object]) -> None:
        response_id = _text(holder.get("id")) or _text(holder.get("responseId"))
        if response_id is not None:
            self.response_id = response_id
        model = _text(holder.get("model")) or _text(holder.get("modelVersion"))
        if model is not None:
            self.model = model
        usage = holder.get("usage")
        if isinstance(usage, dict):
            self._absorb_usage(usage)
        metadata = holder.get("usageMetadata")
        if isinstance(metadata, dict):
            self._set_tokens(
                _count(metadata.get("promptTokenCount")),
                _count(metadata.get("candidatesTokenCount")),
            )
        self.add_reason(holder.get("stop_reason"))
        for key, reason_key in (("choices", "finish_reason"), ("candidates", "finishReason")):
            items = holder.get(key)
            if isinstance(items, list):
                for item in items[:_MAX_REASONS]:
                    if isinstance(item, dict):
                        self.add_reason(item.get(reason_key))

    def _absorb_usage(self, usage: dict[str, object]) -> None:
        prompt = _count(usage.get("prompt_tokens"))
        if prompt is None:
            prompt = _count(usage.get("input_tokens"))
            if prompt is not None:  # Anthropic counts cached input apart; the conventions don't
                for cached in ("cache_read_input_tokens", "cache_creation_input_tokens"):
                    prompt += _count(usage.get(cached)) or 0
        output = _count(usage.get("completion_tokens"))
        if output is None:
            output = _count(usage.get("output_tokens"))
        self._set_tokens(prompt, output)

    def _set_tokens(self, prompt: int | None, output: int | None) -> None:
        if prompt is not None:
            self.input_tokens = prompt
        if output is not None:
            self.output_tokens = output


def reported_error(parsed: dict[str, object]) -> str | None:
    """The failure ``parsed`` (a body or one stream event) reports, or None: the error's code,
    else its type, as an exception-like name."""
    kind = parsed.get("type")
    if kind == "response.failed":
        response = parsed.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        return _error_name(error if isinstance(error, dict) else {})
    if kind == "error":  # Anthropic nests the error; the Responses API's event is the error
        error = parsed.get("error")
        return _error_name(error if isinstance(error, dict) else parsed)
    error = parsed.get("error")
    if isinstance(error, dict):  # Chat Completions and gateways; ``"error": null`` is none
        return _error_name(error)
    return None


def error_detail(parsed: dict[str, object]) -> tuple[str | None, str | None]:
    """The reported error's ``code`` (else ``type``), lowercased and only when it is made of
    ``[a-z0-9_.-]`` (at most 64), and its message cut to ``ERROR_MESSAGE_MAX`` characters."""
    error = parsed.get("error")
    if parsed.get("type") == "response.failed":
        response = parsed.get("response")
        error = response.get("error") if isinstance(response, dict) else None
    if not isinstance(error, dict):
        error = parsed if parsed.get("type") == "error" else {}
    code = None
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value != "error" and _CODE.fullmatch(value.lower()):
            code = value.lower()
            break
    message = error.get("message")
    text = message[:ERROR_MESSAGE_MAX] if isinstance(message, str) and message else None
    return code, text


def _error_name(error: dict[str, object]) -> str:
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value != "error":
            name = "".join(word.capitalize() for word in _WORD.findall(value[:_TEXT_MAX]))
            if name:
                return name[:64]
    return UNNAMED_ERROR
