"""Causes that need the client's layer (issue 45): each planted with hand-written backend and
probe lines, the probe's clock skewed from the backend's, its lines in the backend's log and in
a file of their own; each control is healthy; a backend-only log is told what it was."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cvdiag.diagnosis import classify
from cvdiag.layers import aligned
from tests.layers.records import by_time, records_of
from tests.support.probes import Probe
from tests.support.stories import Story, _happy

SKEW = 3_250.0  # the probe's clock is behind the backend's by this much
LAYOUTS = ("one log", "two files")
Planted = tuple[Story, Probe | None]


def _verdict(story: Story, probe: Probe | None, layout: str = "two files") -> classify.Verdict:
    writers: list[tuple[str, Story | Probe]] = [("backend.log", story)]
    if probe is not None:
        writers.append(("backend.log" if layout == "one log" else "probe.log", probe))
    records = aligned(by_time(records_of(*writers)))
    return classify.classify(classify.gather(story.test_id, records))


def slow_llm(*, answers: bool = True) -> Planted:
    """A JSON POST whose LLM call takes 4.1 s, against the client's 2 s timeout."""
    story = Story("t-slow-llm")
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    if answers:
        story.llm_response(4102, call, 4100)
        story.aborted(4123, "rst", cause="left_before_response", size=56)
    else:
        story.aborted(9000, "rst", cause="left_before_response", size=0)
        story.llm_response(
            9001, call, 8999, tokens=None, outcome="err", error_class="CancelledError"
        )
    story.agent_exit(9002 if not answers else 4124, 1, agent, "cancelled")
    probe = Probe("t-slow-llm", skew_ms=SKEW)
    probe.start(-5)
    index = probe.send(-1, timeout=2000)
    probe.error(1999, index, timeout=2000)
    probe.exit(2010, passed=False)
    return story, probe


def held_stream(*, held: bool = True) -> Planted:
    """The backend sends 8 events 100 ms apart and completes; a buffering proxy holds them."""
    story = Story("t-held")
    story.ingress(edge={"via": "1.1 nginx"})
    story.first_byte(10)
    story.events(10, 8, step=100)
    story.complete(800, events=8)
    probe = Probe("t-held", skew_ms=-SKEW)
    probe.start(-5)
    index = probe.send(-1)
    probe.head(4, index, sent=-1)
    first = 802 if held else 12
    for i in range(8):
        probe.event(first + (i if held else i * 100), index, i)
    probe.exit(830, passed=True, events=8)
    return story, probe


def left_early(*, probe_lines: bool = True) -> Planted:
    story = Story("t-left")
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    story.llm_response(22, call, 20)
    story.first_byte(23)
    story.events(23, 2)
    story.aborted(30)
    story.agent_exit(31, 1, agent, "cancelled")
    if not probe_lines:
        return story, None
    probe = Probe("t-left", skew_ms=SKEW)
    probe.start(-5)
    index = probe.send(-1)
    probe.head(3, index, sent=-1)
    probe.event(24, index)
    probe.aborted(29, index, cause="left-early", size=120)
    probe.exit(35, passed=True, events=1)
    return story, probe


def runner_crash(*, exits: bool = False) -> Planted:
    story = Story("t-crash")
    story.ingress()
    story.first_byte(5)
    story.aborted(60, "rst", cause="client_disconnect")
    probe = Probe("t-crash", skew_ms=SKEW)
    probe.start(-5)
    index = probe.send(-1)
    probe.head(6, index, sent=-1)
    if exits:
        probe.aborted(59, index, cause="network-error")
        probe.exit(61, passed=False)
    return story, probe


def page(kind: str) -> Planted:
    """A browser test over a healthy backend: the page's first token, a console error, or
    other content in its place."""
    story = _happy(Story(f"t-page-{kind}"))
    probe = Probe(f"t-page-{kind}", skew_ms=-SKEW, runner="playwright")
    probe.start(-50, url="http://127.0.0.1:3000/")
    index = probe.send(-1)
    probe.head(2, index, sent=-1)
    probe.event(24, index)
    if kind == "healthy":
        probe.first_token(40)
    elif kind == "hydration":
        probe.console_error(30, "TypeError: Cannot read properties of undefined (reading 'map')")
    else:
        probe.alternate(40)
    probe.exit(500, passed=kind == "healthy", events=3)
    return story, probe


def favicon(*, chat: bool = True) -> Planted:
    story = Story("t-icon")
    if chat:
        _happy(story)
    story.request = story.emit(
        "backend.request.ingress",
        40,
        metadata={"method": "GET", "path": "/favicon.ico", "content_length": None},
    )
    story.complete(45, status=404, events=0)
    return story, None


CAUSES: dict[str, tuple[Callable[[], Planted], str, str]] = {
    "slow LLM, answered later": (slow_llm, "slow-first-token", "the client's timeout was shorter"),
    "slow LLM, never answered": (
        lambda: slow_llm(answers=False),
        "stalled-backend",
        "both sides agree",
    ),
    "held stream": (held_stream, "edge-interference", "held between the backend and the client"),
    "left early": (left_early, "healthy", "closed its stream on purpose"),
    "runner crash": (runner_crash, "probe-runner-crash", "never wrote its exit"),
    "hydration": (lambda: page("hydration"), "frontend-hydration", "console error"),
    "strict harness": (lambda: page("strict"), "strict-harness", "other content"),
}
CONTROLS: dict[str, Callable[[], Planted]] = {
    "stream not held": lambda: held_stream(held=False),
    "page showed its token": lambda: page("healthy"),
    "favicon beside the chat": favicon,
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", list(CAUSES))
def test_each_cause_is_named_with_both_sides(name: str, layout: str) -> None:
    plant, wanted, words = CAUSES[name]
    story, probe = plant()
    verdict = _verdict(story, probe, layout)
    assert verdict.flap_class == wanted, verdict.reason
    assert words in verdict.reason
    assert verdict.layers == ["backend", "probe"]
    assert verdict.joined is not None
    assert verdict.joined.startswith("aligned ")
    assert verdict.deciding


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", list(CONTROLS))
def test_each_control_is_healthy(name: str, layout: str) -> None:
    story, probe = CONTROLS[name]()
    verdict = _verdict(story, probe, layout)
    assert verdict.flap_class == "healthy", verdict.reason


def test_the_slow_call_names_the_call_the_wait_and_how_long_the_call_took() -> None:
    verdict = _verdict(*slow_llm())
    assert "POST /chat at +2000 ms (its own 2 s timeout)" in verdict.reason
    assert "answered at +4102 ms, 4100ms after it began" in verdict.reason
    assert verdict.evidence["client_timeout_ms"] == 2000
    assert verdict.evidence["call_took_ms"] == 4100


def test_the_held_stream_gives_both_sides_times() -> None:
    verdict = _verdict(*held_stream())
    assert "first byte at +10 ms" in verdict.reason
    assert "client's first event came at +80" in verdict.reason
    assert verdict.evidence["backend_first_byte_ms"] == pytest.approx(10, abs=3)
    assert verdict.evidence["client_first_event_ms"] == pytest.approx(802, abs=3)


def test_backend_only_the_slow_call_is_client_abort_that_says_a_probe_would_settle_it() -> None:
    story, _ = slow_llm()
    verdict = _verdict(story, None)
    assert verdict.flap_class == "client-abort"
    assert verdict.layers == ["backend"]
    assert verdict.joined is None
    assert "when is unknown" in verdict.reason
    # no contradiction: what the call had done is said of when the client was found gone
    assert "; its LLM call had answered" not in verdict.reason
    assert "by then (not necessarily when it left) its LLM call had answered" in verdict.reason
    assert "the probe's lines (or the runner's JUnit) would say when" in verdict.reason


@pytest.mark.parametrize(
    ("plant", "wanted"),
    [
        (lambda: held_stream(), "healthy"),
        (lambda: left_early(probe_lines=False), "client-abort"),
        (lambda: page("hydration"), "healthy"),
    ],
)
def test_backend_only_is_told_what_it_was(plant: Callable[[], Planted], wanted: str) -> None:
    story, _ = plant()
    assert _verdict(story, None).flap_class == wanted


def test_a_browsers_own_request_is_not_the_tests() -> None:
    """A 404 on /favicon.ico made the test id ``unclassified``; alone, it is no failure."""
    story, _ = favicon(chat=False)
    verdict = _verdict(story, None)
    assert verdict.flap_class == "healthy", verdict.reason
    assert "browser's own" in verdict.reason


def test_the_probe_says_when_the_client_left_the_abort() -> None:
    """A client-abort read with the probe's lines says when it left, not "unknown"."""
    story = Story("t-gone")
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    story.llm_response(200, call, 198)
    story.aborted(4000, "rst", cause="left_before_response", size=56)
    probe = Probe("t-gone", skew_ms=SKEW)
    index = probe.send(-1)
    probe.error(3000, index, error_class="ConnectError", cause="network-error")
    probe.exit(3010, passed=False)
    verdict = _verdict(story, probe)
    assert verdict.flap_class == "client-abort"
    assert "its own side says it left at +3001 ms" in verdict.reason  # the send took 1 ms
    assert "when is unknown" not in verdict.reason
