from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from cvdiag import CallableSink, MemorySink, Settings, configure, emit, flush, get_emitter
from cvdiag.core.context import RequestContext, reset_context, set_context
from cvdiag.core.guard import failures
from cvdiag.pipeline.emitter import Emitter
from cvdiag.schema.vocabulary import BOUNDARY_TIER, Tier
from cvdiag.sinks import StdoutSink
from tests.schema_check import assert_valid


def make(tier: Tier = Tier.DEBUG, **options: Any) -> tuple[Emitter, MemorySink]:
    sink = MemorySink()
    return Emitter(Settings(enabled=True, tier=tier, **options), sinks=[sink]), sink


@pytest.mark.parametrize("tier", list(Tier))
def test_tier_matrix(tier: Tier) -> None:
    em, sink = make(tier)
    for boundary in BOUNDARY_TIER:
        em.emit(boundary)
    emitted = {env["boundary"] for env in sink.envelopes}
    assert emitted == {b for b, t in BOUNDARY_TIER.items() if t <= tier}
    assert {b for b in emitted if b.startswith("cvdiag.")} == {
        b for b in BOUNDARY_TIER if b.startswith("cvdiag.")
    }


def test_tier_matrix_matches_the_issue() -> None:
    default = {
        "backend.agent.enter",
        "backend.sse.aborted",
        "backend.agent.exit",
        "backend.response.complete",
        "backend.error.caught",
    }
    verbose = {
        "backend.request.ingress",
        "backend.llm.call.start",
        "backend.llm.call.heartbeat",
        "backend.llm.call.response",
        "backend.sse.first_byte",
    }
    assert {b for b, t in BOUNDARY_TIER.items() if t is Tier.DEFAULT and "backend" in b} == default
    backend = {b: t for b, t in BOUNDARY_TIER.items() if not b.startswith("probe.")}
    assert {b for b, t in backend.items() if t is Tier.VERBOSE} == verbose
    assert {b for b, t in BOUNDARY_TIER.items() if t is Tier.DEBUG} == {"backend.sse.event"}


def test_the_probes_tiers_match_issue_45() -> None:
    """What the client saw: how each test id began and each request ended at every tier, what
    it saw between at VERBOSE (a response's later SSE events: its producer, at DEBUG)."""
    probe = {b: t for b, t in BOUNDARY_TIER.items() if b.startswith("probe.")}
    assert {b for b, t in probe.items() if t is Tier.DEFAULT} == {
        "probe.start",
        "probe.exit",
        "probe.sse.aborted",
        "probe.network.error",
        "probe.console.error",
    }
    assert {b for b, t in probe.items() if t is Tier.VERBOSE} == {
        "probe.message.send",
        "probe.network.response",
        "probe.navigate.complete",
        "probe.sse.event",
        "probe.dom.container.mount",
        "probe.dom.firsttoken",
        "probe.dom.alternate_content",
    }


def test_each_envelope_s_layer_follows_its_boundary() -> None:
    em, sink = make(Tier.DEBUG)
    for boundary in BOUNDARY_TIER:
        em.emit(boundary)
    layers = {env["boundary"]: env["layer"] for env in sink.envelopes}
    assert layers == {b: "probe" if b.startswith("probe.") else "backend" for b in BOUNDARY_TIER}


def test_disabled_writes_nothing_and_starts_no_thread() -> None:
    stdout = StdoutSink()
    em = Emitter(Settings(enabled=False), sinks=[stdout])
    before = threading.active_count()
    for _ in range(100):
        em.emit("backend.error.caught", metadata={"message_scrubbed": "x"})
    assert threading.active_count() == before
    assert em.emitted == 0
    assert stdout.written == 0
    assert not em.allows("backend.error.caught")


def test_allows() -> None:
    em, _ = make(Tier.VERBOSE)
    assert em.allows("backend.llm.call.start")
    assert not em.allows("backend.sse.event")
    assert not em.allows("no.such.boundary")


def test_debug_envelope_bound_falls_back_once() -> None:
    em, sink = make(Tier.DEBUG, debug_max_envelopes=5)
    for i in range(20):
        em.emit("backend.sse.event", metadata={"sequence_num": i})
        em.emit("backend.agent.enter")
    audits = [e for e in sink.envelopes if e["boundary"] == "cvdiag.purge_audit"]
    assert len(audits) == 1
    assert audits[0]["metadata"]["reason"] == "debug_envelope_bound"
    assert audits[0]["metadata"]["to_tier"] == "default"
    assert_valid(audits[0])
    events = [e for e in sink.envelopes if e["boundary"] == "backend.sse.event"]
    assert len(events) == 3  # five debug-tier envelopes: sse.event/agent.enter alternating
    assert em.tier is Tier.DEFAULT


def test_debug_time_bound_falls_back_to_verbose_when_verbose_set() -> None:
    em, sink = make(Tier.DEBUG, debug_max_seconds=1e-9, debug_fallback_tier=Tier.VERBOSE)
    em.emit("backend.sse.event")  # starts the clock
    em.emit("backend.sse.event")
    em.emit("backend.llm.call.start")
    boundaries = [e["boundary"] for e in sink.envelopes]
    assert boundaries == ["backend.sse.event", "cvdiag.purge_audit", "backend.llm.call.start"]
    assert sink.envelopes[1]["metadata"]["reason"] == "debug_time_bound"
    assert em.tier is Tier.VERBOSE


def test_context_supplies_ids_and_parent() -> None:
    em, sink = make()
    ctx = RequestContext(
        test_id="d4-chat-1", trace_id="t" * 32, slug="chat", demo="x", span_id="a" * 16
    )
    token = set_context(ctx)
    try:
        em.emit("backend.agent.enter")
        em.emit("backend.agent.enter", parent_span_id=None, span_id="b" * 16)
    finally:
        reset_context(token)
    first, second = sink.envelopes
    assert (first["test_id"], first["trace_id"], first["slug"]) == ("d4-chat-1", "t" * 32, "chat")
    assert first["parent_span_id"] == "a" * 16
    assert second["parent_span_id"] is None
    assert second["span_id"] == "b" * 16
    assert_valid(first)


def test_a_failing_sink_never_reaches_the_caller(capsys: pytest.CaptureFixture[str]) -> None:
    def broken(envelope: Mapping[str, Any]) -> None:
        raise BrokenPipeError("gone")

    good = MemorySink()
    em = Emitter(Settings(enabled=True), sinks=[CallableSink(broken), good])
    before = failures["sink"]
    for _ in range(3):
        em.emit("backend.error.caught")
    assert failures["sink"] == before + 3
    assert len(good.envelopes) == 3  # one sink failing does not starve the others
    assert capsys.readouterr().err.count("BrokenPipeError") <= 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"outcome": "weird"},
        {"duration_ms": float("nan")},
        {"duration_ms": 1e300},
        {"metadata": {"message_scrubbed": object()}},
        {"duration_ms": -5},
    ],
)
def test_odd_arguments_are_absorbed(kwargs: dict[str, Any]) -> None:
    em, sink = make()
    em.emit("backend.error.caught", **kwargs)
    (env,) = sink.envelopes
    assert_valid(env)


def test_unknown_boundary_is_counted_not_raised() -> None:
    em, sink = make()
    before = failures["emit"]
    em.emit("backend.nope")
    assert not sink.envelopes
    assert failures["emit"] == before + 1


def test_configure_replaces_and_flushes_the_previous_emitter(tmp_path: Any) -> None:
    from cvdiag import FileSink

    path = tmp_path / "a.log"
    configure(Settings(enabled=True), sinks=[FileSink(path)])
    emit("backend.error.caught")
    second = MemorySink()
    configure(Settings(enabled=True), sinks=[second])
    emit("backend.error.caught")
    flush()
    assert path.read_text().count("CVDIAG {") == 1
    assert len(second.envelopes) == 1
    assert get_emitter().sinks == (second,)
    configure(Settings(), sinks=[MemorySink()])


def test_logging_sink(caplog: pytest.LogCaptureFixture) -> None:
    from cvdiag import LoggingSink

    em = Emitter(Settings(enabled=True), sinks=[LoggingSink("cvdiag.test")])
    with caplog.at_level(logging.INFO, logger="cvdiag.test"):
        em.emit("backend.error.caught", outcome="err")
    (record,) = caplog.records
    assert record.getMessage().startswith('CVDIAG {"schema_version":1')
    assert record.cvdiag["boundary"] == "backend.error.caught"  # type: ignore[attr-defined]


def test_stats() -> None:
    em, _ = make(Tier.DEFAULT)
    em.emit("backend.error.caught", metadata={"message_scrubbed": "x" * 5000, "extra": 1})
    stats = em.stats()
    assert (stats["emitted"], stats["truncated"], stats["metadata_dropped"]) == (1, 1, 1)
