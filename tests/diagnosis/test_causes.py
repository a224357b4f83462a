"""The classifier on causes a blind run of new scenarios found misnamed: calls cut by a timeout
or by shutdown, a provider's refusal (a 4xx), an error the provider reported inside a 200 body,
and a keep-alive comment sent while the model was silent. Hand-written logs (see
tests/support/stories.py's ``Story``); the real-server scenarios are in
tests/cli/test_causes_real.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag.diagnosis import classify
from cvdiag.diagnosis.vocabulary import error_kind
from cvdiag.logs.reading import Input, records
from cvdiag.providers.usage import ResponseFacts, reported_error
from tests.support.stories import Story


def _classify(story: Story, timeout: float = 60.0) -> classify.Verdict:
    data = ("\n".join(story.lines()) + "\n").encode()
    found = list(records(Input("log", io.BytesIO(data)), print))
    return classify.classify(classify.gather(story.test_id, found), first_token_timeout=timeout)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Shutdown", "cut"),  # cvdiag's own: a call outstanding when the process ended
        ("ServerError", "failed"),  # named from a provider's in-body error (usage.py)
        ("OverloadedError", "failed"),
        ("ProviderError", "failed"),
        ("RateLimitExceeded", "rate-limited"),
        ("InvalidRequestError", "other"),
    ],
)
def test_error_kinds_of_cvdiag_names(name: str, expected: str) -> None:
    assert error_kind(name, "err") == expected


def _waited(story: Story, error_class: str, *, outcome: str = "err", beats: int = 2) -> str:
    """A call that heartbeats and is then ended by ``error_class``, with no token."""
    call = story.llm_start(2, story.request)
    for i in range(1, beats + 1):
        story.heartbeat(2 + i * 250, call, i * 250)
    end = 2 + (beats + 1) * 250
    return story.llm_response(
        end, call, end - 2, tokens=None, outcome=outcome, error_class=error_class
    )


def test_a_call_ended_by_shutdown_was_waiting_when_the_log_ends() -> None:
    story = Story("shutdown")
    story.ingress()
    story.first_byte(1)
    story.event(1, "RUN_STARTED")
    _waited(story, "Shutdown", beats=8)
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "cut by Shutdown" in verdict.reason
    assert "the log ends before the request does" in verdict.reason


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "verbose"])
def test_a_timeout_reported_in_band_is_a_stalled_call(debug: bool) -> None:
    """The SDK's timeout fired on a silent provider; the app said so in-band and answered 200."""
    story = Story("timeout-inband")
    story.ingress()
    _waited(story, "ReadTimeout", outcome="timeout")
    story.first_byte(760)
    if debug:
        story.event(760, "RUN_ERROR")
    story.complete(761, events=1)
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "cut by ReadTimeout" in verdict.reason


def test_a_caught_timeout_of_a_waiting_call_is_no_backend_error() -> None:
    story = Story("timeout-raise")
    story.ingress()
    _waited(story, "ReadTimeout", outcome="timeout")
    story.error(760, exception_type="APITimeoutError")
    story.complete(761, status=500, outcome="err", events=0)
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "no byte reached the client" in verdict.reason


def test_a_timeout_of_the_apps_own_with_no_call_waiting_stays_a_backend_error() -> None:
    """A tool's deadline is the app's error: no LLM call was left waiting to explain it."""
    story = Story("tool-timeout")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(20, call, 19)
    story.error(1020, exception_type="TimeoutError")
    story.complete(1021, status=500, outcome="err", events=0)
    verdict = _classify(story)
    assert verdict.flap_class == "backend-error", verdict.reason
    assert "TimeoutError" in verdict.reason


@pytest.mark.parametrize(
    ("status", "event"),
    [(500, None), (200, "RUN_ERROR"), (200, None)],
    ids=["500", "in-band", "200"],
)
def test_a_refused_call_is_the_backends_error(status: int, event: str | None) -> None:
    """A 4xx other than 429 (a bad key, model or payload) with no ok call after it."""
    story = Story("refused")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(6, call, 5, tokens=None, outcome="err", error_class="HTTP401")
    story.first_byte(7)
    if event is not None:
        story.event(7, event)
    story.complete(8, status=status, outcome="ok" if status < 400 else "err", events=1)
    verdict = _classify(story)
    assert verdict.flap_class == "backend-error", verdict.reason
    assert "refused with HTTP401" in verdict.reason
    assert verdict.evidence["error_classes"] == ["HTTP401"]


def test_a_refusal_retried_past_is_healthy() -> None:
    story = Story("refused-then-ok")
    story.ingress()
    refused = story.llm_start(1, story.request)
    story.llm_response(6, refused, 5, tokens=None, outcome="err", error_class="HTTP400")
    call = story.llm_start(7, story.request)
    story.llm_response(30, call, 23)
    story.first_byte(31)
    story.complete(40)
    verdict = _classify(story)
    assert verdict.flap_class == "healthy", verdict.reason
    assert "HTTP400 on the way" in verdict.reason


def test_an_in_band_error_says_what_the_calls_did() -> None:
    story = Story("inband-ok-call")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(20, call, 19)
    story.first_byte(21)
    story.event(21, "RUN_ERROR")
    story.complete(22, events=1)
    verdict = _classify(story)
    assert verdict.flap_class == "backend-error", verdict.reason
    assert "its LLM call answered ok" in verdict.reason
    assert "failed" not in verdict.reason


def test_a_call_that_answered_before_the_client_left_is_not_called_streaming() -> None:
    story = Story("answered")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(40, call, 39, first_token=10)
    story.first_byte(12)
    story.aborted(3000, "rst", cause="client_disconnect")
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "its LLM call had answered" in verdict.reason
    assert "streaming" not in verdict.reason


def test_a_call_left_ending_with_no_ok_call_after_it_is_said_so() -> None:
    story = Story("cancelled-after-ok")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(20, call, 19)
    story.first_byte(21)
    spare = story.llm_start(22, story.request)
    story.llm_response(30, spare, 8, tokens=None, outcome="err", error_class="CancelledError")
    story.complete(31)
    verdict = _classify(story)
    assert verdict.flap_class == "healthy", verdict.reason
    assert "CancelledError and no call answered ok after it" in verdict.reason


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "verbose"])
def test_a_keepalive_first_byte_is_no_sign_of_tokens(debug: bool) -> None:
    """sse-starlette's ``: ping`` went out while the model was silent; the client gave up."""
    story = Story("ping-hang")
    story.ingress()
    story.first_byte(1, keepalive=True)
    if debug:
        story.event(1, "RUN_STARTED")  # not content either
    call = story.llm_start(2, story.request)
    for i in range(1, 4):
        story.heartbeat(2 + i * 250, call, i * 250)
    story.aborted(1000, "rst", cause="client_disconnect", size=8)
    story.llm_response(1001, call, 999, tokens=None, outcome="err", error_class="CancelledError")
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    if not debug:
        assert "keep-alive comment" in verdict.reason


def test_a_late_keepalive_is_not_a_late_first_token() -> None:
    story = Story("ping-slow")
    story.ingress()
    story.first_byte(1500, keepalive=True)
    call = story.llm_start(2, story.request)
    story.llm_response(40, call, 38, first_token=10)
    story.complete(1600)
    assert _classify(story, timeout=1.0).flap_class == "healthy"


def _streaming(story: Story, chunks_until: float, *, beats: int = 4) -> str:
    """A call streaming from +12 ms, its chunks coming until ``chunks_until`` ms after its
    start; heartbeats every 250 ms say how long the stream had waited on the provider then."""
    call = story.llm_start(2, story.request)
    story.first_byte(12)
    for i in range(1, beats + 1):
        elapsed = i * 250
        wait = elapsed - chunks_until if elapsed > chunks_until else None  # None: a chunk held
        story.heartbeat(2 + elapsed, call, elapsed, first_token=10, chunk_wait=wait)
    return call


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "verbose"])
def test_a_stream_gone_silent_mid_way_is_a_stalled_call(debug: bool) -> None:
    """Three tokens, then the provider said nothing; the client gave up after a second."""
    story = Story("stall-mid")
    story.ingress()
    call = _streaming(story, chunks_until=30)
    if debug:
        story.event(12, "TEXT_MESSAGE_CONTENT")
    story.aborted(1120, "rst", cause="client_disconnect", size=174)
    story.llm_response(1121, call, 1119, tokens=None, outcome="err", error_class="CancelledError")
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "then waited 970ms for the next chunk" in verdict.reason
    assert "stalled mid-way" in verdict.reason


@pytest.mark.parametrize("chunks_until", [995, None], ids=["chunks-to-the-end", "no-chunk-times"])
def test_a_stream_still_flowing_when_the_client_left_is_a_client_abort(
    chunks_until: float | None,
) -> None:
    story = Story("flowing")
    story.ingress()
    if chunks_until is None:  # an older writer, or a hand-written call: no chunk_wait_ms
        call = story.llm_start(2, story.request)
        story.first_byte(12)
        for i in range(1, 5):
            story.heartbeat(2 + i * 250, call, i * 250, first_token=10)
    else:
        call = _streaming(story, chunks_until=chunks_until)
    story.aborted(1010, "rst", cause="client_disconnect", size=900)
    story.llm_response(1011, call, 1009, tokens=None, outcome="err", error_class="CancelledError")
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "was streaming" in verdict.reason
    assert "went on" not in verdict.reason  # the call ended with its request


def test_a_call_that_went_on_after_the_client_left_is_said_to_have_kept_generating() -> None:
    """LangGraph read its stream on after the client left: the call answered ok 2.4 s after the
    abort, with its tokens (``after_request_end_ms``). The client's leaving is still the cause,
    and the reason says the model kept generating, and billing, after it."""
    story = Story("went-on")
    story.ingress()
    call = _streaming(story, chunks_until=995)
    story.aborted(1010, "rst", cause="client_disconnect", size=900)
    story.llm_response(3420, call, 3418, tokens=120, first_token=10, after_request_end=2410)
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "went on 2410ms after the client left (ok, 120 tokens)" in verdict.reason
    assert "the model kept generating" in verdict.reason
    assert verdict.evidence["calls_after_client_left"] == 1
    assert verdict.evidence["envelopes"][-1]["boundary"] == "backend.llm.call.response"


def test_a_client_left_with_no_byte_after_the_call_answered_is_a_busy_backend() -> None:
    """The LLM answered with a tool call; the tool hung; nothing was sent; the client left."""
    story = Story("tool-hang")
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    story.llm_response(8, call, 6)
    story.aborted(1008, "rst", cause="client_disconnect", size=0)
    story.agent_exit(1009, 1, agent, "cancelled")
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "no byte reached the client in the 1000ms after it" in verdict.reason


@pytest.mark.parametrize("case", ["bytes-sent", "no-call", "default-tier"])
def test_a_client_leaving_is_still_its_own_where_the_backend_was_not_seen_busy(case: str) -> None:
    story = Story("left")
    if case != "default-tier":
        story.ingress()
    if case == "bytes-sent":  # at the default tier there are no calls and no first byte
        call = story.llm_start(2, story.request)
        story.llm_response(8, call, 6)
    if case == "bytes-sent":
        story.first_byte(9)
    story.aborted(1008, "rst", cause="client_disconnect", size=40 if case == "bytes-sent" else 0)
    assert _classify(story).flap_class == "client-abort"


# --- what a provider reports inside a 200 body ------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"error": {"message": "boom", "type": "server_error", "code": None}}, "ServerError"),
        ({"error": {"type": "requests", "code": "rate_limit_exceeded"}}, "RateLimitExceeded"),
        (
            {"type": "error", "error": {"type": "overloaded_error", "message": "x"}},
            "OverloadedError",
        ),
        ({"type": "error", "code": "invalid_prompt", "message": "x"}, "InvalidPrompt"),
        (
            {"type": "response.failed", "response": {"error": {"code": "server_error"}}},
            "ServerError",
        ),
        ({"type": "response.failed", "response": {"error": None}}, "ProviderError"),
        ({"error": {"message": "no code"}}, "ProviderError"),
        # Not errors: a Responses object's ``"error": null``, content that says "error".
        ({"type": "response.completed", "response": {"error": None}}, None),
        ({"choices": [{"delta": {"content": "error"}}]}, None),
        ({"error": None}, None),
    ],
)
def test_a_provider_error_in_the_body_is_named(
    body: dict[str, object], expected: str | None
) -> None:
    assert reported_error(body) == expected
    facts = ResponseFacts()
    facts.absorb(body)
    assert facts.error == expected


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.sampled_from(["type", "error", "code", "response", "x"]), _JSON))
def test_any_body_gives_a_short_exception_like_name_or_none(body: dict[str, object]) -> None:
    name = reported_error(body)
    assert name is None or (0 < len(name) <= 64 and name.isalnum())


# --- a WebSocket client found gone only at the app's next send ---------------------------------


def _asked_over_websocket(abort_at: float, cause: str) -> Story:
    """Turn 2 of a WebSocket chat: the call kept the backend waiting a second (heartbeats every
    250 ms) and answered at +1010 ms; the app's send found the client gone at ``abort_at``."""
    story = Story("ws-gone")
    story.ingress()
    story.first_byte(1)  # turn 1's answer
    call = story.llm_start(2, story.request)
    for i in range(1, 5):
        story.heartbeat(2 + i * 250, call, i * 250)
    story.llm_response(1010, call, 1008)
    story.aborted(abort_at, "rst", cause=cause, size=36)
    return story


def test_a_client_found_gone_at_the_send_after_a_wait_is_a_stall() -> None:
    verdict = _classify(_asked_over_websocket(1012, "send_failed"))
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "kept the backend waiting 1000ms (4 heartbeats)" in verdict.reason
    assert "found gone at the next send" in verdict.reason


@pytest.mark.parametrize(
    ("abort_at", "cause"),
    [(5000, "send_failed"), (1012, "client_disconnect")],
    ids=["sent-long-after", "seen-leaving"],
)
def test_a_client_seen_leaving_or_found_gone_much_later_is_a_client_abort(
    abort_at: float, cause: str
) -> None:
    verdict = _classify(_asked_over_websocket(abort_at, cause))
    assert verdict.flap_class == "client-abort", verdict.reason


# --- calls side by side, background calls, tool loops (the second blind run) ---------------------


def test_a_failure_beside_a_call_whose_answer_was_used_is_healthy() -> None:
    """Two calls at once: the ok one finished first, the 500 later; the app answered 200."""
    story = Story("side-by-side")
    story.ingress()
    used = story.llm_start(1, story.request)
    failed = story.llm_start(2, story.request)
    story.llm_response(7, used, 6)
    story.llm_response(311, failed, 309, tokens=None, outcome="err", error_class="HTTP500")
    story.first_byte(312)
    story.complete(313)
    verdict = _classify(story)
    assert verdict.flap_class == "healthy", verdict.reason
    assert "HTTP500 on the way" in verdict.reason


def test_a_call_of_a_background_task_after_the_response_is_not_its_cause() -> None:
    story = Story("background")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(5, call, 4)
    story.first_byte(6)
    story.complete(8.6)
    later = story.llm_start(10.4, story.request)
    story.llm_response(14, later, 3.6, tokens=None, outcome="err", error_class="HTTP500")
    verdict = _classify(story)
    assert verdict.flap_class == "healthy", verdict.reason
    assert "begun after the response ended HTTP500" in verdict.reason


def test_an_answer_going_out_is_no_sign_of_the_call_still_waiting_beside_it() -> None:
    story = Story("answer-then-hang")
    story.ingress()
    quick = story.llm_start(1, story.request)
    slow = story.llm_start(2, story.request)
    story.llm_response(15, quick, 14)
    story.first_byte(16)
    story.event(16, "TEXT_MESSAGE_CONTENT")
    for i in range(1, 5):
        story.heartbeat(2 + i * 250, slow, i * 250)
    story.aborted(1100, "rst", cause="client_disconnect", size=60)
    story.llm_response(1101, slow, 1099, tokens=None, outcome="err", error_class="CancelledError")
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "streaming" not in verdict.reason


def _tool_loop(last_tokens: int, *, side_by_side: bool = False) -> Story:
    story = Story("loop")
    story.ingress()
    for i in range(2):
        call = story.llm_start(1 + i * 20, story.request)
        story.llm_response(10 + i * 20, call, 9, tokens=3)
    if side_by_side:  # a call with tokens answers after the empty one began
        other = story.llm_start(41, story.request)
    last = story.llm_start(42, story.request)
    story.llm_response(50, last, 8, tokens=last_tokens)
    if side_by_side:
        story.llm_response(55, other, 14, tokens=9)
    story.complete(60, events=0)
    return story


def test_a_tool_loop_whose_last_answer_is_empty_is_provider_empty() -> None:
    verdict = _classify(_tool_loop(0))
    assert verdict.flap_class == "provider-empty", verdict.reason
    assert "answered ok with 0 tokens" in verdict.reason


@pytest.mark.parametrize(("tokens", "side_by_side"), [(4, False), (0, True)])
def test_a_last_answer_with_tokens_or_beside_one_is_not_empty(
    tokens: int, side_by_side: bool
) -> None:
    assert _classify(_tool_loop(tokens, side_by_side=side_by_side)).flap_class == "healthy"


def test_a_caught_timeout_at_the_default_tier_says_a_stall_could_not_be_checked() -> None:
    story = Story("default-timeout")
    story.error(2000, exception_type="APITimeoutError")
    story.aborted(2001, "timeout", cause="timeout", size=0)
    verdict = _classify(story)
    assert verdict.flap_class == "backend-error", verdict.reason
    assert "stalled-backend" in verdict.unchecked
    assert verdict.caveat is not None
    assert "timeout may be an LLM call's" in verdict.caveat


def test_counts_read_right_for_one_call() -> None:
    story = Story("one-failed")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(5, call, 4, tokens=None, outcome="err", error_class="HTTP503")
    story.complete(6, status=502, outcome="err", events=0)
    assert "its one LLM call failed" in _classify(story).reason
    story = Story("one-of-two")
    story.ingress()
    done = story.llm_start(1, story.request)
    story.llm_response(5, done, 4, first_token=2)
    story.first_byte(3)
    streaming = story.llm_start(6, story.request)
    story.heartbeat(9, streaming, 3, first_token=2)
    story.aborted(10, "rst", cause="client_disconnect")
    story.llm_response(11, streaming, 5, tokens=None, outcome="err", error_class="CancelledError")
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "1 of 2 LLM calls had answered" in verdict.reason


def test_a_call_that_failed_before_reaching_the_provider_is_not_called_refused() -> None:
    """A client bound to a closed event loop: RuntimeError, no HTTP status, no answer."""
    story = Story("dead-loop")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(1, call, 0, tokens=None, outcome="err", error_class="RuntimeError")
    story.first_byte(2)
    story.event(2, "RUN_ERROR")
    story.complete(3, events=1)
    verdict = _classify(story)
    assert verdict.flap_class == "backend-error", verdict.reason
    assert "failed in the backend with RuntimeError" in verdict.reason
    assert "refused" not in verdict.reason


def test_the_sdks_retries_left_waiting_are_counted() -> None:
    story = Story("retries-cut")
    story.ingress()
    for i in range(3):
        call = story.llm_start(1 + i * 600, story.request)
        story.heartbeat(251 + i * 600, call, 250)
        story.llm_response(
            501 + i * 600, call, 500, tokens=None, outcome="timeout", error_class="ReadTimeout"
        )
    story.complete(1900, status=504, outcome="err", events=0)
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "(2 more LLM calls waited likewise)" in verdict.reason


def test_a_stream_gone_silent_stays_a_stall_however_long_the_call_beats_on() -> None:
    """LangGraph keeps the graph (and its silent stream) running after the client left: the
    beats written after the abort must not hide where the stream stood when it came."""
    story = Story("stall-mid-beats-on")
    story.ingress()
    call = story.llm_start(2, story.request)
    story.first_byte(12)
    for i in range(1, 41):
        elapsed = i * 100
        story.heartbeat(2 + elapsed, call, elapsed, first_token=4, chunk_wait=elapsed - 8)
        if i == 15:
            story.aborted(2 + elapsed + 14, "rst", cause="client_disconnect", size=9048)
    story.llm_response(4100, call, 4098, tokens=None, outcome="err", error_class="CancelledError")
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "then waited 1492ms for the next chunk" in verdict.reason


def test_a_default_tier_log_counts_offsets_from_the_requests_start() -> None:
    """Without an ingress the terminal is the first envelope: its ``duration_ms`` says when the
    request began, so a client that left after a second is not said to have left at +0 ms."""
    story = Story("default-abort")
    story.aborted(0, "rst", cause="client_disconnect", size=0)
    story.envelopes[-1]["duration_ms"] = 1007
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "at +1007 ms" in verdict.reason


def _agui_tool_hang(left_after: float) -> Story:
    """AG-UI at the debug tier: RUN_STARTED, a call that waited a beat and asked for a tool
    (TOOL_CALL_* sent), then the tool ran; the client left ``left_after`` ms after the last
    event."""
    story = Story("agui-tool")
    story.ingress()
    story.first_byte(1)
    story.event(1, "RUN_STARTED")
    call = story.llm_start(2, story.request)
    story.heartbeat(252, call, 250)
    story.llm_response(300, call, 298)
    story.event(301, "TOOL_CALL_START", 1)
    story.event(302, "TOOL_CALL_END", 2)
    story.aborted(302 + left_after, "rst", cause="client_disconnect", size=200)
    return story


def test_a_tool_that_hangs_after_the_stream_began_is_a_busy_backend_at_the_debug_tier() -> None:
    verdict = _classify(_agui_tool_hang(1000))
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert "the stream sent nothing in the 1000ms after it" in verdict.reason


def test_a_client_leaving_right_after_an_event_is_still_its_own() -> None:
    """Less than a heartbeat interval of quiet: nothing shows the backend kept it waiting."""
    assert _classify(_agui_tool_hang(40)).flap_class == "client-abort"


@pytest.mark.parametrize(
    ("left_after", "expected"), [(2000, "stalled-backend"), (30, "client-abort")]
)
def test_without_heartbeats_quiet_longer_than_the_run_so_far_is_a_busy_backend(
    left_after: float, expected: str
) -> None:
    """The call answered in 15 ms (no beat to learn the interval from); the stream ran 60 ms,
    then a tool ran: two seconds of quiet is no pause between events."""
    story = Story("quick-call-tool")
    story.ingress()
    story.first_byte(27)
    story.event(27, "RUN_STARTED")
    call = story.llm_start(35, story.request)
    story.llm_response(50, call, 15, first_token=4)
    story.event(60, "TOOL_CALL_END", 1)
    story.aborted(60 + left_after, "rst", cause="client_disconnect", size=900)
    assert _classify(story).flap_class == expected


def test_a_call_begun_just_before_the_client_left_kept_nobody_waiting() -> None:
    """A proxy turned the client away 14 ms in; the call had begun 11 ms before."""
    story = Story("proxy-reject")
    story.ingress()
    call = story.llm_start(3, story.request)
    story.aborted(14, "rst", cause="client_disconnect", size=0)
    story.llm_response(15, call, 12, tokens=None, outcome="err", error_class="CancelledError")
    verdict = _classify(story)
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "had begun only 11ms before, unanswered" in verdict.reason


@pytest.mark.parametrize("cause", ["exception", "waiting call"])
def test_a_proxy_in_the_path_does_not_hide_the_backends_own_failure(cause: str) -> None:
    story = Story("via-and-failure")
    story.ingress(edge={"via": "1.1 varnish (Varnish/7.1)"})
    if cause == "exception":
        story.error(5, exception_type="RuntimeError")
        story.complete(6, status=500, outcome="err", events=0)
        expected = "backend-error"
    else:
        call = story.llm_start(2, story.request)
        story.heartbeat(1002, call, 1000)
        story.aborted(1500, "rst", cause="client_disconnect", size=0)
        story.llm_response(
            1501, call, 1499, tokens=None, outcome="err", error_class="CancelledError"
        )
        expected = "stalled-backend"
    assert _classify(story).flap_class == expected


def test_replay_says_a_beat_of_a_streaming_call_is_streaming() -> None:
    from cvdiag.diagnosis.describe import describe

    story = Story("beats")
    call = story.llm_start(1, None)
    story.heartbeat(251, call, 250)
    story.heartbeat(501, call, 500, first_token=55, chunk_wait=42)
    waiting, streaming = (describe(e) for e in story.envelopes[1:])
    assert waiting == "still waiting after 250ms"
    assert (
        streaming == "streaming after 500ms (first token at 55ms), waiting 42ms for the next chunk"
    )


# --- silence before an LLM call (issue 25) ----------------------------------------------------


def _quiet_then_call(quiet: float, *, sent: str | None = None) -> Story:
    """The backend sends nothing for ``quiet`` ms (a framework's own work), then begins a call
    that hangs; the client gives up 200 ms into the call. ``sent``: what reached the client at
    once, before the silence (``"byte"`` at the verbose tier, ``"event"`` at the debug tier)."""
    story = Story(f"quiet-{quiet:g}-{sent}")
    story.ingress()
    if sent is not None:
        story.first_byte(1)
    if sent == "event":
        story.event(1, "RUN_STARTED")
    call = story.llm_start(quiet, story.request)
    story.aborted(quiet + 200, "rst", cause="client_disconnect", size=0 if sent is None else 40)
    story.llm_response(
        quiet + 201, call, 201, tokens=None, outcome="err", error_class="CancelledError"
    )
    return story


@pytest.mark.parametrize(
    ("sent", "quiet"), [(None, 900), ("event", 899)], ids=["nothing-sent", "event-then-quiet"]
)
def test_silence_before_a_call_counts_as_keeping_the_client_waiting(
    sent: str | None, quiet: int
) -> None:
    """Google ADK's shape: 0.9 s of nothing before the call, the call hangs 0.2 s, the client
    gives up after 1.1 s of nothing. The backend kept it waiting: not the client's own doing."""
    verdict = _classify(_quiet_then_call(900, sent=sent))
    assert verdict.flap_class == "stalled-backend", verdict.reason
    assert f"the client had got nothing for {quiet}ms already" in verdict.reason
    assert verdict.evidence["quiet_before_call_ms"] == quiet


def test_a_short_silence_before_a_brief_call_is_still_the_clients_own() -> None:
    verdict = _classify(_quiet_then_call(100))
    assert verdict.flap_class == "client-abort", verdict.reason
    assert "had begun only 200ms before, unanswered" in verdict.reason


def test_bytes_the_log_does_not_time_leave_the_call_start_as_the_measure() -> None:
    """At the verbose tier a first byte before the call may have been followed by more the log
    does not show: when the client last got something is unknown, so the call's start counts."""
    verdict = _classify(_quiet_then_call(900, sent="byte"))
    assert verdict.flap_class == "client-abort", verdict.reason


# --- envelopes the log says were dropped (issue 25) -------------------------------------------


def _drop_report(story: Story, at: float, count: int) -> str:
    """A ``cvdiag.queue_dropped`` line as the emitter writes it: a test id of its own."""
    other = Story(f"accounting-{at:g}", start_ms=story.start_ms)
    other.emit("cvdiag.queue_dropped", at, metadata={"dropped_count": count})
    [line] = other.lines()
    return line


def _classify_file(
    path: Path, test_id: str, capfd: pytest.CaptureFixture[str]
) -> dict[str, object]:
    from cvdiag import cli

    assert cli.main(["classify", test_id, str(path), "--json"]) == 0
    verdict: dict[str, object] = json.loads(capfd.readouterr().out)
    return verdict


@pytest.mark.parametrize(("at", "counted"), [(500, 7), (5000, 7), (-500, 3)])
def test_classify_says_when_the_log_reports_dropped_envelopes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], at: float, counted: int
) -> None:
    """A report written while the story ran, or the first after it, may count its envelopes
    (7 dropped); one written before it began cannot, nor one after that first (3 dropped, at
    +10 s). The class stays what the envelopes show."""
    story = Story("dropped")
    story.start_ms = 1000.0
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(20, call, 19)
    story.first_byte(21)
    story.complete(30)
    reports = [_drop_report(story, at, 7), _drop_report(story, at + 10_000, 3)]
    log = tmp_path / "backend.log"
    lines = sorted([*story.lines(), *reports], key=lambda x: str(json.loads(x[7:])["ts"]))
    log.write_text("\n".join(lines) + "\n")
    verdict = _classify_file(log, story.test_id, capfd)
    assert verdict["flap_class"] == "healthy", verdict["reason"]
    evidence = verdict["evidence"]
    assert isinstance(evidence, dict)
    said = f"the log reports {counted} envelopes dropped (cvdiag.queue_dropped)"
    assert said in str(verdict["reason"])
    assert evidence["dropped_envelopes"] == counted
    assert [e["boundary"] for e in evidence["envelopes"]].count("cvdiag.queue_dropped") == 1


def test_classify_says_nothing_of_drops_where_the_log_reports_none(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    story = Story("not-dropped")
    story.ingress()
    story.complete(30)
    log = tmp_path / "backend.log"
    log.write_text("\n".join([*story.lines(), _drop_report(story, -100, 2)]) + "\n")
    verdict = _classify_file(log, story.test_id, capfd)
    assert "dropped" not in str(verdict["reason"])
    assert "dropped_envelopes" not in verdict["evidence"]  # type: ignore[operator]


def test_ls_warns_when_the_log_reports_dropped_envelopes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from cvdiag import cli

    story = Story("listed")
    story.ingress()
    story.complete(30)
    log = tmp_path / "backend.log"
    log.write_text("\n".join([*story.lines(), _drop_report(story, 40, 5)]) + "\n")
    assert cli.main(["ls", str(log), "--json"]) == 0
    captured = capfd.readouterr()
    assert [row["test_id"] for row in json.loads(captured.out)] == ["listed"]
    assert "5 envelope(s) dropped (cvdiag.queue_dropped)" in captured.err


# --- why an empty answer stopped (issue 25) ---------------------------------------------------


@pytest.mark.parametrize(
    ("reasons", "said"),
    [
        (["content_filter"], "(finish reason content_filter: a content filter stopped the answer)"),
        (["SAFETY"], "(finish reason SAFETY: a content filter stopped the answer)"),
        (["length"], "(finish reason length: its length limit stopped the answer)"),
        (["max_tokens"], "(finish reason max_tokens: its length limit stopped the answer)"),
        (["stop"], None),
    ],
)
def test_provider_empty_names_a_content_filter_or_a_length_cut(
    reasons: list[str], said: str | None
) -> None:
    story = _tool_loop(0)
    [last] = [e for e in story.envelopes if e["boundary"] == "backend.llm.call.response"][-1:]
    last["metadata"]["finish_reasons"] = reasons
    verdict = _classify(story)
    assert verdict.flap_class == "provider-empty", verdict.reason
    if said is None:
        assert "finish reason" not in verdict.reason
    else:
        assert said in verdict.reason
    assert verdict.evidence["llm_call"]["finish_reasons"] == reasons


# --- a story incomplete because of a reported drop (issue 34) ---------------------------------


def _incomplete_story(lacks: str) -> Story:
    story = Story(f"lacks-{lacks}")
    story.start_ms = 1000.0
    if lacks != "ingress":
        story.ingress()
    if lacks != "first-byte":
        story.first_byte(2)
    story.events(3, 1 if lacks == "events" else 3)
    if lacks != "terminal":
        story.complete(30, events=3)
    return story


@pytest.mark.parametrize("lacks", ["terminal", "ingress", "first-byte", "events"])
@pytest.mark.parametrize("dropped", [True, False])
def test_a_story_lacking_envelopes_a_drop_explains_is_incomplete(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], lacks: str, dropped: bool
) -> None:
    """Never healthy, never a cause that rests on what is absent; without a drop the log
    reports, what is absent was never written, and the rules decide as before."""
    story = _incomplete_story(lacks)
    lines = [*story.lines(), *([_drop_report(story, 20, 4)] if dropped else [])]
    log = tmp_path / "backend.log"
    log.write_text("\n".join(sorted(lines, key=lambda x: str(json.loads(x[7:])["ts"]))) + "\n")
    verdict = _classify_file(log, story.test_id, capfd)
    if dropped:
        assert verdict["flap_class"] == "incomplete", verdict["reason"]
        assert "the story is incomplete" in str(verdict["reason"])
    else:
        assert verdict["flap_class"] != "incomplete"
