"""The compiled envelope check behind ``cvdiag validate``: it may only accept what the schema
interpreter and cvdiag's rules accept, and it must accept the envelopes cvdiag writes (else
every envelope would take the slow path)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.logs import validate
from cvdiag.logs.fastcheck import compile_check
from cvdiag.logs.validate import MAX_BYTES, cvdiag_problems, problems, schema_problems
from cvdiag.schema.vocabulary import packaged_schema
from tests.logs.test_validate import BASES, envelopes

#: ``ts`` values around the RFC 3339 rule: ranges, leap days, offsets, non-ASCII digits.
_TIMES = [
    "2026-11-22T03:00:00.000Z",
    "2026-11-22t03:00:00z",
    "2026-02-29T03:00:00Z",
    "2024-02-29T03:00:00Z",
    "2026-04-31T03:00:00Z",
    "2026-13-01T03:00:00Z",
    "2026-11-22T24:00:00Z",
    "2026-11-22T23:59:60Z",
    "2026-11-22T23:60:00Z",
    "2026-11-22T03:00:00+23:59",
    "2026-11-22T03:00:00+24:00",
    "2026-11-22T03:00:00",
    "2026-11-22T03:00:00.Z",
    "٢٠٢٦-11-22T03:00:00Z",
    "2026-11-22T03:00:00Z\n",
]


def _interpreted(value: Any, size: int) -> list[Any]:
    return schema_problems(value) + cvdiag_problems(value, size)


@st.composite
def _mutated(draw: st.DrawFn) -> Any:
    value = draw(envelopes())
    if isinstance(value, dict) and draw(st.booleans()):
        value = copy.deepcopy(value)
        if draw(st.booleans()):
            value["ts"] = draw(st.sampled_from(_TIMES))
        if isinstance(value.get("metadata"), dict) and draw(st.booleans()):
            value["metadata"][draw(st.sampled_from(["dropped_count", "bogus", "method"]))] = 1
        if draw(st.booleans()):
            value["boundary"] = draw(
                st.sampled_from(["cvdiag.queue_dropped", "cvdiag.purge_audit"])
            )
    return value


@settings(max_examples=2000, deadline=None)
@given(_mutated())
def test_the_compiled_check_accepts_only_what_the_interpreter_accepts(value: Any) -> None:
    accepts = validate.fast_check()
    if accepts(value):
        assert _interpreted(value, 100) == []
    assert problems(value, 100) == _interpreted(value, 100)


def test_it_accepts_every_envelope_cvdiag_writes() -> None:
    accepts = validate.fast_check()
    assert all(accepts(orjson.loads(orjson.dumps(env))) for env in BASES)


def test_the_byte_cap_still_applies() -> None:
    assert [p.rule for p in problems(BASES[0], MAX_BYTES + 1)] == ["size"]


@pytest.mark.parametrize("ts", _TIMES)
def test_dates_and_times_agree_with_the_interpreter(ts: str) -> None:
    env = dict(BASES[0], ts=ts)
    assert problems(env, 100) == _interpreted(env, 100)
    if ts.isascii():  # other digits are left to the interpreter, which words them
        assert validate.fast_check()(env) == (not _interpreted(env, 100))


def test_a_schema_it_cannot_compile_leaves_every_envelope_to_the_interpreter() -> None:
    schema = copy.deepcopy(packaged_schema())
    schema["properties"]["demo"]["maxLength"] = 5
    check = compile_check(schema, {}, lambda date: True)
    assert not check(BASES[0])
