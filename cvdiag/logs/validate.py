"""Envelopes checked against the packaged schema, without the jsonschema package.

``schema_problems`` interprets ``cvdiag/schema/schema.json`` itself, implementing exactly the JSON
Schema keywords the schema uses, with jsonschema's semantics (``1.0`` is an integer, ``true`` is
not ``1``, ``pattern`` is a search), and refusing a schema that uses any other keyword, so a
schema change cannot be silently ignored. A property test holds it to jsonschema's verdicts.

On top of the JSON Schema come the rules the schema states in ``$defs`` or prose, which no
generic validator applies: ``ts`` is an RFC 3339 date-time, ``metadata`` is closed per boundary
(``$defs.boundary_metadata_keys``), and an envelope's JSON is at most 16384 bytes (the debug
tier's cap; no tier writes more).
"""

from __future__ import annotations

import calendar
import dataclasses
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Final

from cvdiag.logs.fastcheck import ANNOTATIONS, compile_check
from cvdiag.schema.vocabulary import BYTE_CAPS, Tier, packaged_schema

MAX_BYTES: Final = BYTE_CAPS[Tier.DEBUG]

_KEYWORDS: Final = frozenset(
    {"type", "const", "enum", "pattern", "required", "properties", "additionalProperties"}
)
_DATE_TIME: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.\d+)?(?:[Zz]|[+-](\d\d):(\d\d))"
)


class UnsupportedSchema(Exception):
    """The schema uses a keyword this validator does not implement."""


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    #: ``schema`` (the JSON Schema), ``format`` (ts), ``metadata`` (closed keys), ``size``.
    rule: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


# --- the JSON Schema part -------------------------------------------------------------------


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_TYPES: Final[dict[str, Callable[[Any], bool]]] = {
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _equal(one: Any, two: Any) -> bool:
    """JSON equality as jsonschema has it: booleans are not numbers, ``1.0`` equals ``1``."""
    if isinstance(one, bool) or isinstance(two, bool):
        return type(one) is type(two) and one == two
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(_equal(one[k], two[k]) for k in one)
    return bool(one == two)


def _short(value: Any) -> str:
    out = repr(value)
    return out if len(out) <= 60 else out[:59] + "…"


@cache
def _pattern(source: str) -> re.Pattern[str]:
    return re.compile(source)


def _check(schema: Mapping[str, Any], value: Any, path: str, out: list[Problem]) -> None:
    unknown = set(schema) - _KEYWORDS - ANNOTATIONS
    if unknown:
        raise UnsupportedSchema(f"schema keyword(s) not implemented: {', '.join(sorted(unknown))}")
    where = path or "envelope"
    kind = schema.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        if not any(_TYPES[k](value) for k in kinds):
            out.append(
                Problem("schema", path, f"{_short(value)} is not of type {' or '.join(kinds)}")
            )
            return
    if "const" in schema and not _equal(value, schema["const"]):
        out.append(Problem("schema", path, f"{_short(value)} is not {schema['const']!r}"))
    if "enum" in schema and not any(_equal(value, item) for item in schema["enum"]):
        out.append(Problem("schema", path, f"{_short(value)} is not one of the allowed values"))
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and isinstance(value, str) and not _pattern(pattern).search(value):
        out.append(Problem("schema", path, f"{_short(value)} does not match {pattern}"))
    if not isinstance(value, dict):
        return
    missing = [key for key in schema.get("required", ()) if key not in value]
    if missing:
        out.append(Problem("schema", where, f"required fields missing: {', '.join(missing)}"))
    properties: Mapping[str, Any] = schema.get("properties", {})
    for key, sub in properties.items():
        if key in value:
            _check(sub, value[key], f"{path}.{key}" if path else key, out)
    extra = schema.get("additionalProperties", True)
    if extra is False:
        for key in value:
            if key not in properties:
                out.append(Problem("schema", where, f"field {_short(key)} is not allowed"))
    elif extra is not True:
        raise UnsupportedSchema("additionalProperties other than true or false")


def schema_problems(value: Any) -> list[Problem]:
    """What the packaged JSON Schema rejects in ``value`` (empty: jsonschema would accept it)."""
    out: list[Problem] = []
    _check(packaged_schema(), value, "", out)
    return out


# --- cvdiag's further rules -----------------------------------------------------------------


def is_date_time(value: str) -> bool:
    """RFC 3339 ``date-time`` (what JSON Schema's ``format: date-time`` names)."""
    found = _DATE_TIME.fullmatch(value)
    if found is None:
        return False
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        return False
    if hour > 23 or minute > 59 or second > 60:
        return False
    offset = found.group(7)
    return offset is None or (int(offset) <= 23 and int(found.group(8)) <= 59)


@cache
def _metadata_keys() -> dict[str, frozenset[str]]:
    keys = packaged_schema()["$defs"]["boundary_metadata_keys"]
    return {name: frozenset(names) for name, names in keys.items()}


def cvdiag_problems(value: Any, size: int) -> list[Problem]:
    """The rules beyond the JSON Schema: ts format, closed metadata, the byte cap."""
    out: list[Problem] = []
    if size > MAX_BYTES:
        out.append(Problem("size", "", f"{size} bytes of JSON, over the {MAX_BYTES}-byte cap"))
    if not isinstance(value, dict):
        return out
    ts = value.get("ts")
    if isinstance(ts, str) and not is_date_time(ts):
        out.append(Problem("format", "ts", f"{_short(ts)} is not an RFC 3339 date-time"))
    boundary, metadata = value.get("boundary"), value.get("metadata")
    if isinstance(boundary, str) and isinstance(metadata, dict):
        allowed = _metadata_keys().get(boundary, frozenset())
        for key in metadata:
            if key not in allowed:
                out.append(
                    Problem("metadata", "metadata", f"key {_short(key)} is not one of {boundary}'s")
                )
    return out


def _date_ok(date: str) -> bool:
    """``is_date_time``'s verdict on a date alone (the compiled check remembers the true ones)."""
    return is_date_time(date + "T00:00:00Z")


@cache
def fast_check() -> Callable[[Any], bool]:
    """``check(envelope) -> True`` only when ``problems`` would find nothing in it, the byte
    cap aside: the compiled check, built on first use."""
    return compile_check(packaged_schema(), _metadata_keys(), _date_ok)


def problems(value: Any, size: int) -> list[Problem]:
    """Everything wrong with one envelope whose JSON took ``size`` bytes."""
    if size <= MAX_BYTES and fast_check()(value):
        return []  # the compiled check accepts only what the rules below accept
    return schema_problems(value) + cvdiag_problems(value, size)
