"""The span-event sink: every envelope as an event on the span current where it is emitted.

Apart from the bridge (``bridge.py``) because it is a sink, not a tracer: the emitter hands it
each envelope's dict, so it is on the per-envelope path and needs only the current span, no
tracer or meter. Its attributes are the envelope's metadata, already scrubbed and cut by the
emitter, so nothing is scrubbed again here; they are only made into what span attributes may
hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
from opentelemetry import trace

#: Attributes may only be str, bool, int, float or homogeneous sequences of them.
_PLAIN: Final = (str, bool, int, float)


def _attribute(value: Any) -> Any:
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return orjson.dumps(value).decode()


def flatten(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Envelope metadata as span attributes: nulls dropped, nested values as JSON text."""
    return {key: _attribute(value) for key, value in metadata.items() if value is not None}


class SpanEventSink:
    """Adds every envelope to the span current where it is emitted, as a span event named after
    its boundary with its (already scrubbed) metadata as attributes."""

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        attributes = flatten(envelope["metadata"])
        attributes["cvdiag.test_id"] = envelope["test_id"]
        attributes["cvdiag.outcome"] = envelope["outcome"]
        if envelope["duration_ms"] is not None:
            attributes["cvdiag.duration_ms"] = envelope["duration_ms"]
        span.add_event(str(envelope["boundary"]), attributes)

    def flush(self, timeout: float = 5.0) -> None:
        return None

    def close(self) -> None:
        return None
