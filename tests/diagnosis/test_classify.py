"""Classes, their order and evidence; the replay tree; the stats figures. In-process, on
hand-written stories (the subprocess tests on real logs are in tests/cli/test_real.py)."""

from __future__ import annotations

import io
import random
from collections.abc import Iterable

import pytest

from cvdiag.diagnosis import classify, timeline
from cvdiag.logs.reading import Input, Record, records
from cvdiag.stats import figures as stats
from tests.support.stories import (
    STORIES,
    Story,
    backend_error,
    client_abort,
    healthy,
    provider_empty,
    slow_first_token,
    stalled,
)


def _records(*stories: Story) -> list[Record]:
    lines = [line for story in stories for line in story.lines()]
    data = ("\n".join(lines) + "\n").encode()
    return list(records(Input("log", io.BytesIO(data)), print))


def _classify(story: Story, timeout: float = 60.0) -> classify.Verdict:
    facts = classify.gather(story.test_id, _records(story))
    return classify.classify(facts, first_token_timeout=timeout)


@pytest.mark.parametrize("name", list(STORIES))
def test_each_story_gets_its_class(name: str) -> None:
    verdict = _classify(STORIES[name]())
    assert verdict.flap_class == name, verdict.reason
    assert verdict.reason
    data = verdict.to_json()
    assert set(data) == {
        "test_id",
        "flap_class",
        "reason",
        "log_tier",
        "unchecked",
        "caveat",
        "layers",
        "joined",
        "deciding",
        "evidence",
    }
    assert data["layers"] == ["backend"]
    assert data["joined"] is None
    if name != "unclassified":
        assert data["evidence"]["envelopes"], "a class rests on envelopes"
        assert all(e["source"].startswith("log:") for e in data["evidence"]["envelopes"])


def test_edge_interference_beats_a_backend_error() -> None:
    story = backend_error("both")
    story.envelopes[0]["edge_headers"]["cf-mitigated"] = "challenge"
    verdict = _classify(story)
    assert verdict.flap_class == "edge-interference"
    assert verdict.evidence["cf_mitigated"] == "challenge"


@pytest.mark.parametrize(
    ("edge", "status", "expected"),
    [
        ({"retry-after": "30"}, 503, "edge-interference"),
        ({"retry-after": "30"}, 200, "healthy"),
        ({"via": "1.1 varnish (Varnish/7.1)"}, 200, "healthy"),  # a proxy is context
        ({"via": "1.1 nginx-proxy"}, 200, "healthy"),
        ({"via": "1.1 google"}, 200, "healthy"),
        ({"cf-mitigated": "block"}, 200, "edge-interference"),
        ({"cf-mitigated": "none"}, 200, "healthy"),
    ],
)
def test_edge_signs(edge: dict[str, str], status: int, expected: str) -> None:
    story = Story("edge")
    story.ingress()
    story.complete(5, status=status, outcome="ok" if status < 400 else "err", edge=edge)
    assert _classify(story).flap_class == expected


def test_one_cf_ray_on_ingress_and_complete_is_not_interference() -> None:
    story = Story("ray")
    story.ingress(edge={"cf-ray": "abc-AMS"})
    story.complete(5, edge={"cf-ray": "abc-AMS"})
    assert _classify(story).flap_class == "healthy"


def test_backend_error_beats_stalled() -> None:
    story = stalled("s")
    story.error(40_000)
    assert _classify(story).flap_class == "backend-error"


def test_an_unanswered_call_with_a_first_byte_is_not_stalled() -> None:
    story = Story("fb")
    story.ingress()
    story.llm_start(1, story.request)
    story.first_byte(2)
    story.aborted(10)
    verdict = _classify(story)
    # Unanswered call: not a client abort either (the LLM call was left hanging).
    assert verdict.flap_class == "unclassified"


def test_a_call_cut_by_timeout_without_first_byte_is_stalled() -> None:
    story = Story("to")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.llm_response(
        30_001, call, 30_000, tokens=None, outcome="timeout", error_class="ReadTimeout"
    )
    story.complete(30_002, status=504, events=0, outcome="err")
    verdict = _classify(story)
    assert verdict.flap_class == "stalled-backend"
    assert "ReadTimeout" in verdict.reason


def test_the_first_token_timeout_decides_slow() -> None:
    assert _classify(slow_first_token(), timeout=60).flap_class == "slow-first-token"
    assert _classify(slow_first_token(), timeout=120).flap_class == "healthy"
    assert _classify(healthy(), timeout=0.01).flap_class == "slow-first-token"


def test_heartbeats_past_the_timeout_alone_make_it_slow() -> None:
    story = Story("hb")
    story.ingress()
    call = story.llm_start(1, story.request)
    story.first_byte(2)  # the stream started (a lifecycle event) while the call was still out
    story.event(2, "RUN_STARTED")
    story.heartbeat(10_001, call, 10_000)
    story.llm_response(10_500, call, 9_000)  # latency reported under the timeout
    story.complete(10_600)
    verdict = _classify(story, timeout=9.5)
    assert verdict.flap_class == "slow-first-token"
    assert "still waiting" in verdict.reason


def test_provider_empty_needs_zero_events() -> None:
    story = provider_empty("pe")
    story.envelopes[-1]["metadata"]["sse_event_count"] = 2
    assert _classify(story).flap_class == "healthy"
    unknown = provider_empty("pu")
    for env in unknown.envelopes:
        if env["boundary"] == "backend.llm.call.response":
            env["metadata"]["response_token_count"] = None
    assert _classify(unknown).flap_class == "provider-empty"


def test_a_server_side_abort_is_not_a_client_abort() -> None:
    story = client_abort("ce")
    for env in story.envelopes:
        if env["boundary"] == "backend.sse.aborted":
            env["metadata"]["termination_kind"] = "chunk_error"
    assert _classify(story).flap_class == "unclassified"


def test_facts_stay_small_whatever_the_number_of_envelopes() -> None:
    story = Story("big")
    story.ingress()
    for i in range(500):
        story.error(i + 1)
        story.aborted(i + 1)
        story.emit("backend.sse.event", i + 1, edge={"via": "squid", "retry-after": "1"})
    facts = classify.gather("big", _records(story))
    assert facts.errors == 500
    assert len(facts.error_refs) <= 8
    assert len(facts.aborts) <= 8
    assert len(facts.proxies) <= 8


# --- timeline -------------------------------------------------------------------------------


def test_the_tree_follows_parent_span_ids() -> None:
    story = stalled("tree")
    line = timeline.build("tree", _records(story))
    depth = {e.envelope["boundary"]: e.depth for e in line.events}
    assert depth["backend.request.ingress"] == 0
    assert depth["backend.agent.enter"] == 1
    assert depth["backend.llm.call.start"] == 2
    assert depth["backend.llm.call.heartbeat"] == 3
    assert depth["backend.llm.call.response"] == 3
    assert depth["backend.agent.exit"] == 1
    offsets = [e.offset_ms for e in line.events]
    assert offsets[0] == 0.0
    assert offsets == sorted(offsets)


def test_offsets_use_mono_when_it_agrees_with_ts() -> None:
    story = Story("mono")
    story.emit("backend.sse.event", 0.0)
    story.emit("backend.sse.event", 0.25)  # same ms in ts, 0.25 ms apart on the monotonic clock
    story.emit("backend.sse.event", 5.0)
    line = timeline.build("mono", _records(story))
    assert [round(e.offset_ms, 3) for e in line.events] == [0.0, 0.25, 5.0]
    other = Story("mono", mono0=7 * 10**12, start_ms=1.0)  # another host: its mono is unrelated
    other.emit("backend.sse.event", 0.0)
    merged = sorted(_records(story) + _records(other), key=lambda r: r.key)
    offsets = [e.offset_ms for e in timeline.build("mono", merged).events]
    assert 0.99 <= offsets[2] <= 1.01  # from ts, not from the foreign mono clock


def test_parent_cycles_and_orphans_do_not_lose_envelopes() -> None:
    story = Story("cyc")
    a, b = "00000000000000aa", "00000000000000bb"
    story.emit("backend.agent.enter", 0, span_id=a, parent=b)
    story.emit("backend.agent.enter", 1, span_id=b, parent=a)
    story.emit("backend.sse.event", 2, parent="ffffffffffffffff")
    line = timeline.build("cyc", _records(story))
    rows = timeline.render(line)
    assert sum("backend." in row for row in rows[3:]) == 3


def test_long_runs_of_sse_events_are_folded_in_text_only() -> None:
    story = Story("fold")
    story.ingress()
    story.first_byte(1)
    story.events(1, 40)
    story.complete(50, events=40)
    line = timeline.build("fold", _records(story))
    rows = timeline.render(line)
    assert sum("backend.sse.event" in r for r in rows) == 3
    assert any("… 38 more backend.sse.event" in r for r in rows)
    assert len(timeline.to_json(line)["events"]) == 43


def test_scopes_with_a_duration_get_a_bar() -> None:
    rows = timeline.render(timeline.build("t-healthy", _records(healthy())))
    complete = next(r for r in rows if "backend.response.complete" in r)
    assert "█" * timeline.WATERFALL_WIDTH in complete
    ingress = next(r for r in rows if "backend.request.ingress" in r)
    assert "█" not in ingress


# --- stats ----------------------------------------------------------------------------------


def _stats(stories: Iterable[Story], *, by_class: bool = False) -> dict[str, object]:
    report = stats.Stats(by_class=by_class)
    report.feed(_records(*stories))
    return report.to_json()


def test_stats_count_per_slug_and_overall() -> None:
    other = Story("other", slug="search")
    other.ingress()
    other.complete(3)
    data = _stats([healthy(), stalled(), client_abort(), backend_error(), other])
    overall, slugs = data["overall"], data["slugs"]
    assert isinstance(overall, dict)
    assert isinstance(slugs, dict)
    assert overall["requests"] == 5
    assert slugs["chat"]["requests"] == 4
    assert slugs["search"]["requests"] == 1
    assert overall["aborted"]["by_kind"]["client_disconnect"]["count"] == 2
    assert overall["aborted"]["rate"] == 0.4
    assert overall["errors"] == {"ValueError": 1}
    assert overall["llm_calls"] == 3
    assert overall["heartbeats"] == 3
    assert overall["heartbeats_per_call"] == 1.0
    assert overall["time_to_first_byte_ms"]["count"] == 2


def test_stats_by_class() -> None:
    data = _stats([make() for make in STORIES.values()], by_class=True)
    classes = data["classes"]
    assert isinstance(classes, dict)
    assert classes["overall"] == dict.fromkeys(STORIES, 1)


def test_percentiles_are_exact_then_sampled() -> None:
    sample = stats.Sample(1000, random.Random(1))
    for value in range(1, 101):
        sample.add(float(value))
    exact = sample.percentiles()
    assert (exact["p50"], exact["p90"], exact["p99"], exact["exact"]) == (50, 90, 99, True)
    small = stats.Sample(100, random.Random(1))
    for value in range(1, 100_001):
        small.add(float(value))
    approx = small.percentiles()
    assert approx["exact"] is False
    assert approx["count"] == 100_000
    assert len(small.values) == 100
    assert 30_000 < approx["p50"] < 70_000


def test_slugs_are_capped() -> None:
    report = stats.Stats()
    stories = []
    for i in range(stats.MAX_SLUGS + 10):
        story = Story(f"s{i}", slug=f"slug-{i}")
        story.ingress()
        stories.append(story)
    report.feed(_records(*stories))
    assert len(report.slugs) == stats.MAX_SLUGS + 1
    assert report.slugs[stats.OTHER].ingress == 10


def _long_stream(*, first_token: bool) -> Story:
    """A 2.6 s healthy stream whose first token came at 55 ms."""
    story = Story("long" if first_token else "long-old")
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    story.first_byte(60)
    for at in (1002, 2002):
        beat = story.heartbeat(at, call, at - 2)
        if first_token:
            story.envelopes[-1]["metadata"]["first_token_delta_ms"] = 55
        assert beat
    story.llm_response(2602, call, 2600)
    if first_token:
        story.envelopes[-1]["metadata"]["first_token_delta_ms"] = 55
    story.events(61, 40, step=60)
    story.agent_exit(2650, 1, agent)
    story.complete(2700, events=40)
    return story


def test_a_long_stream_with_an_early_first_token_is_healthy() -> None:
    verdict = _classify(_long_stream(first_token=True), timeout=1)
    assert verdict.flap_class == "healthy", verdict.reason
    assert _classify(_long_stream(first_token=True), timeout=0.05).flap_class == (
        "slow-first-token"
    )


def test_replay_shows_the_time_to_first_token() -> None:
    from cvdiag.diagnosis.describe import describe

    response = next(
        e
        for e in _long_stream(first_token=True).envelopes
        if e["boundary"] == "backend.llm.call.response"
    )
    assert "first_token=55ms" in describe(response)


def _background_run(outcome: str = "ok") -> Story:
    """A run with no request of its own, as a LangGraph server writes it when its request sent
    no test id: two calls under the run's id, the run named on their start envelopes."""
    story = Story("01a222f2-0000-7000-8000-000000000001")
    for at in (0, 30):
        call = story.llm_start(at, None)
        story.envelopes[-1]["metadata"]["run_id"] = story.test_id
        story.envelopes[-1]["metadata"]["thread_id"] = None
        story.llm_response(
            at + 20,
            call,
            20,
            outcome=outcome,
            error_class=None if outcome == "ok" else "InternalServerError",
        )
    return story


def test_a_background_run_is_healthy_not_a_request_without_its_terminal() -> None:
    verdict = _classify(_background_run())
    assert verdict.flap_class == "healthy", verdict.reason
    assert verdict.reason.startswith("a background run (01a222f2-")
    assert verdict.evidence["requests"] == 0
    without_run = _background_run()
    for env in without_run.envelopes:
        env["metadata"].pop("run_id", None)
        env["metadata"].pop("thread_id", None)
    assert _classify(without_run).flap_class == "unclassified"


def test_a_background_run_whose_call_failed_is_not_healthy() -> None:
    assert _classify(_background_run("err")).flap_class == "provider-error"
