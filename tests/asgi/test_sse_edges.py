"""The first and last events a terminal names (``first_event_type``, ``last_event_type``) are
the ones the SSE parser names, read off the body's edges only, whatever the events and endings."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.asgi.sse_edges import edge_event_type, edge_scan
from cvdiag.asgi.sse_parser import SSEParser
from cvdiag.core.context import RequestContext
from tests.pipeline.test_template import _lines, _pair, _same, contexts

NAMES = st.sampled_from(["RUN_STARTED", "TEXT_MESSAGE_CONTENT", "RUN_FINISHED", "response.created"])
EVENT = st.one_of(
    st.builds(lambda n: f"data: {json.dumps({'type': n})}", NAMES),
    st.builds(lambda n: f"event: {n}\ndata: {{}}", NAMES),
    st.builds(
        lambda n, pad: f"data: {json.dumps({'pad': pad, 'type': n})}", NAMES, st.text(max_size=6000)
    ),
    st.just("data: plain"),
    st.just(": ping"),
)


@given(
    blocks=st.lists(EVENT, max_size=8),
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    tail=st.text(max_size=20),
)
def test_the_edges_name_what_the_parser_names(blocks: list[str], ending: str, tail: str) -> None:
    body = "".join(block.replace("\n", ending) + ending * 2 for block in blocks)
    data = body.encode() + tail.replace(":", "").replace("\n", "").replace("\r", "").encode()
    events = SSEParser().feed(body.encode())
    assert edge_event_type(data, last=True) == (events[-1].event_type if events else None)
    assert edge_event_type(data, last=False) == (events[0].event_type if events else None)


@settings(max_examples=300, deadline=None)
@given(
    blocks=st.lists(
        st.one_of(EVENT, st.builds(lambda n: f"data: {'x' * n}", st.integers(400, 600))),
        max_size=8,
    ),
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    cut=st.integers(0, 700),
)
def test_the_short_look_at_an_edge_finds_what_the_whole_window_finds(
    blocks: list[str], ending: str, cut: int
) -> None:
    # The short look trusts only a block whole within its 512 bytes, CRLFs cut in two included:
    # a body cut anywhere at either end (a kept tail, a long event) reads as the long look.
    body = "".join(block.replace("\n", ending) + ending * 2 for block in blocks).encode()
    for data in (body, body[cut:], body[: len(body) - cut]):
        for last in (True, False):
            assert edge_event_type(data, last=last) == edge_scan(data, last=last)


#: Blocks whose one data line a fast read could take for the whole event: a field after it.
TRAILED = st.one_of(
    st.builds(lambda n, m: f"data: {json.dumps({'type': n})}\nevent: {m}", NAMES, NAMES),
    st.builds(lambda n: f"data: {json.dumps({'type': n})}\ndata: more", NAMES),
    st.builds(lambda n: f"data: {json.dumps({'type': n})}\n: note", NAMES),
)
#: Every way a line can end, and a blank line close a block, with endings mixed in one body.
BREAKS = st.sampled_from(["\n", "\r\n", "\r"])
CLOSES = st.sampled_from(["\n\n", "\r\n\r\n", "\r\r", "\r\n\n", "\n\r\n", "\r\r\n"])


@settings(max_examples=300, deadline=None)
@given(
    blocks=st.lists(st.tuples(st.one_of(EVENT, TRAILED), BREAKS, CLOSES), max_size=6),
    cut=st.integers(0, 40),
)
def test_mixed_endings_name_what_the_parser_names(
    blocks: list[tuple[str, str, str]], cut: int
) -> None:
    # The one-line read at an edge (sse_edges.edge_line) must see a block that is more than
    # its data line, and endings that are not all LF or all CRLF, and leave them to the parser.
    body = "".join(block.replace("\n", br) + close for block, br, close in blocks).encode()
    events = SSEParser().feed(body)
    assert edge_event_type(body, last=True) == (events[-1].event_type if events else None)
    assert edge_event_type(body, last=False) == (events[0].event_type if events else None)
    for data in (body[cut:], body[: len(body) - cut]):
        for last in (True, False):
            assert edge_event_type(data, last=last) == edge_scan(data, last=last)


names = st.one_of(
    st.sampled_from(["RUN_STARTED", "RUN_FINISHED", "response.created"]),
    st.text(max_size=30),
    st.just("sk-proj-" + "A1b2C3d4E5f6G7h8" * 3),
)


@settings(max_examples=150, deadline=None)
@given(
    context=contexts,
    first=st.one_of(st.none(), names),
    last=names,
    numbers=st.tuples(*[st.integers(0, 2**53)] * 3),
)
def test_a_named_terminal_is_the_line_emit_writes(
    context: RequestContext, first: str | None, last: str, numbers: tuple[int, int, int]
) -> None:
    """The templates write a terminal naming its stream's events as ``emit`` would: the same
    bytes, the types scrubbed as identifiers."""
    emitter, sink = _pair()
    length, total, events = numbers
    lines = _lines(emitter, context)
    named = {"first_event_type": first, "last_event_type": last}
    if lines.complete(200, length, total, events, None, (first, last)):
        metadata = {"http_status": 200, "content_length": length, "total_duration_ms": total}
        emitter.emit(
            "backend.response.complete",
            outcome="ok",
            metadata={**metadata, "sse_event_count": events, **named},
            duration_ms=total,
            context=context,
        )
        _same(*list(sink.lines)[-2:])
    if lines.aborted("rst", length, "client_disconnect", total, total, None, (first, last)):
        emitter.emit(
            "backend.sse.aborted",
            outcome="err",
            metadata={
                "termination_kind": "rst",
                "bytes_before_abort": length,
                "termination_cause": "client_disconnect",
                "silence_ms": total,
                **named,
            },
            duration_ms=total,
            context=context,
        )
        _same(*list(sink.lines)[-2:])
    assert "A1b2C3d4E5f6" not in str(list(sink.lines))
