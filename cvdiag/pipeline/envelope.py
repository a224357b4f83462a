"""Boundary → envelope: ids and time, closed and JSON-safe metadata, and the byte-cap ladder."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from cvdiag.core.context import RequestContext
from cvdiag.schema.vocabulary import EDGE_HEADER_KEYS, LAYER, METADATA_KEYS, SCHEMA_VERSION
from cvdiag.scrubbing.redact import SCAN_LIMIT, scrub, scrub_identifier, scrub_text

Envelope = dict[str, Any]

#: All nine edge headers absent. Shared by every envelope that has none; never mutated.
NULL_EDGE_HEADERS: Final[Mapping[str, str | None]] = dict.fromkeys(EDGE_HEADER_KEYS)
_MAX_DEPTH: Final = 6
_MAX_ITEMS: Final = 64
_MAX_KEY: Final = 128
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1
#: Metadata whose string value is an identifier (a join key for readers): it is never edited in
#: place, but kept or replaced whole by a digest placeholder (``scrub_identifier``).
IDENTIFIER_KEYS: Final = frozenset({"agent_name", "model_id", "provider", "model", "event_type"})
#: Characters of an identifier kept, after scrubbing.
NAME_MAX: Final = 256
#: Characters scrubbed per envelope, as a multiple of its byte cap. An envelope can show at most
#: its cap, and the truncation ladder cuts every string to 256 characters before dropping any:
#: reading more than a few caps' worth is work whose result would be thrown away.
SCAN_PER_CAP: Final = 2
#: What a value costs the budget at least, so that many tiny values are bounded too.
_VALUE_COST: Final = 64
#: Below this many characters of budget, a long string is not scanned at all.
_SMALLEST_SCAN: Final = 128
_NO_KEYS: Final[frozenset[str]] = frozenset()


class Budget:
    """Characters of scrubbing one envelope may still spend."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def scrubbed(text: str, budget: Budget) -> str:
    """``text`` scrubbed within the envelope's budget; past it, an unscanned marker (no secret
    can be in what was never copied)."""
    size = len(text)
    left = budget.left
    if size <= 64 and left > 0:
        budget.left = left - _VALUE_COST
        return scrub_text(text)
    if left < _SMALLEST_SCAN:
        budget.left = left - _VALUE_COST
        return f"…[unscanned:{size}]"
    limit = min(SCAN_LIMIT, left)
    budget.left = left - max(min(size, limit), _VALUE_COST)
    return scrub_text(text, limit)


def _json_safe(value: object, depth: int, budget: Budget) -> Any:
    """A JSON-native copy of ``value``: strings scrubbed, containers bounded, oddities stringified.

    orjson can then never fail on what it is given: cycles end at the depth limit, huge ints and
    bytes become bounded strings, NaN becomes null. All of it within ``budget``: past it,
    strings and containers are replaced by markers without being read.
    """
    kind = type(value)
    if kind is str:
        return scrubbed(value, budget)  # type: ignore[arg-type]
    if value is None or kind is bool:
        return value
    if kind is int:
        return value if _INT_MIN <= value <= _INT_MAX else f"<int of {value.bit_length()} bits>"  # type: ignore[attr-defined,operator]
    if kind is float:
        return value if math.isfinite(value) else None  # type: ignore[arg-type]
    if isinstance(value, (str, bool, int, float)):  # subclasses: enums and the like
        return _json_safe(_plain(value), depth, budget)
    if budget.left <= 0:
        budget.left -= _VALUE_COST
        return f"<{type(value).__name__}, unscanned>"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return scrubbed(scrub(value, limit=_SMALLEST_SCAN * 2), budget)
    if depth >= _MAX_DEPTH:
        return f"<{type(value).__name__} nested too deep>"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= _MAX_ITEMS:
                out["…"] = f"{len(value) - _MAX_ITEMS} more"
                break
            # Scrubbed, then cut: a key cut first could keep the tail of a credential.
            name = key if type(key) is str else scrub(key, limit=_MAX_KEY * 2)
            budget.left -= min(len(name), _MAX_KEY * 2)
            out[scrub_text(name, _MAX_KEY * 2)[:_MAX_KEY]] = _json_safe(item, depth + 1, budget)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [
            _json_safe(item, depth + 1, budget) for item in itertools.islice(value, _MAX_ITEMS)
        ]
        if len(value) > _MAX_ITEMS:
            items.append(f"… {len(value) - _MAX_ITEMS} more")
        return items
    # Any other object: its text, bounded where its type allows, then scrubbed like a string.
    return scrubbed(scrub(value, limit=max(min(budget.left, SCAN_LIMIT), _SMALLEST_SCAN)), budget)


def _plain(value: str | bool | int | float) -> str | bool | int | float:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    return str(value)  # pragma: no cover - the isinstance above admits only these


def closed_metadata(
    boundary: str, metadata: Mapping[str, Any] | None, cap: int = 16_384
) -> tuple[dict[str, Any], bool]:
    """Keep the boundary's schema keys (JSON-safe, scrubbed); report whether any were dropped.

    ``cap`` is the envelope's byte cap: what is scrubbed is bounded by it (``SCAN_PER_CAP``),
    whatever the metadata's size or nesting.
    """
    if not metadata:
        return {}, False
    allowed = METADATA_KEYS.get(boundary, _NO_KEYS)
    out: dict[str, Any] = {}
    dropped = False
    # The scrubbing budget is made at the first value that needs it: most metadata is numbers
    # and names. Names spent before it are counted in ``spent``.
    budget: Budget | None = None
    spent = 0
    for key, value in metadata.items():
        if key not in allowed:
            dropped = True
            continue
        # Counts, sizes, durations and short names are most of what producers send: settle them
        # here rather than in a call to _json_safe.
        kind = value.__class__
        if kind is int:
            if _INT_MIN <= value <= _INT_MAX:
                out[key] = value
                continue
        elif kind is float:
            if value - value == 0:  # x - x is 0.0 for every finite float, NaN for inf and NaN
                out[key] = value
                continue
        elif kind is str and key in IDENTIFIER_KEYS:
            if budget is None:
                spent += min(len(value), SCAN_LIMIT)
            else:
                budget.left -= min(len(value), SCAN_LIMIT)
            out[key] = scrub_identifier(value)[:NAME_MAX]
            continue
        if budget is None:
            budget = Budget(cap * SCAN_PER_CAP - spent)
        if kind is str:
            out[key] = scrubbed(value, budget)
            continue
        try:
            out[key] = _json_safe(value, 1, budget)
        except Exception:
            out[key] = f"<unserializable {type(value).__name__}>"
    return out, dropped


class _Clock:
    """UTC ISO-8601 timestamps with milliseconds, formatted once per millisecond: envelopes come
    in bursts (a debug-tier stream emits one per event), and a burst shares its stamp."""

    __slots__ = ("_bytes", "_ms", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""
        self._bytes = b""

    def now(self) -> str:
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            self._tick(ms)
        return self._text

    def now_bytes(self) -> bytes:
        """The same stamp, ASCII-encoded once per millisecond too (for the templates)."""
        ms = time.time_ns() // 1_000_000
        if ms != self._ms:
            self._tick(ms)
        return self._bytes

    def _tick(self, ms: int) -> None:
        second, rest = divmod(ms, 1000)
        text = f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(second))}.{rest:03d}Z"
        # One tuple swap would be atomic; two attributes raced between threads cost a
        # millisecond's difference at worst, never a malformed stamp.
        self._text, self._bytes = text, text.encode("ascii")
        self._ms = ms


_clock = _Clock()
#: The envelope's ``ts`` now (for the per-request templates, which build no dict).
clock_now: Final = _clock.now
clock_bytes: Final = _clock.now_bytes


def ms_since(start: float) -> int:
    """Whole milliseconds since ``start`` (``time.perf_counter()``), like every duration on the
    wire (v1's ``duration_ms`` is an integer); never negative, even if the clock is stepped back
    (or patched) under a request."""
    return max(0, round((time.perf_counter() - start) * 1000))


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


#: UTF-8 of the line separators JSON leaves raw: U+2028, U+2029, U+0085 (NEL). orjson escapes
#: every other control character, VT, FF and the C0 separators included.
_RAW_BREAKS: Final = (
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
    (b"\xc2\x85", b"\\u0085"),
)


def line_safe(data: bytes) -> bytes:
    """``data`` with every line separator a splitter could break on escaped. In valid UTF-8 these
    byte pairs can only encode the separators themselves, and inside JSON only strings hold
    non-ASCII, so the escapes keep the JSON equal. Most lines are ASCII: one C-level
    ``isascii`` (0.04 µs on 600 bytes) settles them, where a two-byte ``in`` costs 0.6 µs."""
    if not data.isascii() and (b"\xe2\x80" in data or b"\xc2\x85" in data):
        for raw, escaped in _RAW_BREAKS:
            data = data.replace(raw, escaped)
    return data


def serialize(envelope: Envelope, cap: int) -> tuple[bytes, Envelope]:
    """Serialize once; over ``cap`` bytes, walk the ladder until it fits, stamping ``_truncated``.

    Returns the bytes and the envelope they encode (a copy when the ladder changed anything).
    A string holding a lone surrogate (decoded with ``surrogateescape``, or a JSON ``\\ud800``
    escape) would make orjson refuse the whole envelope: such strings are escaped and the
    envelope serialized again, off the hot path.
    """
    try:
        data = line_safe(orjson.dumps(envelope))
    except orjson.JSONEncodeError:
        envelope = _valid_utf8(envelope)
        data = line_safe(orjson.dumps(envelope))
    if len(data) <= cap:
        # A copy of exactly its size: orjson's own result sits in a larger allocation, and a
        # queue holding many of them cost about 3.4 µs a line in fresh memory (0.2 µs to copy).
        return memoryview(data).tobytes(), envelope
    env = dict(envelope)
    env["_truncated"] = True
    for step in _LADDER:
        step(env)
        data = line_safe(orjson.dumps(env))
        if len(data) <= cap:
            break
    return data, env
