"""The classifier on the stream shapes agent backends use (AG-UI, OpenAI Responses, WebSocket),
on provider failures carried in-band, on both wire generations of ``termination_kind``, on time
to first token, and on logs that lack the tier a class needs. Hand-written logs (see
tests/support/stories.py's ``Story``); the real-server scenarios are in
tests/cli/test_shapes_real.py."""

from __future__ import annotations

import io

import pytest

from cvdiag.diagnosis import classify
from cvdiag.diagnosis.vocabulary import error_kind, is_content_event, termination
from cvdiag.logs.reading import Input, records
from tests.support.stories import Story

#: (termination_kind, termination_cause) of a client that left: today's and CVDIAG v1's wire.
CLIENT_LEFT = [("client_disconnect", None), ("rst", "client_disconnect")]


def _classify(story: Story, timeout: float = 60.0) -> classify.Verdict:
    data = ("\n".join(story.lines()) + "\n").encode()
    found = list(records(Input("log", io.BytesIO(data)), print))
    return classify.classify(classify.gather(story.test_id, found), first_token_timeout=timeout)


def _agui_hung_call(kind: str, cause: str | None, *, debug: bool = True) -> Story:
    """AG-UI: RUN_STARTED is the first byte; the call hangs, the client gives up, the call is
    cancelled."""
    story = Story("agui-hang")
    story.ingress()
    story.first_byte(1)
    if debug:
        story.event(1, "RUN_STARTED")
    agent = story.agent(2)
    call = story.llm_start(3, agent)
    for i in range(1, 4):
        story.heartbeat(3 + i * 1000, call, i * 1000)
    story.aborted(3200, kind, cause=cause, size=60)
    story.llm_response(3201, call, 3198, tokens=None, outcome="err", error_class="CancelledError")
    story.agent_exit(3202, 2, agent, "cancelled")
    return story


@pytest.mark.parametrize(("kind", "cause"), CLIENT_LEFT)
@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("timeout", [60.0, 1.0])
def test_an_agui_stream_does_not_hide_a_stalled_call(
    kind: str, cause: str | None, debug: bool, timeout: float
) -> None:
    verdict = _classify(_agui_hung_call(kind, cause, debug=debug), timeout)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "answered" not in verdict.reason
    assert "had ended" not in verdict.reason
    assert "CancelledError" in verdict.reason


def test_a_call_answering_after_the_client_left_was_waiting_when_it_left() -> None:
    """LangGraph keeps reading after the client left: the answer came 2.4 s later."""
    story = Story("lg-hang")
    story.ingress()
    story.first_byte(1)
    story.event(1, "RUN_STARTED")
    call = story.llm_start(3, story.request)
    story.heartbeat(1003, call, 1000)
    story.aborted(1500, "rst", cause="client_disconnect")
    story.llm_response(3900, call, 3897, tokens=12)
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "had not answered when the request ended" in verdict.reason
    assert "had ended" not in verdict.reason.replace("request ended", "")


def _failed_calls(status: str, *, event: str | None, final: int = 200) -> Story:
    story = Story("prov")
    story.ingress()
    story.first_byte(1)
    story.event(1, "RUN_STARTED")
    for i in range(3):
        call = story.llm_start(2 + i * 100, story.request)
        story.llm_response(50 + i * 100, call, 48, tokens=None, outcome="err", error_class=status)
    if event is not None:
        story.event(400, event, 1)
    story.complete(401, status=final, outcome="ok" if final < 400 else "err", events=2)
    return story


@pytest.mark.parametrize(
    "event", ["RUN_ERROR", "error", "response.failed", None], ids=lambda e: str(e)
)
@pytest.mark.parametrize(
    ("status", "expected"),
    [("HTTP500", "provider-error"), ("HTTP429", "provider-rate-limited")],
)
def test_a_provider_failure_carried_in_band_is_not_healthy(
    event: str | None, status: str, expected: str
) -> None:
    verdict = _classify(_failed_calls(status, event=event))
    assert verdict.flap_class == expected, verdict.reason
    assert "3 of 3 LLM calls failed" in verdict.reason
    assert "completed ok" in verdict.reason
    if event is not None:
        assert event in verdict.reason


def test_a_provider_429_passed_on_as_502_with_retry_after_is_rate_limited() -> None:
    story = Story("rl502")
    story.ingress()
    for i in range(3):
        call = story.llm_start(2 + i * 100, story.request)
        story.llm_response(
            50 + i * 100, call, 48, tokens=None, outcome="err", error_class="HTTP429"
        )
    story.complete(400, status=502, outcome="err", events=None, edge={"retry-after": "20"})
    verdict = _classify(story)
    assert verdict.flap_class == "provider-rate-limited", verdict.reason
    assert "HTTP429 ×3" in verdict.reason
    assert "retry-after=20" in verdict.reason


def test_a_caught_provider_exception_names_the_provider_at_the_default_tier() -> None:
    story = Story("caught")
    story.error(10, exception_type="RateLimitError")
    story.complete(12, status=500, outcome="err", events=0)
    assert _classify(story).flap_class == "provider-rate-limited"
    story = Story("caught5")
    story.error(10, exception_type="InternalServerError")
    story.complete(12, status=500, outcome="err", events=0)
    assert _classify(story).flap_class == "provider-error"


def test_a_failure_the_backend_retried_past_is_healthy() -> None:
    story = Story("retried")
    story.ingress()
    failed = story.llm_start(1, story.request)
    story.llm_response(20, failed, 19, tokens=None, outcome="err", error_class="HTTP500")
    call = story.llm_start(21, story.request)
    story.llm_response(40, call, 19)
    story.first_byte(41)
    story.complete(50)
    verdict = _classify(story)
    assert verdict.flap_class == "healthy", verdict.reason
    assert "HTTP500" in verdict.reason


def test_an_in_band_error_without_a_failed_call_is_a_backend_error() -> None:
    story = Story("inband")
    story.ingress()
    story.first_byte(1)
    story.event(1, "RUN_STARTED")
    story.event(5, "RUN_ERROR", 1)
    story.complete(6, events=2)
    verdict = _classify(story)
    assert verdict.flap_class == "backend-error"
    assert "RUN_ERROR" in verdict.reason


def test_a_cf_challenge_is_still_edge_interference_beside_a_provider_success() -> None:
    story = Story("edge")
    story.ingress(edge={"cf-mitigated": "challenge"})
    story.complete(5, status=403, outcome="err", events=0)
    assert _classify(story).flap_class == "edge-interference"


# --- time to first token --------------------------------------------------------------------


def _long_stream(first_token: float | None) -> Story:
    """A 2.6 s stream: heartbeats while tokens flow, as today's wire writes them."""
    story = Story("long")
    story.ingress()
    story.first_byte(1)
    story.event(1, "RUN_STARTED")
    call = story.llm_start(2, story.request)
    story.heartbeat(1002, call, 1000)
    story.heartbeat(2002, call, 2000)
    story.llm_response(2602, call, 2600, tokens=80, first_token=first_token)
    story.event(2605, "RUN_FINISHED", 2)  # the run ends as AG-UI says it must
    story.complete(2610, events=40)
    return story


def test_a_long_stream_with_a_quick_first_token_is_healthy() -> None:
    verdict = _classify(_long_stream(55), timeout=1)
    assert verdict.flap_class == "healthy", verdict.reason


def test_a_late_first_token_is_slow_whatever_the_heartbeats() -> None:
    verdict = _classify(_long_stream(1500), timeout=1)
    assert verdict.flap_class == "slow-first-token"
    assert "first token came 1500ms after it started" in verdict.reason


def test_content_events_show_when_tokens_flowed() -> None:
    story = Story("content")
    story.ingress()
    story.first_byte(1)
    story.event(1, "RUN_STARTED")
    call = story.llm_start(2, story.request)
    story.event(60, "TEXT_MESSAGE_CONTENT", 1)
    story.heartbeat(1002, call, 1000)
    story.heartbeat(2002, call, 2000)
    story.llm_response(2602, call, 2600, tokens=80)
    story.event(2605, "RUN_FINISHED", 2)
    story.complete(2610, events=40)
    assert _classify(story, timeout=1).flap_class == "healthy"


# --- the client left --------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "cause"), CLIENT_LEFT)
def test_a_client_leaving_a_flowing_stream_is_a_client_abort(kind: str, cause: str | None) -> None:
    story = Story("leave")
    story.ingress()
    story.first_byte(1)
    story.event(1, "RUN_STARTED")
    call = story.llm_start(2, story.request)
    story.event(57, "TEXT_MESSAGE_CONTENT", 1)
    story.aborted(500, kind, cause=cause)
    story.llm_response(501, call, 499, tokens=None, outcome="err", error_class="CancelledError")
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "was streaming" in verdict.reason
    assert "had ended" not in verdict.reason


def test_first_token_delta_shows_streaming_at_the_verbose_tier() -> None:
    story = Story("leave-v")
    story.ingress()
    story.first_byte(1)
    call = story.llm_start(2, story.request)
    story.aborted(500, "rst", cause="client_disconnect")
    story.llm_response(
        501, call, 499, tokens=None, outcome="err", error_class="CancelledError", first_token=50
    )
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "first token at +52 ms" in verdict.reason


def test_a_websocket_disconnect_caught_by_an_older_backend_is_no_backend_error() -> None:
    story = Story("ws")
    story.ingress()
    story.first_byte(1)
    story.error(5, exception_type="WebSocketDisconnect")
    story.aborted(6, "client_close")
    assert _classify(story).flap_class == "client-abort"


@pytest.mark.parametrize(
    ("kind", "cause", "client"),
    [
        ("client_disconnect", None, True),
        ("client_close", None, True),
        ("rst", None, True),
        ("cancelled", None, False),
        ("incomplete", None, False),
        ("rst", "client_disconnect", True),
        ("fin_premature", "client_close", True),
        ("fin_premature", "incomplete", False),
        ("timeout", "cancelled", False),
        ("chunk_error", None, False),
    ],
)
def test_termination_of_either_wire(kind: str, cause: str | None, client: bool) -> None:
    meta = {"termination_kind": kind} | ({"termination_cause": cause} if cause else {})
    found = termination(meta)
    assert found.by_client is client
    assert found.kind in {"rst", "timeout", "chunk_error", "fin_premature"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("HTTP429", "rate-limited"),
        ("RateLimitError", "rate-limited"),
        ("HTTP503", "failed"),
        ("InternalServerError", "failed"),
        ("APIConnectionError", "failed"),
        ("httpx.ConnectError", "failed"),
        ("HTTP401", "other"),
        ("ValueError", "other"),
        ("CancelledError", "cut"),
        ("ReadTimeout", "cut"),
        ("StreamCancelled", "cut"),
    ],
)
def test_error_kinds(name: str, expected: str) -> None:
    assert error_kind(name, "err") == expected


def test_lifecycle_events_are_not_content() -> None:
    for name in ("RUN_STARTED", "STEP_STARTED", "STATE_SNAPSHOT", "response.created", "ping"):
        assert not is_content_event(name), name
    for name in ("TEXT_MESSAGE_CONTENT", "TOOL_CALL_ARGS", "response.output_text.delta"):
        assert is_content_event(name), name


# --- honest about missing evidence ------------------------------------------------------------


def test_a_default_tier_log_says_what_it_cannot_tell() -> None:
    story = Story("default")
    agent = story.agent(1)
    story.aborted(3200, "client_disconnect", size=0)
    story.agent_exit(3202, 1, agent, "cancelled")
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort"
    assert verdict.log_tier == "default"
    assert "stalled-backend" in verdict.unchecked
    assert verdict.caveat is not None
    assert "CVDIAG_VERBOSE=1" in verdict.caveat
    assert "No byte had reached the client" in verdict.caveat
    # the same failure at the verbose tier needs no caveat
    verbose = _classify(_agui_hung_call("client_disconnect", None, debug=False))
    assert verbose.caveat is None
    assert verbose.log_tier == "verbose"
