from __future__ import annotations

import math
import time
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag import MemorySink, Settings, configure
from cvdiag.core.context import RequestContext
from cvdiag.pipeline.emitter import Emitter
from cvdiag.pipeline.envelope import _Clock, ms_between
from cvdiag.schema.vocabulary import (
    BOUNDARY_TIER,
    BYTE_CAPS,
    DENIED_HEADERS,
    EDGE_HEADER_KEYS,
    METADATA_KEYS,
    Tier,
)
from tests.schema_check import assert_valid

CTX = RequestContext(
    test_id="01a20162-2dc3-73c2-bd91-a4bc72607c4d",
    trace_id="01a20162-2dc4-7ef8-8320-cbf32bb53867",
    slug="agentic-chat",
    demo="chat",
    span_id="6340156b9a4e1c56",
)


def emitter(tier: Tier = Tier.DEBUG) -> tuple[Emitter, MemorySink]:
    sink = MemorySink()
    return Emitter(Settings(enabled=True, tier=tier), sinks=[sink]), sink


def test_envelope_fields_and_order() -> None:
    em, sink = emitter()
    em.emit("backend.sse.first_byte", metadata={"delta_ms_from_ingress": 12}, context=CTX)
    (env,) = sink.envelopes
    assert list(env)[:15] == [
        "schema_version",
        "test_id",
        "trace_id",
        "span_id",
        "parent_span_id",
        "layer",
        "boundary",
        "slug",
        "demo",
        "ts",
        "mono_ns",
        "duration_ms",
        "outcome",
        "edge_headers",
        "metadata",
    ]
    assert env["parent_span_id"] == CTX.span_id
    assert env["span_id"] != CTX.span_id
    assert env["layer"] == "backend"
    assert env["ts"].endswith("Z")
    assert len(env["ts"]) == 24
    assert orjson.loads(sink.lines[0]) == env
    assert_valid(env)


def test_closed_metadata_drops_unknown_keys_without_mutating() -> None:
    em, sink = emitter()
    metadata = {"method": "GET", "path": "/x", "content_length": 0, "secret_sauce": 1}
    em.emit("backend.request.ingress", metadata=metadata, context=CTX)
    (env,) = sink.envelopes
    assert env["metadata"] == {"method": "GET", "path": "/x", "content_length": 0}
    assert env["_metadata_dropped"] is True
    assert "secret_sauce" in metadata
    assert_valid(env)


def test_no_stamp_when_nothing_dropped_or_truncated() -> None:
    em, sink = emitter()
    em.emit("backend.request.ingress", metadata={"method": "GET"}, context=CTX)
    assert "_metadata_dropped" not in sink.envelopes[0]
    assert "_truncated" not in sink.envelopes[0]


def test_nested_metadata_is_scrubbed() -> None:
    em, sink = emitter()
    em.emit(
        "backend.error.caught",
        metadata={
            "message_scrubbed": "key sk-test-12345",
            "stack_brief": [{"file": "a.py", "note": {"deep": ["Bearer abc.def.ghi"]}}],
        },
        context=CTX,
    )
    line = sink.lines[0].decode()
    assert "sk-test-12345" not in line
    assert "abc.def.ghi" not in line


class Weird:
    def __repr__(self) -> str:
        raise RuntimeError("nope")

    __str__ = __repr__


def cyclic() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["self"] = d
    return d


@pytest.mark.parametrize(
    "value",
    [
        Weird(),
        math.nan,
        math.inf,
        10**400,
        b"\xff\x00bytes",
        cyclic(),
        {1: 2, (3,): 4},
        set(range(1000)),
        object(),
        [[[[[[[[[[1]]]]]]]]]],
    ],
)
def test_unserializable_values_degrade(value: object) -> None:
    em, sink = emitter()
    em.emit("backend.error.caught", metadata={"message_scrubbed": value}, context=CTX)
    (env,) = sink.envelopes
    assert_valid(env)
    assert len(sink.lines[0]) <= BYTE_CAPS[Tier.DEBUG]


@pytest.mark.parametrize("tier", list(Tier))
def test_caps_per_tier(tier: Tier) -> None:
    em, sink = emitter(tier)
    em.emit("backend.error.caught", metadata={"message_scrubbed": "x" * 50_000}, context=CTX)
    (env,) = sink.envelopes
    assert len(sink.lines[0]) <= BYTE_CAPS[tier]
    assert env["_truncated"] is True
    assert_valid(env)


def test_ladder_keeps_what_fits() -> None:
    em, sink = emitter(Tier.DEFAULT)
    em.emit(
        "backend.error.caught",
        metadata={"exception_type": "ValueError", "message_scrubbed": "m" * 3000},
        context=CTX,
    )
    env = sink.envelopes[0]
    assert env["metadata"]["exception_type"] == "ValueError"
    assert env["metadata"]["message_scrubbed"].startswith("m" * 200)


def test_ladder_clamps_demo_and_edge_headers_last() -> None:
    em, sink = emitter(Tier.DEFAULT)
    ctx = RequestContext(test_id="a" * 128, trace_id="t", demo="d" * 256)
    edge = dict.fromkeys(EDGE_HEADER_KEYS, "v" * 256)
    em.emit(
        "backend.response.complete",
        metadata={"http_status": "5" * 4000},
        context=ctx,
        edge_headers=edge,
    )
    env = sink.envelopes[0]
    assert len(sink.lines[0]) <= BYTE_CAPS[Tier.DEFAULT]
    assert env["_truncated"] is True
    assert len(env["demo"]) < 256
    assert all(v is None or len(v) < 256 for v in env["edge_headers"].values())
    assert_valid(env)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=300)
    | st.binary(max_size=100),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=20), children, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=150, deadline=None)
@given(
    boundary=st.sampled_from(sorted(BOUNDARY_TIER)),
    tier=st.sampled_from(list(Tier)),
    metadata=st.dictionaries(st.text(max_size=30), json_values, max_size=8),
    known=st.data(),
    demo=st.text(max_size=400),
    slug=st.from_regex(r"[a-z][a-z0-9-]{0,63}", fullmatch=True),
    duration=st.one_of(st.none(), st.floats(), st.integers(-(10**20), 10**20)),
)
def test_every_envelope_is_within_its_cap_and_valid(
    boundary: str,
    tier: Tier,
    metadata: dict[str, Any],
    known: st.DataObject,
    demo: str,
    slug: str,
    duration: float | int | None,
) -> None:
    keys = sorted(METADATA_KEYS.get(boundary, ()))
    if keys:
        metadata.update(known.draw(st.dictionaries(st.sampled_from(keys), json_values)))
    em, sink = emitter(tier)
    ctx = RequestContext(test_id=CTX.test_id, trace_id=CTX.trace_id, slug=slug, demo=demo)
    em.emit(boundary, metadata=metadata, context=ctx, duration_ms=duration)
    if BOUNDARY_TIER[boundary] > tier:
        assert not sink.envelopes
        return
    (env,) = sink.envelopes
    assert len(sink.lines[0]) <= BYTE_CAPS[tier]
    assert_valid(env)


def test_denied_headers_never_appear() -> None:
    em, sink = emitter()
    metadata = dict.fromkeys(DENIED_HEADERS, "1.2.3.4")
    em.emit("backend.request.ingress", metadata=metadata, context=CTX)
    assert "1.2.3.4" not in sink.lines[0].decode()
    assert not set(DENIED_HEADERS) & set(sink.envelopes[0]["edge_headers"])


def test_outside_any_request_each_envelope_gets_fresh_ids() -> None:
    sink = MemorySink()
    configure(Settings(enabled=True, tier="debug"), sinks=[sink])
    try:
        from cvdiag import emit

        emit("backend.agent.enter", metadata={"agent_name": "a"})
        emit("backend.agent.enter", metadata={"agent_name": "b"})
    finally:
        configure(Settings(), sinks=[MemorySink()])
    first, second = sink.envelopes
    assert first["test_id"] != second["test_id"]
    assert first["parent_span_id"] is None
    assert first["slug"] == "unknown"
    assert first["demo"] == "default"
    assert_valid(first)


@settings(max_examples=50, deadline=None)
@given(
    start=st.integers(0, 2**41),  # milliseconds up to the year 2039 and beyond
    steps=st.lists(st.integers(0, 2500), min_size=1, max_size=12),
)
def test_a_stamp_is_its_milliseconds_utc_whatever_came_before(start: int, steps: list[int]) -> None:
    """The clock formats a second once and reuses it for the milliseconds in it: every stamp of
    a sequence of times (the same millisecond, the same second, the next ones) is still the
    time's own, as formatting it alone says."""
    clock = _Clock()
    ms = start
    for step in steps:
        ms += step
        clock._tick(ms)
        second, rest = divmod(ms, 1000)
        alone = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)) + f".{rest:03d}Z"
        assert clock._text == alone
        assert clock._bytes == alone.encode("ascii")


@settings(max_examples=500, deadline=None)
@given(
    start=st.floats(0, 1e7, allow_nan=False),
    elapsed=st.one_of(
        st.floats(-10.0, 1e6, allow_nan=False),
        # Exactly half a millisecond and its neighbours: where rounding half to even shows.
        st.integers(-3, 10**6).map(lambda n: (n + 0.5) / 1000),
        st.integers(0, 10**6).map(lambda n: n / 1000),
    ),
)
def test_a_duration_is_whole_milliseconds_rounded_as_round_does(
    start: float, elapsed: float
) -> None:
    end = start + elapsed
    assert ms_between(start, end) == max(0, round((end - start) * 1000))


def test_half_milliseconds_round_to_even() -> None:
    assert [ms_between(0.0, ms / 1000) for ms in (0.5, 1.5, 2.5, 3.5)] == [0, 2, 2, 4]
    assert ms_between(0.0, 0.0016) == 2
    assert ms_between(5.0, 4.0) == 0  # a clock stepped back
