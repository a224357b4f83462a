"""Boundary → envelope: ids and time, the envelope dict, and the byte-cap ladder to a line.

Its metadata arrives closed, JSON-safe and scrubbed (``metadata.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from cvdiag.core.context import RequestContext
from cvdiag.schema.vocabulary import BOUNDARY_LAYER, EDGE_HEADER_KEYS, LAYER, SCHEMA_VERSION

Envelope = dict[str, Any]

#: All nine edge headers absent. Shared by every envelope that has none; never mutated.
NULL_EDGE_HEADERS: Final[Mapping[str, str | None]] = dict.fromkeys(EDGE_HEADER_KEYS)
_MAX_DURATION: Final = 2**53


#: A stamp's end (``.mmmZ``) for each millisecond of a second, as text and as bytes: looked up,
#: not formatted, for each stamp.
_MILLIS: Final = tuple(f".{ms:03d}Z" for ms in range(1000))
_MILLIS_BYTES: Final = tuple(millis.encode("ascii") for millis in _MILLIS)


#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round).
_time_ns: Final = time.time_ns


class _Clock:
    """UTC ISO-8601 timestamps with milliseconds, made once per millisecond: envelopes come in
    bursts (a debug-tier stream emits one per event), and a burst shares its stamp."""

    __slots__ = ("_bytes", "_ms", "_second", "_text")

    def __init__(self) -> None:
        self._ms = -1
        self._text = ""
        self._bytes = b""
        #: The second last formatted, and its stamp up to the dot as text and as bytes:
        #: ``strftime`` once a second, since requests a millisecond apart each need a stamp of
        #: their own (one tuple, so that threads never pair a second with another's text).
        self._second: tuple[int, str, bytes] = (-1, "", b"")

    def now(self) -> str:
        ms = _time_ns() // 1_000_000
        if ms != self._ms:
            self._tick(ms)
        return self._text

    def now_bytes(self) -> bytes:
        """The same stamp as ASCII bytes (for the templates)."""
        ms = _time_ns() // 1_000_000
        if ms != self._ms:
            self._tick(ms)
        return self._bytes

    def _tick(self, ms: int) -> None:
        # Not ``divmod`` (compiled, a generic call and a tuple), nor ``ms - second * 1000``:
        # a product past 2**31 leaves mypyc's fast path (about 800 instructions a stamp).
        second = ms // 1000
        rest = ms % 1000
        last, prefix, prefix_bytes = self._second
        if second != last:
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            prefix_bytes = prefix.encode("ascii")
            self._second = (second, prefix, prefix_bytes)
        # One tuple swap would be atomic; two attributes raced between threads cost a
        # millisecond's difference at worst, never a malformed stamp.
        self._text, self._bytes = prefix + _MILLIS[rest], prefix_bytes + _MILLIS_BYTES[rest]
        self._ms = ms


_clock = _Clock()
#: The envelope's ``ts`` now (for the per-request templates, which build no dict).
clock_now: Final = _clock.now
clock_bytes: Final = _clock.now_bytes


def ms_since(start: float) -> int:
    """Whole milliseconds since ``start`` (``time.perf_counter()``), like every duration on the
    wire (v1's ``duration_ms`` is an integer); never negative, even if the clock is stepped back
    (or patched) under a request."""
    return ms_between(start, time.perf_counter())


def ms_between(start: float, end: float) -> int:
    """Whole milliseconds from ``start`` to ``end`` (both ``time.perf_counter()`` readings),
    never negative: what ``ms_since`` reports, for figures that must share one reading.

    ``max(0, round(ms))``, in arithmetic: compiled, ``round`` and ``max`` are two generic
    calls, and every terminal makes one or two of these (tests/pipeline/test_envelope.py holds
    the two equal)."""
    ms = (end - start) * 1000
    if not ms > 0.5:
        return 0  # ``round`` gives 0 up to 0.5 itself (half to even), below it 0 or less
    whole = int(ms)  # positive: truncated is floored
    rest = ms - whole  # exact: ``whole`` is a float's integral part
    if rest > 0.5 or (rest == 0.5 and whole % 2 == 1):
        whole += 1  # half to even, as ``round`` rounds
    return whole


def wire_duration(value: Any) -> int | None:
    """A producer's ``duration_ms`` as the wire takes it: whole, finite, never negative, or
    None for what is no duration. ``Any``: compiled, a narrower type would refuse the odd
    values pure Python reads as no duration (tests/reliability/test_hostile.py)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # an object, "soon", 10**400: no duration
        return None
    if not math.isfinite(number):
        return None
    return max(0, min(round(number), _MAX_DURATION))


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
    """The envelope dict, keys in schema order. Inputs are already closed, scrubbed and bounded.
    Its ``layer`` follows the boundary's prefix (``BOUNDARY_LAYER``)."""
    test_id, trace_id, slug, demo, _ = context
    return {
        "schema_version": SCHEMA_VERSION,
        "test_id": test_id,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent_span_id,
        # One lookup: 25-40 ns more than the constant (python -m timeit, 2026-12-07) beside an
        # emit's microseconds; the request's own lines (ingress, events, first byte, terminal)
        # come from templates formatted once with a backend boundary and never pass here.
        "layer": BOUNDARY_LAYER.get(boundary, LAYER),
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
    instead), the one thing orjson refuses in what ``metadata.closed_metadata`` hands it."""
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
    if not data.isascii() and (data.find(b"\xe2\x80") >= 0 or data.find(b"\xc2\x85") >= 0):
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
