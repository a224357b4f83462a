"""What ``cvdiag flakes`` keeps of each attempt, and how cheaply it reads one, change nothing it
says.

``flakes.Test`` keeps counters, not one record per attempt: its causes and separating facts are
those of the exhaustive computation over every attempt (below, the one ``cvdiag flakes`` made
before it folded attempts as they came), for any attempts, in any order. A story read untimed
(``Story(timed=False)``: only LLM calls' beginnings placed in time) gives the same facts, first
provider and pass or failure as one read with the clock."""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.compare.flakes import FACTS_SHOWN, SEPARATES, ended_well, facts_of
from cvdiag.compare.flakes import Test as Folded
from cvdiag.compare.story import Story
from cvdiag.logs.reading import Record
from tests.compare.test_hostile import BASE, metadata


class Attempt(NamedTuple):
    passed: bool
    flap_class: str
    facts: frozenset[str]
    provider: str | None
    first_token: float | None


def exhaustive(attempts: list[Attempt]) -> tuple[list[Any], list[tuple[str, int, int]]]:
    """Causes and ``(fact, failures, passes)`` of the separating facts, from every attempt."""
    failures = [a for a in attempts if not a.passed]
    passes = [a for a in attempts if a.passed]
    causes = Counter((a.flap_class, a.provider) for a in failures).most_common()
    if not failures or not passes:
        return causes, []
    slowest = max(a.first_token or 0.0 for a in passes)
    mark = f"first token later than {slowest:.0f} ms (the slowest pass) or none"

    def shown(a: Attempt) -> frozenset[str]:
        late = a.first_token is None or a.first_token > slowest
        return a.facts | {mark} if late else a.facts

    rows = []
    for fact in frozenset().union(*map(shown, failures)):
        f = sum(fact in shown(a) for a in failures)
        p = sum(fact in shown(a) for a in passes)
        gap = f / len(failures) - p / len(passes)
        if gap >= SEPARATES:
            symptom = fact.startswith(("provider error=", "first token later than"))
            rows.append(((symptom, -gap, -f / len(failures), fact), f, p))
    rows.sort()
    return causes, [(key[3], f, p) for key, f, p in rows[:FACTS_SHOWN]]


def folded(attempts: list[Attempt]) -> Folded:
    test = Folded("t")
    for a in attempts:
        test.add(
            passed=a.passed,
            flap_class=a.flap_class,
            facts=a.facts,
            provider=a.provider,
            first_token=a.first_token,
        )
    return test


FACTS = ["model=a/x", "model=b/y", "via: 1.1 squid", "fingerprint=f1", "provider error=timeout"]
timings = st.none() | st.floats(allow_nan=True) | st.integers(0, 40).map(float)
attempts = st.builds(
    Attempt,
    st.booleans(),
    st.sampled_from(["stalled-backend", "client-abort", "unknown"]),
    st.frozensets(st.sampled_from(FACTS)),
    st.sampled_from([None, "a", "b"]),
    timings,
)


def check(given_attempts: list[Attempt]) -> None:
    test = folded(given_attempts)
    causes, facts = exhaustive(given_attempts)
    failures = sum(not a.passed for a in given_attempts)
    assert (test.attempts, test.failures) == (len(given_attempts), failures)
    assert [(c["flap_class"], c["provider"]) for c in test.causes()] == [c for c, _ in causes]
    assert [c["count"] for c in test.causes()] == [n for _, n in causes]
    assert [(f["fact"], f["failures"], f["passes"]) for f in test.separating()] == facts
    assert test.to_json()["passes"] == len(given_attempts) - failures


@settings(max_examples=300)
@given(st.lists(attempts, max_size=40))
def test_the_summary_separates_as_every_attempt_would(given_attempts: list[Attempt]) -> None:
    check(given_attempts)


@settings(max_examples=60)
@given(st.lists(attempts, min_size=150, max_size=400))
def test_failures_first_tokens_forgotten_along_the_way_change_nothing(
    given_attempts: list[Attempt],
) -> None:
    # Long enough for the failures' first tokens past every pass so far to be pruned, often.
    check(given_attempts)


def test_first_tokens_a_pass_has_matched_are_forgotten() -> None:
    # Passes whose first tokens keep rising, each followed by a failure a little later: what is
    # kept of the failures' first tokens stays bounded (not one per failure).
    rising = []
    for n in range(2000):
        rising.append(Attempt(True, "healthy", frozenset(FACTS[:1]), "a", float(n)))
        rising.append(Attempt(False, "stalled-backend", frozenset(FACTS[1:3]), "a", n + 0.5))
    assert len(folded(rising)._late) <= 128
    check(rising)
    # Then failures past every pass, some just past it: kept through the prunings they cause,
    # and most of the failures now came later than the slowest pass.
    later = [
        Attempt(False, "stalled-backend", frozenset(FACTS[1:2]), "a", first)
        for n in range(400)
        for first in (200 + n % 3, 1e6)
    ]
    check(rising[:400] + later)
    test = folded(rising[:400] + later)
    late = [f for f in test.separating() if f["fact"].startswith("first token later than")]
    assert [(f["fact"], f["failures"]) for f in late] == [
        ("first token later than 199 ms (the slowest pass) or none", 801)
    ]


# Envelopes whose clocks disagree at will: ``ts`` over a few seconds, ``mono_ns`` anywhere, so
# that LLM calls' beginnings come out of file order; calls to two providers, so that which call
# came first shows.
steps = st.tuples(
    st.sampled_from(
        ["backend.request.ingress", "backend.response.complete", "backend.sse.aborted",
         "backend.sse.event", "backend.agent.enter", "backend.agent.exit",
         "backend.llm.call.start", "backend.llm.call.heartbeat", "backend.llm.call.response"]
    ),
    metadata | st.fixed_dictionaries({"provider": st.sampled_from(["a", "b"]), "model": st.none()}),
    st.sampled_from(["0123456789abcdef", "1111111111111111", "2222222222222222"]),
    st.none() | st.sampled_from(["0123456789abcdef", "1111111111111111"]),
    st.integers(0, 3999),
    st.integers(0, 4 * 10**9),
)  # fmt: skip


@settings(max_examples=300)
@given(st.lists(steps, max_size=30))
def test_a_story_read_untimed_tells_flakes_the_same(given_steps: list[Any]) -> None:
    timed = Story("t-1", gather_facts=False)
    untimed = Story("t-1", gather_facts=False, timed=False)
    for boundary, meta, span, parent, ms, mono in given_steps:
        ts = f"2026-11-28T10:00:0{ms // 1000}.{ms % 1000:03d}Z"
        env = {**BASE, "boundary": boundary, "metadata": meta, "span_id": span,
               "parent_span_id": parent, "ts": ts, "mono_ns": mono}  # fmt: skip
        record = Record("x", 1, b"", env, (ts[:23] + "000Z", mono))
        timed.add(record)
        untimed.add(record)
    for story in (timed, untimed):
        story.finish(first_token_timeout=60)
    assert facts_of(untimed) == facts_of(timed)
    assert ended_well(untimed) == ended_well(timed)
    assert untimed.flap_class == timed.flap_class
    calls = [[p.key for p in s.points if p.kind == "llm" and not p.end] for s in (timed, untimed)]
    assert calls[0] == calls[1]
