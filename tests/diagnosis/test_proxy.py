"""A proxy is context, not a cause; the silence before a disconnect is said.

Hand-written logs (tests/support/stories.py's ``Story``) for the rule's edges; the same stories
through real nginx in front of uvicorn are in tests/e2e/test_nginx_real.py.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag.diagnosis import classify
from cvdiag.logs.reading import Input, records
from tests.support.stories import Story

VIA = {"via": "1.1 nginx-proxy"}


def _classify(story: Story) -> classify.Verdict:
    data = ("\n".join(story.lines()) + "\n").encode()
    found = list(records(Input("log", io.BytesIO(data)), print))
    return classify.classify(classify.gather(story.test_id, found))


def _streamed(story: Story, events: int, *, via: dict[str, str] | None = VIA) -> None:
    story.ingress(edge=via)
    story.first_byte(2)
    story.events(2, events)


def _left(story: Story, at: float, *, via: dict[str, str] | None = VIA) -> None:
    story.aborted(at)
    story.envelopes[-1]["edge_headers"].update(via or {})


def test_a_healthy_stream_behind_a_proxy_is_healthy_and_names_it() -> None:
    story = Story("healthy-via")
    _streamed(story, 5)
    story.complete(10, events=5, edge=VIA)
    verdict = _classify(story)
    assert verdict.flap_class == "healthy"
    assert verdict.evidence["via"] == "1.1 nginx-proxy"


def test_a_client_leaving_behind_a_proxy_is_a_client_abort_with_the_proxy_named() -> None:
    story = Story("left-via")
    _streamed(story, 3)
    _left(story, 40)  # 38 ms after the third event: no idle timeout
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort"
    assert verdict.evidence["via"] == "1.1 nginx-proxy"
    assert verdict.evidence["silence_ms"] == pytest.approx(36.0, abs=1)
    assert "without a byte" not in verdict.reason


def test_a_disconnect_after_a_proxys_idle_timeout_is_edge_interference() -> None:
    story = Story("idle-via")
    _streamed(story, 3)
    _left(story, 2004 + 2)  # 2 s after the last event: nginx proxy_read_timeout 2s
    verdict = _classify(story)
    assert verdict.flap_class == "edge-interference"
    assert "closed after 2.0 s without a byte" in verdict.reason
    assert "proxy_read_timeout" in verdict.reason
    assert verdict.evidence["silence_ms"] == pytest.approx(2002.0, abs=1)
    assert verdict.evidence["via"] == "1.1 nginx-proxy"


def test_the_same_silence_with_no_proxy_header_is_said_beside_the_client_abort() -> None:
    story = Story("idle-novia")
    _streamed(story, 3, via=None)
    _left(story, 2006, via=None)
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort"
    assert "closed after 2.0 s without a byte" in verdict.reason


def test_the_terminals_own_silence_is_read_where_no_event_times_it() -> None:
    story = Story("idle-default")
    _left(story, 5000)
    story.envelopes[-1]["metadata"]["silence_ms"] = 2000
    story.envelopes[-1]["edge_headers"].update(VIA)
    verdict = _classify(story)
    assert verdict.flap_class == "edge-interference"
    assert verdict.evidence["silence_ms"] == 2000


def _client_got(story: Story, at: float, status: int) -> None:
    """What the harness's probe saw: the status its request got."""
    story.emit(
        "backend.request.ingress",  # replaced below: the probe's own boundary and layer
        at,
        metadata={"url": "/chat", "status": status, "content_length": 157, "duration_ms": 12},
    )
    story.envelopes[-1].update(layer="probe", boundary="probe.network.response")


def test_a_proxys_502_while_the_app_completed_is_edge_interference() -> None:
    story = Story("bad-gateway")
    story.ingress(edge=VIA)
    story.complete(5, edge=VIA)
    _client_got(story, 6, 502)
    verdict = _classify(story)
    assert verdict.flap_class == "edge-interference"
    assert "the client got HTTP 502 through the proxy" in verdict.reason
    assert verdict.evidence["client_status"] == 502
    assert verdict.evidence["app_status"] == 200


def test_a_502_the_app_sent_itself_is_not_the_proxys() -> None:
    story = Story("own-502")
    story.ingress(edge=VIA)
    story.error(3)
    story.complete(5, status=502, outcome="err", edge=VIA)
    _client_got(story, 6, 502)
    assert _classify(story).flap_class == "backend-error"


@given(
    via=st.text(min_size=1, max_size=80).filter(lambda v: v.strip()),
    events=st.integers(min_value=0, max_value=20),
)
def test_any_via_on_a_healthy_stream_stays_healthy(via: str, events: int) -> None:
    story = Story("prop-via")
    _streamed(story, events, via={"via": via})
    story.complete(30, events=events, edge={"via": via})
    assert _classify(story).flap_class == "healthy"


@given(quiet=st.floats(min_value=0.0, max_value=999.0), via=st.sampled_from(["1.1 a", "squid"]))
def test_a_client_leaving_sooner_than_an_idle_timeout_is_a_client_abort(
    quiet: float, via: str
) -> None:
    story = Story("prop-left")
    _streamed(story, 3, via={"via": via})
    _left(story, 4 + quiet, via={"via": via})
    assert _classify(story).flap_class == "client-abort"
