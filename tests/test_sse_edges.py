"""The first and last events a terminal names (``first_event_type``, ``last_event_type``) are
the ones the SSE parser names, read off the body's edges only, whatever the events and endings."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from cvdiag.asgi.sse import SSEParser, edge_event_type

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
