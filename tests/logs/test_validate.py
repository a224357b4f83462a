"""The dependency-free validator: held to jsonschema's verdicts on generated envelopes, plus the
rules beyond the JSON Schema (ts format, closed metadata, the byte cap)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from cvdiag.logs import validate
from cvdiag.logs.validate import (
    MAX_BYTES,
    UnsupportedSchema,
    cvdiag_problems,
    is_date_time,
    schema_problems,
)
from cvdiag.schema.vocabulary import packaged_schema
from tests.support.stories import STORIES

JSONSCHEMA = Draft202012Validator(packaged_schema())
BASES = [env for make in STORIES.values() for env in make().envelopes]
FIELDS = sorted(packaged_schema()["properties"])
EDGE_KEYS = sorted(packaged_schema()["properties"]["edge_headers"]["properties"])

# Values chosen to sit on the edges of the schema: types JSON Schema treats specially (1.0 is an
# integer, true is not 1), strings at the ends of the patterns, Python's "$ before a newline".
_values = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            1,
            1.0,
            1.5,
            -1,
            2**70,
            "",
            "ok",
            "info",
            "bogus",
            "backend",
            "probe",
            "backend.sse.event",
            "cvdiag.queue_dropped",
            "0123456789abcdef",
            "0123456789abcdef\n",
            "0123456789ABCDEF",
            "0123456789abcde",
            "a" * 128,
            "a" * 129,
            "t-1\n",
            "T-1",
            "chat",
            "9chat",
            "c" * 64,
            "c" * 65,
            "2026-11-22T03:00:00.000Z",
            [],
            [1],
            {},
            {"a": 1},
        ]
    ),
    st.text(max_size=8),
    st.integers(),
    st.floats(allow_nan=False),
)


#: Per field, the values where a validator is most likely to differ from jsonschema.
_EDGES: dict[str, list[Any]] = {
    "test_id": ["t-1\n", "T-1", "a" * 128, "a" * 129, "", "x y"],
    "span_id": ["0123456789abcdef\n", "0123456789ABCDEF", "0123456789abcde", "0" * 17],
    "slug": ["chat\n", "9chat", "c" * 64, "c" * 65, "chat_1"],
    "schema_version": [1, 1.0, True, "1", 2],
    "mono_ns": [1.0, 1.5, True, "1", 2**70],
    "duration_ms": [None, 1.0, 1.5, False, "3"],
    "outcome": ["ok", "OK", "ok\n", None],
    "parent_span_id": [None, "", 3, "anything"],
}


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    env = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["set", "drop", "extra", "edge", "edge-drop", "edge-extra"]))
        if action == "set":
            field = draw(st.sampled_from(FIELDS))
            edges = _EDGES.get(field)
            use_edge = edges is not None and draw(st.booleans())
            env[field] = draw(st.sampled_from(edges)) if use_edge and edges else draw(_values)
        elif action == "drop":
            env.pop(draw(st.sampled_from(FIELDS)), None)
        elif action == "extra":
            env[draw(st.sampled_from(["extra", "_note", "Test_id"]))] = draw(_values)
        elif isinstance(env.get("edge_headers"), dict):
            key = draw(st.sampled_from(EDGE_KEYS))
            if action == "edge":
                env["edge_headers"][key] = draw(_values)
            elif action == "edge-drop":
                env["edge_headers"].pop(key, None)
            else:
                env["edge_headers"]["x-forwarded-for"] = "203.0.113.9"
    if draw(st.booleans()):
        return env
    return draw(st.sampled_from([env, [env], "text", 3, None]))


@settings(max_examples=1500, deadline=None)
@given(envelopes())
def test_the_validator_agrees_with_jsonschema(value: Any) -> None:
    assert (not schema_problems(value)) == JSONSCHEMA.is_valid(value), (
        schema_problems(value),
        [e.message for e in JSONSCHEMA.iter_errors(value)],
    )


def test_generated_envelopes_cover_both_verdicts() -> None:
    assert all(not schema_problems(env) for env in BASES)
    broken = dict(BASES[0], schema_version=True)
    assert not JSONSCHEMA.is_valid(broken)
    assert schema_problems(broken)


def test_a_schema_keyword_it_does_not_implement_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = copy.deepcopy(packaged_schema())
    schema["properties"]["demo"]["maxLength"] = 5
    monkeypatch.setattr(validate, "packaged_schema", lambda: schema)
    with pytest.raises(UnsupportedSchema, match="maxLength"):
        schema_problems(BASES[0])


@pytest.mark.parametrize(
    ("ts", "ok"),
    [
        ("2026-11-22T03:00:00.000Z", True),
        ("2026-11-22t03:00:00+05:30", True),
        ("2024-02-29T23:59:60Z", True),
        ("2026-02-29T00:00:00Z", False),
        ("2026-13-01T00:00:00Z", False),
        ("2026-11-22T24:00:00Z", False),
        ("2026-11-22T03:00:00", False),
        ("2026-11-22 03:00:00Z", False),
        ("2026-11-22T03:00:00+24:00", False),
    ],
)
def test_ts_must_be_an_rfc3339_date_time(ts: str, ok: bool) -> None:
    assert is_date_time(ts) is ok
    env = dict(BASES[0], ts=ts)
    assert any(p.rule == "format" for p in cvdiag_problems(env, 100)) is not ok


def test_metadata_is_closed_per_boundary() -> None:
    env = copy.deepcopy(BASES[0])
    env["metadata"]["prompt"] = "the user's words"
    (problem,) = cvdiag_problems(env, 100)
    assert problem.rule == "metadata"
    assert "'prompt'" in problem.message
    # A boundary with no keys listed may carry none.
    assert cvdiag_problems(dict(env, boundary="cvdiag.metadata_dropped", metadata={"x": 1}), 9)


def test_the_byte_cap_is_the_debug_tiers() -> None:
    env = BASES[0]
    assert not cvdiag_problems(env, MAX_BYTES)
    (problem,) = cvdiag_problems(env, MAX_BYTES + 1)
    assert problem.rule == "size"
    assert MAX_BYTES == 16384


def test_every_problem_of_an_envelope_is_listed() -> None:
    env = dict(BASES[0], outcome="maybe", slug="Chat", ts="now")
    env["metadata"] = {"method": "GET", "secret": 1}
    rules = sorted(p.rule for p in validate.problems(env, len(orjson.dumps(env))))
    assert rules == ["format", "metadata", "schema", "schema"]
