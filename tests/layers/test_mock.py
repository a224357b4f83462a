"""The mock provider's entries joined to the backend's LLM calls: the true offset between the
mock's clock and the backend's always lies in the bounded interval, whatever the clocks and
latencies; the wall clock is kept when every pair holds with it; a call refused before it
reached anything pairs with no entry, and is the call the mock never saw."""

from __future__ import annotations

import datetime
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.layers.mock import MockJoin
from cvdiag.logs.aimock import entry_envelopes
from cvdiag.logs.reading import Record, ts_key
from tests.support.records import records_of
from tests.support.stories import T0, Story

latency = st.floats(min_value=0.0, max_value=3000.0, allow_nan=False)
EPOCH_MS = (T0 - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) / (
    datetime.timedelta(milliseconds=1)
)


def _entry(test_id: str, at_ms: float, index: int, **response: Any) -> list[Record]:
    """A journal entry stamped ``at_ms`` (the mock's clock, ms from T0), as its lines."""
    entry = {
        "id": f"req-{index}",
        "timestamp": int(EPOCH_MS + at_ms),
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": {"x-test-id": test_id},
        "body": {"model": "fake-1", "messages": [{"role": "user", "content": "hi"}]},
        "response": {"status": 200, "fixture": {"match": {"userMessage": "hi"}}, **response},
    }
    out = []
    for lineno, env in enumerate(entry_envelopes(entry, index), 1):
        key = ts_key(env["ts"])
        assert key is not None
        out.append(Record("journal.json", lineno, orjson.dumps(env), env, (key, env["mono_ns"])))
    return out


@settings(max_examples=200, deadline=None)
@given(
    theta=st.floats(min_value=-600_000.0, max_value=600_000.0, allow_nan=False),
    calls=st.lists(st.tuples(latency, latency, latency), min_size=1, max_size=4),
)
def test_the_true_offset_lies_in_the_interval(
    theta: float, calls: list[tuple[float, float, float]]
) -> None:
    """θ is the backend's clock minus the mock's; the mock stamps its own clock."""
    story = Story("t-mock")
    join = MockJoin()
    at = 0.0
    for index, (gap, to_mock, to_answer) in enumerate(calls):
        # One call after another (a harness's turns): concurrent calls pair in start order,
        # which two calls begun together may not keep.
        at += gap + 1
        call = story.llm_start(at, None)
        decided = at + to_mock
        story.llm_response(decided + to_answer, call, to_mock + to_answer)
        at = decided + to_answer
        for record in _entry("t-mock", decided - theta, index):
            join.add(record)
    for record in records_of(("backend.log", story)):
        join.add(record)
    view = join.view()
    assert view is not None
    offset = view.offset
    assert offset.lower is not None
    assert offset.upper is not None
    # The mock's stamp is whole ms, truncated: the true offset within a ms more of the bounds.
    assert offset.lower - 1 <= theta <= offset.upper + 1
    assert offset.lower - 1 <= offset.theta_ms <= offset.upper + 1
    if offset.lower <= 0 <= offset.upper:
        assert offset.theta_ms == 0  # every pair holds with the wall clocks: they are kept
    assert all(entry.call is not None for entry in view.entries)
    assert view.unseen_calls == []


def test_a_refused_call_is_the_one_the_mock_never_saw() -> None:
    story = Story("t-unseen")
    first = story.llm_start(0, None)
    story.llm_response(20, first, 20)
    second = story.llm_start(30, None)
    story.llm_response(31, second, 1, outcome="err", error_class="ConnectError")
    join = MockJoin()
    for record in [*records_of(("backend.log", story)), *_entry("t-unseen", 5, 0)]:
        join.add(record)
    view = join.view()
    assert view is not None
    assert [entry.call for entry in view.entries] == [first]
    assert view.unseen_calls == [second]
    assert "its wall clock kept" in view.offset.said()


def test_no_mock_line_no_view() -> None:
    join = MockJoin()
    story = Story("t-none")
    story.llm_start(0, None)
    for record in records_of(("backend.log", story)):
        join.add(record)
    assert join.view() is None
    assert not join.has_mock
