"""Metadata closed to the boundary's schema keys and made JSON-safe, scrubbed within a budget.

Apart from ``envelope.py`` (the dict, the clock, the byte-cap ladder) because this is where a
producer's values are read, and so where reading is bounded: a budget per envelope, in
characters scrubbed, keeps any metadata, however large or nested, from costing more than what the
envelope could show. The per-request templates spend the same budget on method and path.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any, Final

from cvdiag.schema.vocabulary import METADATA_KEYS
from cvdiag.scrubbing.redact import SCAN_LIMIT, scrub, scrub_identifier, scrub_text

_MAX_DEPTH: Final = 6
_MAX_ITEMS: Final = 64
_MAX_KEY: Final = 128
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1
#: Metadata whose string value is an identifier (a join key for readers): it is never edited in
#: place, but kept or replaced whole by a digest placeholder (``scrub_identifier``).
IDENTIFIER_KEYS: Final = frozenset(
    {
        "agent_name",
        "model_id",
        "provider",
        "model",
        "event_type",
        "first_event_type",
        "last_event_type",
        "provider_error_code",
        "run_id",
        "thread_id",
    }
)
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
