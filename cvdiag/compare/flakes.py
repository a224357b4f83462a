"""Flake history by cause: per test, its attempts over many runs, the failures by class, and the
facts that separate the failing attempts from the passing ones.

An attempt is a test id's story (``story.Story``); which test it belongs to comes from JUnit
(its name) or from the test id's stable part (``d4-chat-run7`` is ``d4-chat``); whether it passed
from JUnit, else from how its story ended (``ended_well``). A fact is a short ``name=value`` an
attempt's story shows (a model, an edge header, a fingerprint, a time to first token past the
slowest pass); one that every failure shows and few passes do is the likely cause.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

from cvdiag.compare.story import Story

#: ``-run7``, ``-attempt-2``, ``-retry1``, ``.r3``, a trailing ``-12``: the part of a test id a
#: harness changes per run or attempt.
_RUN_PART: Final = re.compile(r"(?:[-_.](?:run|attempt|retry|try|r)[-_]?\d+|[-_.]\d+)+$")
#: A fact counts as separating when it is in at least this share of the failures more than of
#: the passes.
SEPARATES: Final = 0.5
#: Facts shown per test.
FACTS_SHOWN: Final = 5
#: Edge headers whose values are per request (a ray id): never a shared fact.
_PER_REQUEST: Final = frozenset({"cf-ray", "x-railway-request-id", "x-hikari-trace", "retry-after"})


def _symptom(fact: str) -> bool:
    return fact.startswith(("provider error=", "first token later than", "the client's"))


def ended_well(story: Story) -> bool:
    """Without JUnit, whether an attempt passed: each request answered in full (HTTP below
    400) and each LLM call answered; with neither (a background run's agent alone), each agent
    scope exited ok. Not the class alone: a proxy in the path of a request that completed is a
    class (``edge-interference``), not a failure of the test, and an agent alone has no class
    but ``unclassified`` (the classifier judges requests and calls)."""
    ends = [p for p in story.points if p.end and p.kind in ("request", "llm")]
    if not ends:
        ends = [p for p in story.points if p.end and p.kind == "agent"]
    if ends:
        return all(_good(p.facts) for p in ends)
    return story.flap_class == "healthy"  # nothing ended to judge by: the class decides


def _good(facts: dict[str, Any]) -> bool:
    status = facts.get("http_status")
    bad_status = isinstance(status, (int, float)) and status >= 400
    return facts.get("outcome") == "ok" and not bad_status and "error_class" not in facts


def stable_part(test_id: str) -> str:
    """The test a test id names, without its run or attempt number."""
    return _RUN_PART.sub("", test_id) or test_id


def facts_of(story: Story) -> tuple[frozenset[str], str | None, float | None]:
    """The facts an attempt's story shows, its first LLM call's provider, its slowest first
    token (ms; None when it had none)."""
    found: set[str] = set()
    provider: str | None = None
    first_token: float | None = None
    for point in story.points:
        if point.kind == "llm" and not point.end:
            model = point.label.removeprefix("LLM ")
            found.add(f"model={model}")
            provider = provider or model.split("/", 1)[0]
            if "request_fingerprint" in point.facts:
                found.add(f"fingerprint={point.facts['request_fingerprint']}")
        elif point.kind == "llm":
            value = point.timings.get("first_token_ms")
            if value is not None:
                first_token = max(first_token or 0.0, value)
            if point.facts.get("error_class"):
                found.add(f"provider error={point.facts['error_class']}")
        headers = point.facts.get("edge_headers")
        if isinstance(headers, dict):
            found.update(f"{k}: {v}"[:120] for k, v in headers.items() if k not in _PER_REQUEST)
    if story.loops():
        found.add("the same prompt sent again in one agent turn (possible loop)")
    view = story.client.view()  # the probe's lines or the runner's words: the client's side
    for request in view.requests if view is not None else ():
        if request.end == "client-timeout":
            timeout = f"{request.timeout_ms:,.0f} ms " if request.timeout_ms is not None else ""
            found.add(f"the client's {timeout}timeout was reached")
        elif request.end in ("network-error", "left-early"):
            found.add(f"the client's side ended: {request.end}")
    return frozenset(found), provider, first_token


class Test:
    """One test's attempts, folded as they come: counts, and only what its causes and separating
    facts need. Not one record per attempt: over 100 runs of 3,400 attempts each those records
    were 232 MB and, through the garbage collector's passes over them, a time that grew with
    the runs (2.0 times a plain read at 10 runs, 3.0 at 100). A pass counts towards the facts it
    shows; a failure too, and keeps its first token only while it is later than every pass seen
    so far (whether it is later than the slowest pass is known only at the end)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.attempts = 0
        self.failures = 0
        #: (class, provider) -> failures, in the order first seen (``most_common`` keeps it).
        self._causes: Counter[tuple[str, str | None]] = Counter()
        #: fact -> attempts that showed it, passes and failures apart.
        self._passed: Counter[str] = Counter()
        self._failed: Counter[str] = Counter()
        #: Attempts without a first token: always past the slowest pass.
        self._passes_untimed = 0
        self._failures_untimed = 0
        #: The slowest pass's first token (a pass without one counts as 0), None before a pass.
        self._slowest: float | None = None
        #: Failures' first tokens that were later than every pass seen when they came.
        self._late: list[float] = []
        #: How long ``_late`` may grow before it is pruned again.
        self._late_kept = 64

    @property
    def passes(self) -> int:
        return self.attempts - self.failures

    @property
    def rate(self) -> float:
        return self.failures / self.attempts if self.attempts else 0.0

    def add(
        self,
        *,
        passed: bool,
        flap_class: str,
        facts: frozenset[str],
        provider: str | None,
        first_token: float | None,
    ) -> None:
        """One attempt: whether it passed, its class (a failure's), facts, first LLM call's
        provider and slowest first token (``facts_of``)."""
        self.attempts += 1
        if passed:
            self._passed.update(facts)
            if first_token is None:
                self._passes_untimed += 1
            value = first_token or 0.0
            # As ``max`` over the passes in order would: a later value replaces only a smaller.
            if self._slowest is None or value > self._slowest:
                self._slowest = value
            return
        self.failures += 1
        self._causes[flap_class, provider] += 1
        self._failed.update(facts)
        if first_token is None:
            self._failures_untimed += 1
        elif self._slowest is None or not first_token <= self._slowest:
            self._late.append(first_token)
            if len(self._late) > self._late_kept:
                self._forget_early()

    def _forget_early(self) -> None:
        """Drop the first tokens a pass has since matched: the slowest pass only grows, so they
        can never be later than it. Amortized: the list is looked at again only once it doubled."""
        slowest = self._slowest
        if slowest is not None:
            self._late = [v for v in self._late if not v <= slowest]
        self._late_kept = max(64, 2 * len(self._late))

    def causes(self) -> list[dict[str, Any]]:
        """The failures by class (and the provider the first LLM call went to), most first."""
        return [
            {"flap_class": flap_class, "provider": provider, "count": count}
            for (flap_class, provider), count in self._causes.most_common()
        ]

    def separating(self) -> list[dict[str, Any]]:
        """Facts far more common among the failures than among the passes, most telling first."""
        failures, passes = self.failures, self.passes
        if not failures or not passes or self._slowest is None:
            return []
        slowest = self._slowest
        # Never the text of a fact (a header's holds ": ", the others begin otherwise), so its
        # count is kept apart and added here, as a fact every late attempt would show.
        mark = f"first token later than {slowest:.0f} ms (the slowest pass) or none"
        counted_f = Counter(self._failed)
        late = self._failures_untimed + sum(1 for v in self._late if v > slowest)
        if late:
            counted_f[mark] = late
        counted_p = Counter(self._passed)
        if self._passes_untimed:  # a pass with a first token is never later than the slowest
            counted_p[mark] = self._passes_untimed
        found = []
        for fact, count in counted_f.items():
            share_f, share_p = count / failures, counted_p[fact] / passes
            if share_f - share_p >= SEPARATES:
                found.append((share_f - share_p, share_f, fact, count, counted_p[fact]))
        # What an attempt was given (an edge header, a model, a prompt) before what happened to
        # it (a provider error, a late first token): the latter is the failure seen again, the
        # former what tells the failing attempts apart before they failed.
        found.sort(key=lambda item: (_symptom(item[2]), -item[0], -item[1], item[2]))
        return [
            {
                "fact": fact,
                "kind": "symptom" if _symptom(fact) else "input",
                "failures": f,
                "of_failures": failures,
                "passes": p,
                "of_passes": passes,
            }
            for _, _, fact, f, p in found[:FACTS_SHOWN]
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.name,
            "attempts": self.attempts,
            "passes": self.passes,
            "failures": self.failures,
            "flake_rate": round(self.rate, 4),
            "causes": self.causes(),
            "separating_facts": self.separating(),
        }


def by_test(
    stories: Iterable[tuple[str, Story]],
    *,
    names: dict[str, tuple[str, bool]] | None = None,
) -> list[Test]:
    """Each story (with the run it is from) as an attempt of its test; ``names`` maps a test id
    to its JUnit test and whether that attempt passed. Sorted by flake rate, then failures."""
    tests: dict[str, Test] = {}
    for _run, story in stories:
        named = names.get(story.test_id) if names is not None else None
        if names is not None and named is None:
            continue  # a story no test of the JUnit files forwarded: a page load, a health check
        name, passed = named if named is not None else (stable_part(story.test_id), None)
        facts, provider, first_token = facts_of(story)
        passed = passed if passed is not None else ended_well(story)
        test = tests.get(name)
        if test is None:
            test = tests[name] = Test(name)
        test.add(
            passed=passed,
            flap_class="healthy" if passed else story.flap_class,  # a pass's is never shown
            facts=facts,
            provider=provider,
            first_token=first_token,
        )
    return sorted(tests.values(), key=lambda t: (-t.rate, -t.failures, t.name))
