"""Whether a parsed line can be analysed as an envelope, and if not, why, in words.

Reading asks only for the fields the commands use, with the types they need, so a log from a
newer writer still reads; ``cvdiag validate`` checks the whole schema (``validate.py``). The
check is about a parsed value, not about lines: ``records`` (``reading.py``) makes it on each
envelope its block reader finds, ``cvdiag tail`` on each line it follows its own way. Its fast
path is paid for every envelope read, so keep it straight-line.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["shape_problem"]

#: The fields the analyses read, with the types they need (the slow path's order of checks).
_STRING_FIELDS: Final = ("test_id", "boundary", "span_id", "slug", "outcome", "ts")
_OBJECT_FIELDS: Final = ("metadata", "edge_headers")


_PARENT: Final = (str, type(None))
_DURATION: Final = (int, float, type(None))


def shape_problem(value: Any) -> str | None:
    """Why ``value`` cannot be analysed as an envelope, or None when it can."""
    # The common case in straight-line checks of exact types (orjson makes no subclasses);
    # anything else takes the field-by-field path below, which words the problem.
    if type(value) is dict:
        get = value.get
        if (
            type(get("test_id")) is str
            and type(get("boundary")) is str
            and type(get("span_id")) is str
            and type(get("slug")) is str
            and type(get("outcome")) is str
            and type(get("ts")) is str
            and type(get("metadata")) is dict
            and type(get("edge_headers")) is dict
            and type(get("mono_ns")) is int
            and type(get("parent_span_id", 0)) in _PARENT
            and type(get("duration_ms", 0)) in _DURATION
        ):
            return None
    return _shape_problem(value)


def _shape_problem(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"not a JSON object but {_json_type(value)}"
    for key in _STRING_FIELDS:
        if not isinstance(value.get(key), str):
            return _field_problem(value, key, "a string")
    for key in _OBJECT_FIELDS:
        if not isinstance(value.get(key), dict):
            return _field_problem(value, key, "an object")
    mono = value.get("mono_ns")
    if type(mono) is not int:
        return _field_problem(value, "mono_ns", "an integer")
    parent = value.get("parent_span_id", 0)
    if parent is not None and not isinstance(parent, str):
        return _field_problem(value, "parent_span_id", "a string or null")
    duration = value.get("duration_ms", 0)
    if duration is not None and type(duration) not in (int, float):
        return _field_problem(value, "duration_ms", "a number or null")
    return None


def _field_problem(value: dict[str, Any], key: str, expected: str) -> str:
    if key not in value:
        return f"missing field {key!r}"
    return f"field {key!r} is {_json_type(value[key])}, expected {expected}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
