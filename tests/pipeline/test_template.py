"""The templated path (cvdiag/pipeline/template.py) writes the lines ``Emitter.emit`` would write.

Each request's own envelopes (event, first byte, complete, aborted) are made from templates
serialized once; these tests hold them byte for byte to the general path's lines, for any
context, event type and edge header a request can carry, and check where the templates step
aside: over the byte cap, past the debug budget, for sinks that want the envelope dict, and with
the OpenTelemetry bridge on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag import FileSink, MemorySink, Settings
from cvdiag.core.context import RequestContext
from cvdiag.pipeline.emitter import Emitter
from cvdiag.pipeline.template import RequestLines
from cvdiag.schema.vocabulary import EDGE_HEADER_KEYS
from cvdiag.sinks import CallableSink, QueuedLineSink, Sink

#: What differs between two envelopes made at different moments: their span id and times.
_MOMENT = re.compile(rb'"span_id":"[0-9a-f]{16}"|"ts":"[^"]+"|"mono_ns":\d+')

text = st.lists(
    st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["%", "%s", "%d", '"', "\\", "\u2028", "\u2029", "\x85", "\x00", "\ud800"]),
    ),
    max_size=20,
).map("".join)
contexts = st.builds(
    RequestContext,
    test_id=text,
    trace_id=text,
    slug=text,
    demo=text,
    span_id=st.one_of(st.none(), st.from_regex(r"[0-9a-f]{16}", fullmatch=True)),
)
edges = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(EDGE_HEADER_KEYS), text, min_size=1).map(
        lambda found: {key: found.get(key) for key in EDGE_HEADER_KEYS}
    ),
)


def _pair(tier: str = "debug", **options: Any) -> tuple[Emitter, MemorySink]:
    sink = MemorySink()
    emitter = Emitter(Settings(enabled=True, tier=tier, **options), sinks=[sink])  # type: ignore[arg-type]
    return emitter, sink


def _lines(emitter: Emitter, context: RequestContext) -> RequestLines:
    lines = emitter.lines_for(context)
    assert lines is not None
    return lines


def _same(templated: bytes, general: bytes) -> None:
    assert _MOMENT.sub(b"", templated) == _MOMENT.sub(b"", general)
    assert list(orjson.loads(templated)) == list(orjson.loads(general))  # key order


@settings(max_examples=150, deadline=None)
@given(
    context=contexts, event_type=text, size=st.integers(0, 2**40), sequence=st.integers(0, 10**6)
)
def test_an_event_line_is_the_line_emit_writes(
    context: RequestContext, event_type: str, size: int, sequence: int
) -> None:
    emitter, sink = _pair()
    assert _lines(emitter, context).event(event_type, size, sequence)
    metadata = {"event_type": event_type, "payload_size_bytes": size, "sequence_num": sequence}
    emitter.emit("backend.sse.event", metadata=metadata, context=context)
    _same(*sink.lines)
    assert sink.envelopes[0]["parent_span_id"] == context.span_id


@settings(max_examples=150, deadline=None)
@given(
    context=contexts,
    status=st.integers(0, 999),
    numbers=st.tuples(*[st.integers(0, 2**53)] * 3),
    edge=edges,
)
def test_a_complete_line_is_the_line_emit_writes(
    context: RequestContext,
    status: int,
    numbers: tuple[int, int, int],
    edge: Mapping[str, str | None] | None,
) -> None:
    emitter, sink = _pair()
    length, total, events = numbers
    if not _lines(emitter, context).complete(status, length, total, events, edge):
        return  # over the cap: emit makes it (test_over_the_cap_the_ladder_takes_over)
    emitter.emit(
        "backend.response.complete",
        outcome="ok" if 100 <= status < 400 else "err",
        metadata={
            "http_status": status,
            "content_length": length,
            "total_duration_ms": total,
            "sse_event_count": events,
        },
        duration_ms=total,
        context=context,
        edge_headers=edge,
    )
    _same(*sink.lines)


@settings(max_examples=150, deadline=None)
@given(
    context=contexts,
    method=text,
    path=st.one_of(text, text.map(lambda t: "/" + t * 40)),
    length=st.one_of(st.none(), st.integers(0, 2**63)),
    edge=edges,
    tier=st.sampled_from(["verbose", "debug"]),
)
def test_an_ingress_line_is_the_line_emit_writes(
    context: RequestContext,
    method: str,
    path: str,
    length: int | None,
    edge: Mapping[str, str | None] | None,
    tier: str,
) -> None:
    emitter, sink = _pair(tier)
    span_id = context.span_id or "00000000000000ab"
    metadata = {"method": method, "path": path, "content_length": length}
    if not _lines(emitter, context).ingress(span_id, method, path, length, edge):
        return  # over the cap: emit makes it (test_over_the_cap_the_ladder_takes_over)
    emitter.emit(
        "backend.request.ingress",
        metadata=metadata,
        context=context,
        span_id=span_id,
        parent_span_id=None,
        edge_headers=edge,
    )
    _same(*sink.lines)
    assert sink.envelopes[0]["parent_span_id"] is None
    assert sink.envelopes[0]["span_id"] == span_id


@settings(max_examples=50, deadline=None)
@given(
    context=contexts,
    kind=st.sampled_from(["rst", "timeout", "chunk_error", "fin_premature"]),
    cause=st.sampled_from(["client_disconnect", "send_failed", "cancelled", "incomplete"]),
    before=st.integers(0, 2**53),
    delta=st.integers(0, 2**53),
    silence=st.integers(0, 2**53),
)
def test_aborted_and_first_byte_lines_are_the_lines_emit_writes(
    context: RequestContext, kind: str, cause: str, before: int, delta: int, silence: int
) -> None:
    emitter, sink = _pair()
    lines = _lines(emitter, context)
    assert lines.aborted(kind, before, cause, delta, silence)
    emitter.emit(
        "backend.sse.aborted",
        outcome="err",
        metadata={
            "termination_kind": kind,
            "bytes_before_abort": before,
            "termination_cause": cause,
            "silence_ms": silence,
        },
        duration_ms=delta,
        context=context,
    )
    assert lines.first_byte(delta)
    emitter.emit(
        "backend.sse.first_byte", metadata={"delta_ms_from_ingress": delta}, context=context
    )
    aborted, aborted_general, first, first_general = sink.lines
    _same(aborted, aborted_general)
    _same(first, first_general)


@settings(max_examples=100, deadline=None)
@given(context=contexts, edge=edges, before=st.integers(0, 2**53))
def test_an_aborted_line_carries_the_responses_edge_headers_as_emit_does(
    context: RequestContext, edge: Mapping[str, str | None] | None, before: int
) -> None:
    """A stream cut after its response started keeps what the edge added to that response (a
    proxy's ``via``), so the default tier sees it on the abort as on a completion."""
    emitter, sink = _pair()
    if not _lines(emitter, context).aborted("rst", before, "client_disconnect", 7, 3, edge):
        return  # over the cap, or a lone surrogate: emit makes it
    emitter.emit(
        "backend.sse.aborted",
        outcome="err",
        metadata={
            "termination_kind": "rst",
            "bytes_before_abort": before,
            "termination_cause": "client_disconnect",
            "silence_ms": 3,
        },
        duration_ms=7,
        context=context,
        edge_headers=edge,
    )
    _same(*sink.lines)


def test_over_the_cap_the_ladder_takes_over() -> None:
    emitter, sink = _pair("default")
    context = RequestContext(test_id="t", trace_id="r", span_id="00000000000000aa")
    edge = dict.fromkeys(EDGE_HEADER_KEYS, "v" * 1024)
    assert not _lines(emitter, context).complete(200, 1, 1, 0, edge)
    assert not sink.lines  # nothing half-written: the middleware now calls emit
    emitter.emit("backend.response.complete", metadata={}, context=context, edge_headers=edge)
    assert sink.envelopes[0]["_truncated"] is True
    assert len(sink.lines[0]) <= emitter.byte_cap


def test_the_tier_and_the_debug_budget_gate_templated_lines() -> None:
    emitter, sink = _pair("debug", debug_max_envelopes=3, debug_fallback_tier="default")
    lines = _lines(emitter, RequestContext(test_id="t", trace_id="r"))
    for sequence in range(6):
        assert lines.event("message", 1, sequence)  # handled: written or gated out
    boundaries = [envelope["boundary"] for envelope in sink.envelopes]
    assert boundaries == ["backend.sse.event"] * 3 + ["cvdiag.purge_audit"]
    assert emitter.emitted == 4
    verbose, quiet = _pair("verbose")
    assert _lines(verbose, RequestContext(test_id="t", trace_id="r")).event("message", 1, 0)
    assert not quiet.lines


def test_templates_only_where_every_sink_takes_lines(tmp_path: Any) -> None:
    context = RequestContext(test_id="t", trace_id="r")
    file_sink = FileSink(tmp_path / "log")
    assert Emitter(Settings(enabled=True), sinks=[file_sink]).lines_for(context) is not None

    class Dicts(QueuedLineSink):  # wants the envelope: overrides write
        def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
            self.seen = envelope

        def _write_bytes(self, data: bytes) -> None:
            return None

    seen: list[Mapping[str, Any]] = []
    mixes: list[list[Sink]] = [[Dicts()], [file_sink, CallableSink(seen.append)]]
    for sinks in mixes:
        assert Emitter(Settings(enabled=True), sinks=sinks).lines_for(context) is None
    bridged = Emitter(Settings(enabled=True, otel=True), sinks=[MemorySink()])
    assert bridged.lines_for(context) is None
    file_sink.close()
