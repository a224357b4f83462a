"""Causes that need the client's layer (issue 45): each planted with hand-written backend and
probe lines, the probe's clock skewed from the backend's, its lines in the backend's log and in
a file of their own; each control is healthy; a backend-only log is told what it was."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cvdiag.diagnosis import classify
from cvdiag.layers import aligned
from tests.support.client_stories import (
    SKEW,
    Planted,
    favicon,
    held_stream,
    left_early,
    page,
    runner_crash,
    slow_llm,
)
from tests.support.probes import Probe
from tests.support.records import by_time, records_of
from tests.support.stories import Story

LAYOUTS = ("one log", "two files")


def _verdict(story: Story, probe: Probe | None, layout: str = "two files") -> classify.Verdict:
    writers: list[tuple[str, Story | Probe]] = [("backend.log", story)]
    if probe is not None:
        writers.append(("backend.log" if layout == "one log" else "probe.log", probe))
    records = aligned(by_time(records_of(*writers)))
    return classify.classify(classify.gather(story.test_id, records))


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
    assert "the probe's lines (or the runner's JUnit) would say when and why" in verdict.reason


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


def test_the_runners_words_are_the_clients_view_without_probe_lines() -> None:
    """A JUnit text that says the client timed out after 2 s: the slow call is named, and the
    reason says how precise the runner's words are."""
    story, _ = slow_llm()
    facts = classify.gather(story.test_id, by_time(records_of(("backend.log", story))))
    facts.join.runner_said(2000.0, "Timeout 2000ms exceeded")
    verdict = classify.classify(facts)
    assert verdict.flap_class == "slow-first-token", verdict.reason
    assert verdict.layers == ["backend", "junit"]
    assert "the runner's JUnit says the client timed out after 2000 ms" in verdict.reason
    assert "known to the network's latency" in verdict.reason


def test_the_probes_lines_outrank_the_runners_words() -> None:
    story, probe = slow_llm()
    assert probe is not None
    records = by_time(records_of(("backend.log", story), ("probe.log", probe)))
    facts = classify.gather(story.test_id, aligned(records))
    facts.join.runner_said(30_000.0, "Timeout 30000ms exceeded")
    verdict = classify.classify(facts)
    assert verdict.layers == ["backend", "probe"]
    assert "+2000 ms (its own 2 s timeout)" in verdict.reason
