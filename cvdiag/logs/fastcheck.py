"""The packaged schema and cvdiag's further rules compiled once into straight-line Python.

``cvdiag validate`` checks every envelope of a log. Interpreting the schema for each one (a
recursive walk that builds path strings) reads 15 MB/s; nearly every envelope is valid, so a
check that only answers *valid or not* is generated from the schema once, as Python source, and
the interpreter in ``validate`` runs only for the envelopes this check does not accept, to word
their problems.

The generated check is conservative: it accepts only what the interpreter would accept (exact
JSON types, ASCII digits in dates, no keyword it does not know), and anything else goes to the
interpreter, so verdicts and messages cannot differ. A property test holds it to that.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

#: One accepted ``ts``: an RFC 3339 date-time whose time fields are in range; the date is
#: checked on its own (``_date_ok``), since a log's envelopes share a few dates.
_TIME: Final = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)"
    r"(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
#: Keywords that never change a verdict (``format`` is an annotation for jsonschema unless a
#: format checker is installed; the date-time rule is applied separately, see ``ts_problem``).
ANNOTATIONS: Final = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "title",
        "description",
        "format",
        "schema_version",
        "x-cvdiag-extensions",
    }
)
_TYPE_TESTS: Final = {
    "string": "type({v}) is str",
    "integer": "type({v}) is int",  # 1.0 is an integer too: left to the interpreter
    "number": "type({v}) is int or type({v}) is float",
    "boolean": "type({v}) is bool",
    "null": "{v} is None",
    "object": "type({v}) is dict",
    "array": "type({v}) is list",
}


class _Unsupported(Exception):
    """A keyword or value the generator does not handle: the whole check then accepts nothing."""


class _Writer:
    def __init__(self) -> None:
        self.constants: dict[str, Any] = {}
        self.names = 0
        #: The envelope's required fields, bound to a name by the tests, with their types:
        #: the rules after the tests use them without looking them up again.
        self.bound: dict[str, tuple[str, set[str]]] = {}

    def typed(self, key: str, kind: str) -> str | None:
        """The name bound to the envelope's ``key`` when the tests made it exactly ``kind``."""
        name, kinds = self.bound.get(key, ("", set()))
        return name if kinds == {kind} else None

    def constant(self, value: Any) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def variable(self) -> str:
        self.names += 1
        return f"v{self.names}_"  # the underscore: no name is the start of another

    def conditions(self, schema: Mapping[str, Any], v: str, *, top: bool = True) -> list[str]:
        """The tests ``schema`` makes of the value named ``v``, all of which must hold."""
        known = {"type", "const", "enum", "pattern", "required", "properties"}
        if set(schema) - known - ANNOTATIONS - {"additionalProperties"}:
            raise _Unsupported
        kind = schema.get("type")
        kinds = [] if kind is None else [kind] if isinstance(kind, str) else list(kind)
        if any(k not in _TYPE_TESTS for k in kinds):
            raise _Unsupported
        tests = [f"({' or '.join(_TYPE_TESTS[k].format(v=v) for k in kinds)})"] if kinds else []
        string = kinds == ["string"]  # then the tests below need no type guard of their own
        if "const" in schema:
            tests.append(self._equal(v, schema["const"]))
        if "enum" in schema:
            items = schema["enum"]
            if not all(isinstance(item, str) for item in items):
                raise _Unsupported
            guard = "" if string else f"type({v}) is str and "
            tests.append(f"({guard}{v} in {self.constant(frozenset(items))})")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            search = self.constant(re.compile(pattern).search)
            seen = self.constant(set())
            # Values repeat through a log (ids, slugs): a set remembers the ones that matched,
            # and the search runs only for a new one.
            matched = f"({v} in {seen} or ({search}({v}) is not None and _keep({seen}, {v})))"
            tests.append(matched if string else f"(not isinstance({v}, str) or {matched})")
        elif pattern is not None:
            raise _Unsupported
        objects = {"required", "properties", "additionalProperties"} & set(schema)
        if not objects:
            return tests
        if kinds != ["object"]:
            # Object keywords apply only to objects; a schema that allows other types too is
            # rare enough to leave to the interpreter.
            raise _Unsupported
        required = frozenset(schema.get("required", ()))
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        keys = self.constant(required)
        if extra is False:
            known_keys = self.constant(frozenset(properties))
            exact = f"{v}.keys() == {keys} or " if required <= frozenset(properties) else ""
            # Most envelopes carry exactly the required fields: then one comparison.
            own = [f"({exact}({v}.keys() >= {keys} and {v}.keys() <= {known_keys}))"]
        elif extra is True:
            own = [f"{v}.keys() >= {keys}"]
        else:
            raise _Unsupported
        for key, sub in properties.items():
            inner = self.variable()
            subtests = self.conditions(sub, inner, top=False)
            if not subtests:
                continue
            # The first test binds the property's value, the others use the name.
            bound = subtests[0].replace(inner, f"({inner} := {v}[{key!r}])", 1)
            joined = " and ".join([bound, *subtests[1:]])
            own.append(joined if key in required else f"({key!r} not in {v} or ({joined}))")
            if top and key in required:
                self.bound[key] = (inner, _kinds(sub))
        if extra is False and all(map(_strings_or_null, properties.values())):
            # An object whose values can only be strings or null (edge headers) is most often
            # the same as the last one accepted; equal such objects have the same verdict
            # (a string equals only a string, null only null), and ``==`` is one C call.
            last = self.constant([None])
            return [*tests, f"({v} == {last}[0] or ({' and '.join(own)} and _last({last}, {v})))"]
        return tests + own

    def _equal(self, v: str, value: Any) -> str:
        if isinstance(value, bool) or value is None:
            return f"{v} is {value!r}"
        if isinstance(value, (int, str)):
            return f"type({v}) is {type(value).__name__} and {v} == {value!r}"
        raise _Unsupported


def compile_check(
    schema: Mapping[str, Any],
    metadata_keys: Mapping[str, frozenset[str]],
    date_ok: Callable[[str], bool],
) -> Callable[[Any], bool]:
    """``check(envelope) -> True`` only when the schema, the ``ts`` date-time rule and the
    closed metadata keys all accept it (the byte cap is the caller's)."""
    writer = _Writer()
    try:
        tests = writer.conditions(schema, "v")
    except _Unsupported:
        return _reject_all
    body = " and\n        ".join(tests) or "True"
    source = f"""
def check(v):
    if not (
        {body}
    ):
        return False
{_rules(writer)}"""
    namespace: dict[str, Any] = {
        **writer.constants,
        "_time": _TIME.fullmatch,
        "_date_ok": date_ok,
        "_dates": set(),
        "_learn": _learn,
        "_keep": _keep,
        "_last": _last,
        "_metadata_keys": metadata_keys,
        "_empty": frozenset(),
    }
    exec(compile(source, "<cvdiag schema check>", "exec"), namespace)  # noqa: S102 - our own source
    check: Callable[[Any], bool] = namespace["check"]
    return check


def _kinds(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types a schema allows; empty when it does not say (then: any)."""
    kind = schema.get("type")
    return {kind} if isinstance(kind, str) else set(kind or ())


def _strings_or_null(schema: Mapping[str, Any]) -> bool:
    kinds = _kinds(schema)
    return bool(kinds) and kinds <= {"string", "null"}


def _keep(seen: set[str], value: str) -> bool:
    """Remember a value that matched its pattern (at most 4096: a log of unique ids must not
    grow the set without end)."""
    if len(seen) >= 4096:
        seen.clear()
    seen.add(value)
    return True


def _last(holder: list[Any], value: Any) -> bool:
    holder[0] = value
    return True


def _rules(writer: _Writer) -> str:
    """The ``ts`` and closed-metadata rules, after the schema's tests: on the names the tests
    bound when they made the fields' types certain, else looked up and type-checked."""
    ts = writer.typed("ts", "string")
    if ts is None:
        rules = """
    ts = v.get("ts")
    if isinstance(ts, str):
        found = _time(ts) if type(ts) is str else None
        if found is None:
            return False
        date = found.group(1)
        if not (date in _dates or _learn(_dates, _date_ok, date)):
            return False"""
    else:  # the first 10 characters are the regex's date group
        rules = f"""
    if _time({ts}) is None:
        return False
    if not ({ts}[:10] in _dates or _learn(_dates, _date_ok, {ts}[:10])):
        return False"""
    boundary, metadata = writer.typed("boundary", "string"), writer.typed("metadata", "object")
    if boundary is None or metadata is None:
        return (
            rules
            + """
    boundary = v.get("boundary")
    metadata = v.get("metadata")
    if isinstance(boundary, str) and isinstance(metadata, dict):
        if type(boundary) is not str or type(metadata) is not dict:
            return False
        if not metadata.keys() <= _metadata_keys.get(boundary, _empty):
            return False
    return True
"""
        )
    return (
        rules
        + f"""
    return {metadata}.keys() <= _metadata_keys.get({boundary}, _empty)
"""
    )


def _reject_all(value: Any) -> bool:
    return False


def _learn(seen: set[str], accept: Callable[[str], object], value: str) -> bool:
    """Whether ``accept`` takes ``value`` (a pattern's search or a date check), remembering
    the values it took: ids, slugs and dates repeat through a log."""
    if not accept(value):
        return False
    if len(seen) >= 4096:
        seen.clear()
    seen.add(value)
    return True
