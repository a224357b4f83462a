"""The two reads behind a report: every test id listed and classified, then the stories of the
ones drawn.

The first read is ``cvdiag ls``'s (``pertest``: lean facts for the test ids seen most recently,
the others folded into their row), so it holds the same memory whatever the log's size. It also
keeps the log's ``cvdiag.queue_dropped`` reports, which ``cvdiag classify`` weighs. The second
read takes only the envelopes of the test ids drawn — the failed ones, or every one with
``every`` — up to ``MAX_DETAILS`` of them, each into a bounded ``Story``. A drawn test id's
class is its story's, computed by ``classify`` from all its envelopes and the drop reports: the
class ``cvdiag classify`` gives.
"""

from __future__ import annotations

import dataclasses
import datetime
import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

import orjson

from cvdiag.compare.diff import Comparison
from cvdiag.diagnosis.classes import CLASSES, DEFAULT_FIRST_TOKEN_TIMEOUT
from cvdiag.diagnosis.facts import Facts
from cvdiag.diagnosis.pertest import Fold, PerTestId, reread
from cvdiag.diagnosis.rows import Rows
from cvdiag.layers.runner import Words, tell
from cvdiag.logs.inputs import Input, Inputs
from cvdiag.logs.reading import (
    MARKER,
    Malformed,
    Record,
    candidate_lines,
    records,
    split_envelope,
    ts_key,
)
from cvdiag.logs.shape import shape_problem
from cvdiag.report.story import Story
from cvdiag.runs.cases import Case

#: Test ids drawn in full (waterfall, class, envelopes); the others are listed only.
MAX_DETAILS: Final = 50
#: Rows in the overview: failed test ids first, then healthy ones, up to this many in all.
MAX_ROWS: Final = 2000
#: ``cvdiag.queue_dropped`` reports kept for the classifier (each a few hundred bytes).
MAX_DROP_REPORTS: Final = 10_000

DROPPED: Final = "cvdiag.queue_dropped"


@dataclasses.dataclass(slots=True)
class Report:
    """What a report page shows."""

    sources: list[str]
    #: When the report was written (UTC, ISO 8601).
    written: str
    first_token_timeout: float
    #: Listed rows (``Rows.row`` dicts), failed first; each drawn one has ``detail``: its index.
    rows: list[dict[str, Any]]
    #: Test ids per class, over the whole log (listed or not).
    counts: dict[str, int]
    test_ids: int
    #: Test ids not listed (past ``MAX_ROWS``) and failed ones not drawn (past ``MAX_DETAILS``).
    unlisted: int
    undrawn: int
    stories: list[Story]
    #: Envelopes the log says were dropped before they were written (``cvdiag.queue_dropped``).
    dropped: int
    malformed: int
    #: Whether healthy test ids were drawn too.
    every: bool = False
    #: Labels to show beside test ids (a pytest node id, from the plugin), by test id.
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    #: The run's tests (from pytest or JUnit files): the page counts them by outcome.
    cases: list[Case] = dataclasses.field(default_factory=list)
    #: A drawn failure's comparison with a passing attempt of its test, by its test id.
    comparisons: dict[str, Comparison] = dataclasses.field(default_factory=dict)


def gather(
    files: Sequence[str],
    *,
    every: bool = False,
    only: frozenset[str] | None = None,
    first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT,
    max_details: int = MAX_DETAILS,
    on_malformed: Callable[[Malformed], None] | None = None,
    warn: Callable[[str], None] | None = None,
    watch: Callable[[Inputs], None] | None = None,
    draw: frozenset[str] = frozenset(),
    words: Words | None = None,
) -> Report:
    """Read ``files`` (each one that can be read twice: no stdin) into a ``Report``.

    ``only`` limits the report to those test ids; ``draw`` names test ids drawn first whatever
    their class (a failed test's, whose requests may all be healthy); ``watch`` sees the inputs
    of the first read (progress on a long read); ``words``: what a runner's JUnit said of a
    client that timed out, per test id, read as the client's view where no probe wrote."""
    malformed = _Count(on_malformed)
    rows = Rows(first_token_timeout)
    drops: list[Record] = []
    dropped = 0
    sources = Inputs(files)
    if watch is not None:
        watch(sources)
    with sources as inputs:
        fold = rows.fold if not words else _told(rows.fold, words)
        seen = PerTestId(fold, rows.restore, again=reread(files), warn=warn)
        for source in inputs:
            for record in records(source, malformed, test_id=only):
                boundary = record.envelope["boundary"]
                if boundary.startswith("cvdiag."):  # accounting: not a test's story
                    if boundary == DROPPED:
                        count = record.envelope["metadata"].get("dropped_count")
                        dropped += count if type(count) is int and count > 0 else 0
                        if len(drops) < MAX_DROP_REPORTS:
                            drops.append(record)
                    continue
                seen.add(record)
    folded = seen.finish()
    if only is not None:  # the first read kept only those test ids: the drop reports, apart
        with Inputs(files) as again:
            for source in again:
                source.numbered = False
                for record in records(source, _ignored, needle=DROPPED.encode()):
                    count = record.envelope["metadata"].get("dropped_count")
                    if record.envelope["boundary"] == DROPPED and len(drops) < MAX_DROP_REPORTS:
                        dropped += count if type(count) is int and count > 0 else 0
                        drops.append(record)
    drops.sort(key=_key)
    rows.drops_reported = dropped > 0
    failed: list[dict[str, Any]] = []
    healthy: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    try:
        for test_id, folded_row in folded.sorted_items():
            value = rows.row(test_id, folded_row)
            counts[value["flap_class"]] += 1
            group = healthy if value["flap_class"] == "healthy" else failed
            if len(group) < MAX_ROWS:
                group.append(value)
    finally:
        folded.close()
    listed = failed + healthy[: max(0, MAX_ROWS - len(failed))]
    wanted = [row for row in listed if row["test_id"] in draw]
    others = [row for row in listed if every or row["flap_class"] != "healthy"]
    drawn = [*wanted, *(row for row in others if row["test_id"] not in draw)][:max_details]
    stories = _stories(files, drawn, drops, first_token_timeout, words or {})
    for index, (drawn_row, story) in enumerate(zip(drawn, stories, strict=True)):
        drawn_row["detail"] = index
        was = drawn_row["flap_class"]
        if story.verdict.flap_class != was:  # the drop reports weighed, as classify does
            counts[was] -= 1
            counts[story.verdict.flap_class] += 1
            drawn_row["flap_class"] = story.verdict.flap_class
        drawn_row["caveat"] = story.verdict.caveat  # classify's, as the class is
    total = sum(counts.values())
    failing = total - counts["healthy"]
    return Report(
        sources=list(files),
        written=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        first_token_timeout=first_token_timeout,
        rows=listed,
        counts={name: counts[name] for name in (*CLASSES, *sorted(counts)) if counts[name]},
        test_ids=total,
        unlisted=total - len(listed),
        undrawn=max(0, (total if every else failing) - len(drawn)),
        stories=stories,
        dropped=dropped,
        malformed=malformed.count,
        every=every,
    )


def _told(fold: Fold[bytes], words: Words) -> Fold[bytes]:
    """``fold`` with the runner's words handed to each test id's facts first."""

    def told(order: int, slug: str, facts: Facts) -> bytes:
        tell(facts.join, words, facts.test_id)
        return fold(order, slug, facts)

    return told


def _stories(
    files: Sequence[str],
    drawn: list[dict[str, Any]],
    drops: list[Record],
    timeout: float,
    words: Words,
) -> list[Story]:
    """The second read: only the envelopes of the test ids drawn, merged in time order."""
    if not drawn:
        return []
    stories = {row["test_id"]: Story(row["test_id"]) for row in drawn}
    ids = frozenset(stories)
    with Inputs(files) as inputs:  # numbered: evidence names lines, as ``cvdiag classify`` does
        # Merged by time, as ``reading.merged`` merges: each input is in the order written.
        streams = [_drawn(source, ids) for source in inputs]
        ordered = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=_key)
        for record in ordered:
            if not record.envelope["boundary"].startswith("cvdiag."):
                stories[record.envelope["test_id"]].add(record)
    for story in stories.values():
        tell(story.facts.join, words, story.test_id)
        story.finish(drops, first_token_timeout=timeout)
    return [stories[row["test_id"]] for row in drawn]


#: What precedes a test id's value in an envelope written compactly (orjson, JSON.stringify).
_TEST_ID: Final = b'"test_id":"'


def _drawn(source: Input, ids: frozenset[str]) -> Iterator[Record]:
    r"""The envelopes of ``ids`` in one input, in file order, as ``records`` reads them.

    ``records`` reads one id as a bytes search, but several by parsing every envelope line,
    which was most of this read's time. Here a line is parsed only when its bytes leave a
    doubt that it is another test id's: it is skipped when ``"test_id"`` is in it once,
    followed by ``:"`` and a value (up to the next quote) not wanted, and it holds no
    backslash. Then, parsed, it is no envelope of theirs: if the object has the key written as
    is, that is the one occurrence, and its value the one seen; the only other way to write the
    key takes a ``\u`` escape; without the key it is no envelope. So the stories are those of
    parsing every line, for a few tenths of a microsecond a line, however many ids are drawn.
    """
    if len(ids) == 1:
        yield from records(source, _ignored, test_id=ids)
        return
    wanted = frozenset(test_id.encode() for test_id in ids)
    name = source.name
    loads, width = orjson.loads, len(_TEST_ID)
    for lineno, line in candidate_lines(source, MARKER):
        if line is None:
            continue
        # Inline, not a function: this runs for every envelope line of the log.
        at = line.find(_TEST_ID)
        if at >= 0 and b"\\" not in line and line.count(b'"test_id"') == 1:
            start = at + width
            if line[start : line.find(b'"', start)] not in wanted:
                continue
        # As ``reading.records`` reads a line; malformed ones were reported by the first read.
        text = split_envelope(line)[0]
        if text is None:
            continue
        try:
            value = loads(text)
        except orjson.JSONDecodeError:
            continue
        if shape_problem(value) is not None or value["test_id"] not in ids:
            continue
        key = ts_key(value["ts"])
        if key is not None:
            yield Record(name, lineno, text, value, (key, value["mono_ns"]))


class _Count:
    """Malformed lines: counted, and handed on to the caller's handler."""

    def __init__(self, then: Callable[[Malformed], None] | None) -> None:
        self.count = 0
        self._then = then

    def __call__(self, problem: Malformed) -> None:
        self.count += not problem.set_aside  # an envelope after other text is not malformed
        if self._then is not None:
            self._then(problem)


def _ignored(problem: Malformed) -> None:
    pass  # reported by the first read


def _key(record: Record) -> tuple[str, int]:
    return record.key
