"""The clock offset between a probe and its backend, bounded from pairs: the true offset always
lies in the interval, whatever the clocks and latencies; an empty interval is widened and said;
no pair means the wall clocks, said."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.layers import Join, bound
from tests.support.probes import Probe
from tests.support.records import records_of
from tests.support.stories import Story

latency = st.floats(min_value=0.0, max_value=3000.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    theta=st.floats(min_value=-600_000.0, max_value=600_000.0, allow_nan=False),
    requests=st.lists(
        st.tuples(latency, latency, latency, latency, latency), min_size=1, max_size=4
    ),
    sse=st.booleans(),
)
def test_the_true_offset_lies_in_the_interval(
    theta: float, requests: list[tuple[float, float, float, float, float]], sse: bool
) -> None:
    """θ is the backend's clock minus the probe's; the probe writes its own clock's stamps."""
    story = Story("t-bound")
    probe = Probe("t-bound", skew_ms=theta)
    at = 0.0
    for gap, to_backend, to_head, to_byte, to_client in requests:
        at += gap
        index = probe.send(at)
        story.ingress(at + to_backend)
        probe.head(at + to_backend + to_head, index, sent=at)
        if sse:
            story.first_byte(at + to_backend + to_byte)
            probe.event(at + to_backend + to_byte + to_client, index)
        at += to_backend + to_head + to_byte + to_client
    join = Join()
    for record in records_of(("backend.log", story), ("probe.log", probe)):
        join.add(record)
    view = join.view()
    assert view is not None
    offset = view.offset
    assert offset.lower is not None
    assert offset.upper is not None
    assert offset.lower <= theta <= offset.upper
    assert offset.widened_ms == 0
    assert offset.pairs == len(requests) * (3 if sse else 2)


def test_the_middle_of_the_interval_give_or_take_half_its_width() -> None:
    offset = bound([110.0, 105.0], [95.0, 90.0])  # each loosened by 2 ms for the stamps
    assert (offset.lower, offset.upper) == (93.0, 107.0)
    assert offset.theta_ms == 100.0
    assert offset.half_width_ms == 7.0
    assert offset.said() == "aligned to ±7 ms from 4 pairs"


def test_an_empty_interval_is_widened_to_the_smallest_that_holds_and_said() -> None:
    offset = bound([50.0], [60.0])  # a stamp taken after its send: no θ fits both
    assert offset.widened_ms == 6.0
    assert (offset.lower, offset.upper) == (52.0, 58.0)
    assert "disagreed by 6 ms" in offset.said()
    assert "widened" in offset.said()


def test_no_pair_is_the_wall_clock_said() -> None:
    offset = bound([], [])
    assert not offset.known
    assert offset.theta_ms == 0.0
    assert offset.said() == "layers joined on the wall clock alone (no send/ingress or answer pair)"


def test_one_side_only_is_said() -> None:
    offset = bound([40.0], [])
    assert offset.theta_ms == 40.0
    assert offset.half_width_ms is None
    assert "one side only" in offset.said()


def test_requests_pair_by_method_and_path_the_browsers_own_left_out() -> None:
    """An icon the browser asked for has an ingress and no send: the test's own requests still
    pair with theirs."""
    story = Story("t-pair")
    probe = Probe("t-pair", skew_ms=5000)
    probe.send(0, url="/chat?stream")
    story.emit("backend.request.ingress", 1, metadata={"method": "GET", "path": "/favicon.ico"})
    story.ingress(3)
    probe.head(10, 0, sent=0)
    join = Join()
    for record in records_of(("b", story), ("p", probe)):
        join.add(record)
    view = join.view()
    assert view is not None
    assert view.requests[0].ingress_ms is not None
    assert view.offset.lower is not None
    assert view.offset.upper is not None
    assert view.offset.lower <= 5000 <= view.offset.upper
    assert view.offset.upper - view.offset.lower < 20
    assert join.browser_own_requests


def test_a_pages_own_fetch_without_an_index_is_a_request_of_its_own() -> None:
    """A browser's probe sees the page's fetch from its head: paired with the backend's ingress
    of the same path, it bounds the clocks from below; a line without an index or a path
    belongs to the request seen last before it."""
    story = Story("t-page")
    story.ingress(0)
    story.first_byte(5)
    probe = Probe("t-page", skew_ms=-2_000)
    probe.start(-100, url="http://127.0.0.1:3000/")
    probe.emit(
        "probe.network.response",
        3,
        {
            "url": "http://127.0.0.1:8000/chat",
            "status": 200,
            "content_length": None,
            "duration_ms": 4,
        },
    )
    probe.emit(
        "probe.sse.event",
        7,
        {"event_type": "TEXT_MESSAGE_CONTENT", "payload_size_bytes": 60, "sequence_num": 0},
    )
    join = Join()
    for record in records_of(("b", story), ("p", probe)):
        join.add(record)
    view = join.view()
    assert view is not None
    assert [r.url for r in view.requests] == ["http://127.0.0.1:8000/chat"]
    assert view.requests[0].events == 1
    offset = view.offset
    assert offset.upper is None
    assert offset.lower is not None
    assert offset.lower <= -2_000
    assert "one side only (answers" in offset.said()
