"""Per-slug and overall figures over a stream of envelopes, in bounded memory.

Counts are exact. Percentiles are exact up to a reservoir's size and estimated from a uniform
sample (reservoir sampling, seeded, so a run is reproducible) beyond it; the JSON says which.
Slugs, error types and termination kinds are capped in number, the excess counted under
``(other)``, so no input can make the figures grow without bound. ``--by-class`` must remember
every test id: it keeps one small integer per test id (its class and slug), and the facts of
the few test ids still being written (``pertest``).
"""

from __future__ import annotations

import random
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Final

from cvdiag.analysis.classify import CLASSES, DEFAULT_FIRST_TOKEN_TIMEOUT, Facts, classify
from cvdiag.analysis.describe import number
from cvdiag.analysis.pertest import Again, PerTestId
from cvdiag.analysis.reading import Record

OVERALL_RESERVOIR: Final = 65_536
SLUG_RESERVOIR: Final = 4_096
MAX_SLUGS: Final = 256
MAX_KEYS: Final = 64
OTHER: Final = "(other)"
PERCENTILES: Final = (50, 90, 99)

INGRESS: Final = "backend.request.ingress"
COMPLETE: Final = "backend.response.complete"
ABORTED: Final = "backend.sse.aborted"


class Sample:
    """Numbers for percentiles: all of them up to ``limit``, a uniform sample beyond."""

    __slots__ = ("count", "limit", "rng", "values")

    def __init__(self, limit: int, rng: random.Random) -> None:
        self.values = array("d")
        self.count = 0
        self.limit = limit
        self.rng = rng

    def add(self, value: float) -> None:
        self.count += 1
        if len(self.values) < self.limit:
            self.values.append(value)
            return
        slot = self.rng.randrange(self.count)
        if slot < self.limit:
            self.values[slot] = value

    def percentiles(self) -> dict[str, Any]:
        ordered = sorted(self.values)
        out: dict[str, Any] = {"count": self.count, "exact": self.count <= self.limit}
        for p in PERCENTILES:
            out[f"p{p}"] = _nearest_rank(ordered, p) if ordered else None
        return out


def _nearest_rank(ordered: list[float], p: int) -> float:
    rank = max(1, -(-p * len(ordered) // 100))  # ceil(p/100 · n), the nearest-rank method
    return ordered[rank - 1]


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
        self.dropped = 0
        self.truncated = 0
        self.metadata_dropped = 0

    def add(self, envelope: dict[str, Any]) -> None:
        self.envelopes += 1
        boundary = envelope["boundary"]
        meta = envelope["metadata"]
        if envelope.get("_truncated") is True:
            self.truncated += 1
        if envelope.get("_metadata_dropped") is True:
            self.metadata_dropped += 1
        if boundary == "backend.sse.event":  # the most frequent boundary by far
            return
        if boundary == INGRESS:
            self.ingress += 1
        elif boundary == COMPLETE:
            self.completions += 1
            self.outcomes[envelope["outcome"]] += 1
            total = number(meta.get("total_duration_ms"))
            total = total if total is not None else number(envelope.get("duration_ms"))
            if total is not None:
                self.duration.add(total)
        elif boundary == ABORTED:
            kind = meta.get("termination_kind")
            _count_capped(self.aborted, kind if isinstance(kind, str) else "?")
        elif boundary == "backend.sse.first_byte":
            delta = number(meta.get("delta_ms_from_ingress"))
            if delta is not None:
                self.first_byte.add(delta)
        elif boundary == "backend.llm.call.start":
            self.llm_calls += 1
        elif boundary == "backend.llm.call.heartbeat":
            self.heartbeats += 1
        elif boundary == "backend.llm.call.response":
            self.llm_responses += 1
            self.llm_outcomes[envelope["outcome"]] += 1
            latency = number(meta.get("latency_ms"))
            latency = latency if latency is not None else number(envelope.get("duration_ms"))
            if latency is not None:
                self.llm_latency.add(latency)
        elif boundary == "backend.error.caught":
            kind = meta.get("exception_type")
            _count_capped(self.errors, kind if isinstance(kind, str) else "?")
        elif boundary == "cvdiag.queue_dropped":
            dropped = number(meta.get("dropped_count"))
            self.dropped += int(dropped) if dropped is not None else 0

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
            "total_duration_ms": self.duration.percentiles(),
            "llm_calls": calls,
            "llm_outcomes": dict(sorted(self.llm_outcomes.items())),
            "heartbeats": self.heartbeats,
            "heartbeats_per_call": round(self.heartbeats / calls, 3) if calls else None,
            "dropped": self.dropped,
            "truncated": self.truncated,
            "metadata_dropped": self.metadata_dropped,
        }


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


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
        self.overall = Group(OVERALL_RESERVOIR, self.rng)
        self.slugs: dict[str, Group] = {}
        self.by_class = by_class
        self.first_token_timeout = first_token_timeout
        #: Slugs as they appear in ``classes`` (capped like ``slugs``), indexed by ``_fold``.
        self._class_slugs: dict[str, int] = {}
        self.facts: PerTestId[int] = PerTestId(self._fold, self._restore, again=again, warn=warn)

    def add(self, record: Record) -> None:
        envelope = record.envelope
        self.overall.add(envelope)
        slug = envelope["slug"]
        group = self.slugs.get(slug)
        if group is None:
            if len(self.slugs) >= MAX_SLUGS:
                slug = OTHER
                group = self.slugs.get(OTHER)
            if group is None:
                group = self.slugs[slug] = Group(SLUG_RESERVOIR, self.rng)
        group.add(envelope)
        # Accounting envelopes carry a fresh test id each: they are not a test's story.
        if self.by_class and not envelope["boundary"].startswith("cvdiag."):
            self.facts.add(record, slug)

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


# --- text -----------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> list[str]:
    """``cvdiag stats`` as text: the overall block, one block per slug, then the classes."""
    lines = [
        f"{report['envelopes']} envelopes"
        + (
            f", {report['malformed_lines']} malformed lines skipped"
            if report["malformed_lines"]
            else ""
        )
    ]
    slugs = report["slugs"]
    if len(slugs) == 1:  # the slug's block would repeat the overall one
        blocks = [(f"overall (one slug: {next(iter(slugs))})", report["overall"])]
    else:
        blocks = [("overall", report["overall"])]
        blocks += [(f"slug {slug}", group) for slug, group in slugs.items()]
    for title, group in blocks:
        lines += ["", title, *_render_group(group)]
    classes = report.get("classes")
    if classes is not None:
        lines += ["", f"classes ({classes['test_ids']} test ids)"]
        lines.append("  overall   " + _pairs(classes["overall"]))
        for slug, counts in classes["slugs"].items():
            lines.append(f"  {slug:<9} " + _pairs(counts))
    return lines


def _render_group(g: dict[str, Any]) -> list[str]:
    outcomes = "  ".join(f"{k} {v}" for k, v in g["outcomes"].items())
    aborted = g["aborted"]
    kinds = ", ".join(
        f"{kind} {v['count']} ({_percent(v['rate'])})" for kind, v in aborted["by_kind"].items()
    )
    rows = [
        ("requests", f"{g['requests']}   {outcomes}"),
        ("aborted", f"{_percent(aborted['rate'])}" + (f"   {kinds}" if kinds else "")),
        ("errors", _pairs(g["errors"]) or "none"),
        ("first byte", _percentile_text(g["time_to_first_byte_ms"])),
        ("LLM latency", _percentile_text(g["llm_latency_ms"])),
        ("total duration", _percentile_text(g["total_duration_ms"])),
        (
            "LLM calls",
            f"{g['llm_calls']}   {_pairs(g['llm_outcomes'])}   heartbeats {g['heartbeats']}"
            + (
                f" ({g['heartbeats_per_call']:g} per call)"
                if g["heartbeats_per_call"] is not None
                else ""
            ),
        ),
        (
            "accounting",
            f"dropped {g['dropped']}   truncated {g['truncated']}"
            f"   metadata dropped {g['metadata_dropped']}",
        ),
    ]
    return [f"  {name:<15} {value}".rstrip() for name, value in rows]


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _percentile_text(p: dict[str, Any]) -> str:
    if not p["count"]:
        return "-"
    approx = "" if p["exact"] else "~"
    figures = "  ".join(f"p{q} {approx}{_ms(p[f'p{q}'])}" for q in PERCENTILES)
    return f"{figures}   (n={p['count']})"


def _ms(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.1f}s"
    if value >= 100:
        return f"{value:.0f}ms"
    return f"{value:.1f}ms"
