"""One short line per envelope: the metadata a reader looks at first, per boundary."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

Meta = Mapping[str, Any]


def number(value: Any) -> float | None:
    """A metadata value as a number, or None (metadata values are not typed by the schema)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value  # an int stays an int, so JSON output shows 4, not 4.0


def text(value: Any, limit: int = 80) -> str:
    """A metadata value as one bounded line of text."""
    if value is None:
        return "?"
    out = value if isinstance(value, str) else repr(value)
    out = " ".join(out.split())
    return out if len(out) <= limit else out[: limit - 1] + "…"


def ms(value: Any) -> str:
    """A millisecond figure without false precision: ``812ms``, ``61.2s``."""
    figure = number(value)
    if figure is None:
        return "?"
    if abs(figure) >= 10_000:
        return f"{figure / 1000:.1f}s"
    return f"{figure:.0f}ms"


def _ingress(m: Meta) -> str:
    line = f"{text(m.get('method'), 10)} {text(m.get('path'), 60)}"
    if m.get("content_length") is not None:
        line += f" len={text(m.get('content_length'), 12)}"
    return line


def _agent_enter(m: Meta) -> str:
    line = f"agent={text(m.get('agent_name'), 40)}"
    if m.get("model_id") is not None:
        line += f" model={text(m.get('model_id'), 40)}"
    return line


def _agent_exit(m: Meta) -> str:
    return f"{text(m.get('terminal_outcome'), 16)} after {ms(m.get('total_duration_ms'))}"


def _llm_start(m: Meta) -> str:
    line = f"{text(m.get('provider'), 24)}/{text(m.get('model'), 40)}"
    if m.get("prompt_token_count_estimate") is not None:
        line += f" prompt≈{text(m.get('prompt_token_count_estimate'), 12)} tokens"
    return line


def _llm_heartbeat(m: Meta) -> str:
    elapsed = ms(m.get("elapsed_ms_since_start"))
    if m.get("first_token_delta_ms") is None:
        return f"still waiting after {elapsed}"
    line = f"streaming after {elapsed} (first token at {ms(m.get('first_token_delta_ms'))})"
    if m.get("chunk_wait_ms") is not None:  # its stream waits on the provider (additive)
        line += f", waiting {ms(m.get('chunk_wait_ms'))} for the next chunk"
    return line


def _llm_response(m: Meta) -> str:
    line = f"{text(m.get('provider'), 24)}/{text(m.get('model'), 40)}"
    tokens = m.get("response_token_count")
    line += f" tokens={'?' if tokens is None else text(tokens, 12)}"
    line += f" latency={ms(m.get('latency_ms'))}"
    if m.get("first_token_delta_ms") is not None:  # time to first token (an additive key)
        line += f" first_token={ms(m.get('first_token_delta_ms'))}"
    if m.get("error_class"):
        line += f" error={text(m.get('error_class'), 40)}"
    return line


def _first_byte(m: Meta) -> str:
    return f"{ms(m.get('delta_ms_from_ingress'))} after ingress"


def _sse_event(m: Meta) -> str:
    return (
        f"#{text(m.get('sequence_num'), 10)} {text(m.get('event_type'), 40)}"
        f" {text(m.get('payload_size_bytes'), 12)}B"
    )


def _aborted(m: Meta) -> str:
    kind = text(m.get("termination_kind"), 32)
    if m.get("termination_cause") is not None:  # the finer cause (an additive key)
        kind += f"/{text(m.get('termination_cause'), 32)}"
    sent = text(m.get("bytes_before_abort"), 16)
    if m.get("termination_cause") == "left_before_response":
        # Found gone as its answer began (a JSON answer, say): what was written reached no one.
        return f"{kind}: the client left before the answer began ({sent} bytes sent to no one)"
    return f"{kind} after {sent} bytes"


def _complete(m: Meta) -> str:
    line = f"HTTP {text(m.get('http_status'), 6)}"
    if m.get("sse_event_count") is not None:
        line += f" events={text(m.get('sse_event_count'), 10)}"
    if m.get("content_length") is not None:
        line += f" len={text(m.get('content_length'), 12)}"
    return line + f" total={ms(m.get('total_duration_ms'))}"


def _error(m: Meta) -> str:
    return f"{text(m.get('exception_type'), 60)}: {text(m.get('message_scrubbed'), 100)}"


def _queue_dropped(m: Meta) -> str:
    # A full queue, a failed write or the shutdown bound: the workers' stderr says which.
    return f"{text(m.get('dropped_count'), 12)} envelopes dropped, not written"


def _purge(m: Meta) -> str:
    return (
        f"{text(m.get('reason'), 32)}: {text(m.get('from_tier'), 10)}"
        f" → {text(m.get('to_tier'), 10)} after {text(m.get('envelope_count'), 12)} envelopes"
    )


def _generic(m: Meta) -> str:
    return text(" ".join(f"{key}={text(value, 24)}" for key, value in m.items()), 120)


_BY_BOUNDARY: Final[dict[str, Callable[[Meta], str]]] = {
    "backend.request.ingress": _ingress,
    "backend.agent.enter": _agent_enter,
    "backend.agent.exit": _agent_exit,
    "backend.llm.call.start": _llm_start,
    "backend.llm.call.heartbeat": _llm_heartbeat,
    "backend.llm.call.response": _llm_response,
    "backend.sse.first_byte": _first_byte,
    "backend.sse.event": _sse_event,
    "backend.sse.aborted": _aborted,
    "backend.response.complete": _complete,
    "backend.error.caught": _error,
    "cvdiag.queue_dropped": _queue_dropped,
    "cvdiag.purge_audit": _purge,
}


def edge_headers(envelope: Mapping[str, Any]) -> dict[str, str]:
    """The edge headers that are present (the schema writes absent ones as null)."""
    headers = envelope.get("edge_headers")
    if not isinstance(headers, dict):
        return {}
    values = list(headers.values())
    if values.count(None) == len(values):  # the common case, without a Python-level loop
        return {}
    return {key: value for key, value in headers.items() if isinstance(value, str)}


def describe(envelope: Mapping[str, Any]) -> str:
    """The envelope's key metadata, edge headers and flags on one line."""
    meta = envelope.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    render = _BY_BOUNDARY.get(envelope.get("boundary", ""), _generic)
    line = render(meta)
    edges = edge_headers(envelope)
    if edges:
        line += "  [" + " ".join(f"{k}={text(v, 40)}" for k, v in edges.items()) + "]"
    if envelope.get("_truncated") is True:
        line += "  (truncated)"
    if envelope.get("_metadata_dropped") is True:
        line += "  (metadata dropped)"
    return line.strip()
