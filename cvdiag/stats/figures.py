"""Per-slug and overall figures over a stream of envelopes, in bounded memory.

Counts are exact. Percentiles are exact up to a reservoir's size and estimated from a uniform
sample (reservoir sampling, seeded, so a run is reproducible) beyond it; the JSON says which.
Slugs, error types and termination kinds are capped in number, the excess counted under
``(other)``, so no input can make the figures grow without bound. ``--by-class`` must remember
every test id: it keeps one small integer per test id (its class and slug; past
``folded.SPILL_AT`` of them in a temporary file), and the facts of the few test ids still being
written (``pertest``). The percentile samples are in ``sample``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any, Final

from cvdiag.diagnosis.classify import CLASSES, DEFAULT_FIRST_TOKEN_TIMEOUT, Facts, classify
from cvdiag.diagnosis.describe import number
from cvdiag.diagnosis.pertest import Again, PerTestId
from cvdiag.logs.reading import Record
from cvdiag.stats.sample import Sample
from cvdiag.stats.text import PERCENTILES, render

__all__ = ["PERCENTILES", "Group", "Sample", "Stats", "render"]

OVERALL_RESERVOIR: Final = 65_536
SLUG_RESERVOIR: Final = 4_096
MAX_SLUGS: Final = 256
MAX_KEYS: Final = 64
OTHER: Final = "(other)"

INGRESS: Final = "backend.request.ingress"
COMPLETE: Final = "backend.response.complete"
ABORTED: Final = "backend.sse.aborted"


def _count_capped(counter: Counter[str], key: str, amount: int = 1) -> None:
    if key in counter or len(counter) < MAX_KEYS:
        counter[key] += amount
    else:
        counter[OTHER] += amount


class Group:
    """The figures of one slug (or of everything)."""

    def __init__(self, reservoir: int, rng: random.Random) -> None:
        self.envelopes = 0
        self.ingress = 0
        self.completions = 0
        self.outcomes: Counter[str] = Counter()
        self.aborted: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.llm_calls = 0
        self.llm_responses = 0
        self.llm_outcomes: Counter[str] = Counter()
        self.heartbeats = 0
        self.first_byte = Sample(reservoir, rng)
        self.llm_latency = Sample(reservoir, rng)
        self.duration = Sample(reservoir, rng)
        #: Of ``duration``'s values, those of aborted requests (the rest are completions').
        self.aborted_durations = 0
        self.dropped = 0
        self.truncated = 0
        self.metadata_dropped = 0

    def count(self, envelope: dict[str, Any], boundary: str) -> None:
        """The plain counts of one envelope (``Stats`` keeps them per slug and sums them for
        the overall group: one pass per envelope, not two)."""
        if boundary == INGRESS:
            self.ingress += 1
        elif boundary == COMPLETE:
            self.completions += 1
            self.outcomes[envelope["outcome"]] += 1
        elif boundary == ABORTED:
            if number(envelope.get("duration_ms")) is not None:
                self.aborted_durations += 1
        elif boundary == "backend.llm.call.start":
            self.llm_calls += 1
        elif boundary == "backend.llm.call.heartbeat":
            self.heartbeats += 1
        elif boundary == "backend.llm.call.response":
            self.llm_responses += 1
            self.llm_outcomes[envelope["outcome"]] += 1
        elif boundary == "cvdiag.queue_dropped":
            dropped = number(envelope["metadata"].get("dropped_count"))
            self.dropped += int(dropped) if dropped is not None else 0

    _PLAIN: Final = (
        "envelopes",
        "ingress",
        "completions",
        "llm_calls",
        "llm_responses",
        "heartbeats",
        "aborted_durations",
        "dropped",
        "truncated",
        "metadata_dropped",
    )

    def add_counts(self, other: Group) -> None:
        for name in self._PLAIN:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.outcomes.update(other.outcomes)
        self.llm_outcomes.update(other.llm_outcomes)

    def merge(self, other: Group) -> None:
        """Add ``other``, the same group's figures over a later part of the input."""
        self.add_counts(other)
        # Capped counters: keys in the order they first appeared, as one read would see them.
        for mine, theirs in ((self.aborted, other.aborted), (self.errors, other.errors)):
            for key, amount in theirs.items():
                _count_capped(mine, key, amount)
        self.first_byte.merge(other.first_byte)
        self.llm_latency.merge(other.llm_latency)
        self.duration.merge(other.duration)

    @property
    def requests(self) -> int:
        """Requests seen: ingress envelopes, or — at the default tier, which has no ingress —
        the requests that ended (completed or aborted)."""
        ended = self.completions + sum(self.aborted.values())
        return max(self.ingress, ended)

    def to_json(self) -> dict[str, Any]:
        requests = self.requests
        aborted = sum(self.aborted.values())
        calls = max(self.llm_calls, self.llm_responses)
        return {
            "envelopes": self.envelopes,
            "requests": requests,
            "outcomes": {**dict(sorted(self.outcomes.items())), "aborted": aborted},
            "aborted": {
                "count": aborted,
                "rate": _rate(aborted, requests),
                "by_kind": {
                    kind: {"count": n, "rate": _rate(n, requests)}
                    for kind, n in self.aborted.most_common()
                },
            },
            "errors": dict(self.errors.most_common()),
            "time_to_first_byte_ms": self.first_byte.percentiles(),
            "llm_latency_ms": self.llm_latency.percentiles(),
            "total_duration_ms": {
                **self.duration.percentiles(),
                "aborted": self.aborted_durations,
            },
            "llm_calls": calls,
            "llm_outcomes": dict(sorted(self.llm_outcomes.items())),
            "heartbeats": self.heartbeats,
            "heartbeats_per_call": round(self.heartbeats / calls, 3) if calls else None,
            "dropped": self.dropped,
            "truncated": self.truncated,
            "metadata_dropped": self.metadata_dropped,
        }


# The figures an envelope adds to the overall group and to its slug's group alike (samples,
# capped counters), overall first: one random stream serves both, and the order keeps a run
# reproducible. Keyed by boundary.
Both = Callable[[Group, Group, dict[str, Any], dict[str, Any]], None]


def _sampled(sample: str, key: str, *, else_duration: bool) -> Both:
    """Adds the number at ``metadata[key]`` (else the envelope's ``duration_ms``, if
    ``else_duration``) to the sample ``sample`` of both groups."""
    pick = attrgetter(sample)

    def add(overall: Group, group: Group, meta: dict[str, Any], env: dict[str, Any]) -> None:
        value = number(meta.get(key))
        if value is None and else_duration:
            value = number(env.get("duration_ms"))
        if value is not None:
            pick(overall).add(value)
            pick(group).add(value)

    return add


def _counted(counter: str, key: str) -> Both:
    """Counts the text at ``metadata[key]`` (``?`` if it is not one) in the capped counter
    ``counter`` of both groups."""
    pick = attrgetter(counter)

    def add(overall: Group, group: Group, meta: dict[str, Any], env: dict[str, Any]) -> None:
        kind = meta.get(key)
        kind = kind if isinstance(kind, str) else "?"
        _count_capped(pick(overall), kind)
        _count_capped(pick(group), kind)

    return add


def _both(*adds: Both) -> Both:
    def add(overall: Group, group: Group, meta: dict[str, Any], env: dict[str, Any]) -> None:
        for one in adds:
            one(overall, group, meta, env)

    return add


_BOTH: Final[dict[str, Both]] = {
    COMPLETE: _sampled("duration", "total_duration_ms", else_duration=True),
    # An aborted request lasted too, up to the abort (its ``duration_ms``), and aborts are
    # often the slow ones: left out, the total duration would look better than it was.
    ABORTED: _both(
        _counted("aborted", "termination_kind"),
        _sampled("duration", "total_duration_ms", else_duration=True),
    ),
    "backend.sse.first_byte": _sampled("first_byte", "delta_ms_from_ingress", else_duration=False),
    "backend.llm.call.response": _sampled("llm_latency", "latency_ms", else_duration=True),
    "backend.error.caught": _counted("errors", "exception_type"),
}


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


#: What one ``Stats`` hands another to merge: its overall group and its slugs' groups.
Part = tuple[Group, dict[str, Group]]


class Stats:
    """Everything ``cvdiag stats`` reports, fed one envelope at a time."""

    def __init__(
        self,
        *,
        by_class: bool = False,
        first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT,
        again: Again | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        """``again`` reads the inputs a second time (see ``pertest``); with it, ``--by-class``
        holds a small number per test id, classified with ``first_token_timeout``, in a
        temporary file past a point (``warn`` hears if none can be made)."""
        self.rng = random.Random(0)  # noqa: S311 - sampling, not security
        self._overall = Group(OVERALL_RESERVOIR, self.rng)
        self.slugs: dict[str, Group] = {}
        self.by_class = by_class
        self.first_token_timeout = first_token_timeout
        #: Slugs as they appear in ``classes`` (capped like ``slugs``), indexed by ``_fold``.
        self._class_slugs: dict[str, int] = {}
        self.facts: PerTestId[int] = PerTestId(self._fold, self._restore, again=again, warn=warn)

    @property
    def overall(self) -> Group:
        """The figures of every envelope: the plain counts are the slugs' counts summed."""
        overall = self._overall
        for name in Group._PLAIN:
            setattr(overall, name, 0)
        overall.outcomes.clear()
        overall.llm_outcomes.clear()
        for group in self.slugs.values():
            overall.add_counts(group)
        return overall

    def _group(self, slug: str) -> tuple[str, Group]:
        """The group of a slug seen for the first time (``(other)`` past ``MAX_SLUGS``)."""
        if len(self.slugs) >= MAX_SLUGS:
            slug = OTHER
            group = self.slugs.get(OTHER)
            if group is not None:
                return slug, group
        group = self.slugs[slug] = Group(SLUG_RESERVOIR, self.rng)
        return slug, group

    def add(self, record: Record) -> None:
        envelope = record.envelope
        slug = envelope["slug"]
        group = self.slugs.get(slug)
        if group is None:
            slug, group = self._group(slug)
        group.envelopes += 1
        if envelope.get("_truncated") is True:
            group.truncated += 1
        if envelope.get("_metadata_dropped") is True:
            group.metadata_dropped += 1
        boundary = envelope["boundary"]
        if boundary != "backend.sse.event":  # the most frequent boundary by far
            group.count(envelope, boundary)
            both = _BOTH.get(boundary)
            if both is not None:
                both(self._overall, group, envelope["metadata"], envelope)
        # Accounting envelopes carry a fresh test id each: they are not a test's story.
        if self.by_class and not boundary.startswith("cvdiag."):
            self.facts.add(record, slug)

    def partial(self) -> Part:
        """What ``merge`` needs of these figures (a worker's result: small, picklable)."""
        return self._overall, self.slugs

    def merge(self, part: Part) -> None:
        """Add the figures of a later part of the input (``partial()`` of another ``Stats``
        without ``by_class``). Counts merge exactly; so do percentiles while the values fit
        the reservoirs, and beyond them the merged sample is a uniform sample of both."""
        overall, slugs = part
        self._overall.merge(overall)
        for slug, group in slugs.items():
            mine = self.slugs.get(slug)
            if mine is None:
                _, mine = self._group(slug)
            mine.merge(group)

    def _fold(self, order: int, slug: str, facts: Facts) -> int:
        """A test id as one small integer: its class and its slug."""
        verdict = classify(facts, first_token_timeout=self.first_token_timeout).flap_class
        index = self._class_slugs.setdefault(slug, len(self._class_slugs))
        return index * len(CLASSES) + CLASSES.index(verdict)

    def _restore(self, folded: int) -> tuple[int, str]:
        index = folded // len(CLASSES)
        return 0, next(s for s, i in self._class_slugs.items() if i == index)

    def feed(self, records: Iterable[Record]) -> Stats:
        for record in records:
            self.add(record)
        return self

    def classes(self, first_token_timeout: float | None = None) -> dict[str, Any]:
        if first_token_timeout is not None:
            self.first_token_timeout = first_token_timeout  # for the test ids still open
        overall: Counter[str] = Counter()
        per_slug: dict[str, Counter[str]] = {}
        every = self.facts.finish()  # before reading the slugs' names: it may add some
        slugs = {index: slug for slug, index in self._class_slugs.items()}
        for folded, count in every.counts().items():  # (slug, class) pairs: a few hundred
            slug, verdict = slugs[folded // len(CLASSES)], CLASSES[folded % len(CLASSES)]
            overall[verdict] += count
            per_slug.setdefault(slug, Counter())[verdict] += count
        return {
            "test_ids": sum(overall.values()),
            "overall": _ordered(overall),
            "slugs": {slug: _ordered(counts) for slug, counts in sorted(per_slug.items())},
        }

    def to_json(
        self, *, malformed: int = 0, first_token_timeout: float | None = None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "envelopes": self.overall.envelopes,
            "malformed_lines": malformed,
            "overall": self.overall.to_json(),
            "slugs": {slug: group.to_json() for slug, group in sorted(self.slugs.items())},
        }
        if self.by_class:
            out["classes"] = self.classes(first_token_timeout)
        return out


def _ordered(counts: Counter[str]) -> dict[str, int]:
    return {name: counts[name] for name in CLASSES if counts[name]}
