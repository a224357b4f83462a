"""Boundary → envelope: ids and time, closed and JSON-safe metadata, and the byte-cap ladder."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from cvdiag.context import RequestContext
from cvdiag.schema import EDGE_HEADER_KEYS, LAYER, METADATA_KEYS, SCHEMA_VERSION
from cvdiag.scrub import scrub, scrub_text

Envelope = dict[str, Any]

#: All nine edge headers absent. Shared by every envelope that has none; never mutated.
NULL_EDGE_HEADERS: Final[Mapping[str, str | None]] = dict.fromkeys(EDGE_HEADER_KEYS)
_MAX_DEPTH: Final = 6
_MAX_ITEMS: Final = 64
_MAX_KEY: Final = 128
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1


def _json_safe(value: object, depth: int) -> Any:
    """A JSON-native copy of ``value``: strings scrubbed, containers bounded, oddities stringified.

    orjson can then never fail on what it is given: cycles end at the depth limit, huge ints and
    bytes become bounded strings, NaN becomes null.
    """
    kind = type(value)
    if kind is str:
        return scrub_text(value)  # type: ignore[arg-type]
    if value is None or kind is bool:
        return value
    if kind is int:
        return value if _INT_MIN <= value <= _INT_MAX else f"<int of {value.bit_length()} bits>"  # type: ignore[attr-defined,operator]
    if kind is float:
        return value if math.isfinite(value) else None  # type: ignore[arg-type]
    if isinstance(value, (str, bool, int, float)):  # subclasses: enums and the like
        return _json_safe(_plain(value), depth)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return scrub(value)
    if depth >= _MAX_DEPTH:
        return f"<{type(value).__name__} nested too deep>"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= _MAX_ITEMS:
                out["…"] = f"{len(value) - _MAX_ITEMS} more"
                break
            out[scrub(key)[:_MAX_KEY]] = _json_safe(item, depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_json_safe(item, depth + 1) for item in itertools.islice(value, _MAX_ITEMS)]
        if len(value) > _MAX_ITEMS:
            items.append(f"… {len(value) - _MAX_ITEMS} more")
        return items
    return scrub(value)


def _plain(value: str | bool | int | float) -> str | bool | int | float:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    return str(value)  # pragma: no cover - the isinstance above admits only these


def closed_metadata(
    boundary: str, metadata: Mapping[str, Any] | None
) -> tuple[dict[str, Any], bool]:
    """Keep the boundary's schema keys (JSON-safe, scrubbed); report whether any were dropped."""
    if not metadata:
        return {}, False
    allowed = METADATA_KEYS.get(boundary, frozenset())
    out: dict[str, Any] = {}
    dropped = False
    for key, value in metadata.items():
        if key not in allowed:
            dropped = True
            continue
        # Counts, sizes, durations and short names are most of what producers send: settle them
        # here rather than in a call to _json_safe.
        kind = value.__class__
        if (kind is int and _INT_MIN <= value <= _INT_MAX) or (
            kind is float and value - value == 0
        ):
            out[key] = value  # x - x is 0.0 for every finite float, NaN for inf and NaN
            continue
        if kind is str:
            out[key] = scrub_text(value)
            continue
        try:
            out[key] = _json_safe(value, 1)
        except Exception:
            out[key] = f"<unserializable {type(value).__name__}>"
    return out, dropped


class _Clock:
    """UTC ISO-8601 timestamps with milliseconds, formatted once per millisecond: envelopes come
    in bursts (a debug-tier stream emits one per event), and a burst shares its stamp."""

    __slots__ = ("_ms", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""

    def now(self) -> str:
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            second, rest = divmod(ms, 1000)
            self._text = f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(second))}.{rest:03d}Z"
            self._ms = ms  # a race between threads costs a millisecond at worst, never a bad stamp
        return self._text


_clock = _Clock()


def build(
    boundary: str,
    *,
    outcome: str,
    metadata: dict[str, Any],
    duration_ms: int | None,
    context: RequestContext,
    span_id: str,
    parent_span_id: str | None,
    edge_headers: Mapping[str, str | None],
) -> Envelope:
    """The envelope dict, keys in schema order. Inputs are already closed, scrubbed and bounded."""
    test_id, trace_id, slug, demo, _ = context
    return {
        "schema_version": SCHEMA_VERSION,
        "test_id": test_id,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent_span_id,
        "layer": LAYER,
        "boundary": boundary,
        "slug": slug,
        "demo": demo,
        "ts": _clock.now(),
        "mono_ns": time.monotonic_ns(),
        "duration_ms": duration_ms,
        "outcome": outcome,
        "edge_headers": edge_headers,
        "metadata": metadata,
    }


# --- the byte-cap ladder -------------------------------------------------------------------


def _shorten(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if isinstance(value, dict):
        return {k: _shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, limit) for v in value]
    return value


def _collapse(value: Any) -> Any:
    if isinstance(value, dict):
        return f"<{len(value)} keys>"
    if isinstance(value, list):
        return f"<{len(value)} items>"
    return value


def _metadata_step(change: Callable[[Any], Any]) -> Callable[[Envelope], None]:
    def step(env: Envelope) -> None:
        env["metadata"] = {k: change(v) for k, v in env["metadata"].items()}

    return step


def _clamp_step(limit: int) -> Callable[[Envelope], None]:
    def step(env: Envelope) -> None:
        env["demo"] = env["demo"][:limit]
        env["edge_headers"] = {
            k: (v[:limit] if isinstance(v, str) else v) for k, v in env["edge_headers"].items()
        }

    return step


def _drop_metadata(env: Envelope) -> None:
    env["metadata"] = {}


#: Each step loses more than the one before; the last always fits the smallest cap.
_LADDER: Final = (
    _metadata_step(lambda v: _shorten(v, 256)),
    _metadata_step(lambda v: _shorten(v, 32)),
    _metadata_step(_collapse),
    _drop_metadata,
    _clamp_step(64),
    _clamp_step(8),
)


def _valid_utf8(value: Any) -> Any:
    """A copy of a JSON-native value whose strings hold no lone surrogates (``\\udXXX`` text
    instead), the one thing orjson refuses in what ``_json_safe`` hands it."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return {_valid_utf8(k): _valid_utf8(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_utf8(v) for v in value]
    return value


def serialize(envelope: Envelope, cap: int) -> tuple[bytes, Envelope]:
    """Serialize once; over ``cap`` bytes, walk the ladder until it fits, stamping ``_truncated``.

    Returns the bytes and the envelope they encode (a copy when the ladder changed anything).
    A string holding a lone surrogate (decoded with ``surrogateescape``, or a JSON ``\\ud800``
    escape) would make orjson refuse the whole envelope: such strings are escaped and the
    envelope serialized again, off the hot path.
    """
    try:
        data = orjson.dumps(envelope)
    except orjson.JSONEncodeError:
        envelope = _valid_utf8(envelope)
        data = orjson.dumps(envelope)
    if len(data) <= cap:
        return data, envelope
    env = dict(envelope)
    env["_truncated"] = True
    for step in _LADDER:
        step(env)
        data = orjson.dumps(env)
        if len(data) <= cap:
            break
    return data, env
