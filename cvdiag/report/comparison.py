"""A drawn failure beside a passing attempt of the same test: which passing test id to compare it
with, the comparison (``cvdiag diff``'s), and the block a section shows.

The passing attempt is the same test's (JUnit: a flaky test's passed attempt, or a passed
attempt of a test that failed in another run), else the first healthy test id with the same
stable part (``d4-chat-run3`` beside ``d4-chat-run1``). The stories are read once more, only
their lines: at most one pair per drawn failure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from cvdiag.compare.diff import Comparison, compare
from cvdiag.compare.flakes import stable_part
from cvdiag.compare.story import Story, said
from cvdiag.logs.reading import Inputs, Malformed, merged
from cvdiag.report.gather import Report
from cvdiag.report.lanes import Mark, Waterfall
from cvdiag.report.markup import WIDEST, cut, text
from cvdiag.runs import Case

#: Differences a section lists under the first split.
SHOWN: Final = 12
#: Characters of a split sentence or a value shown.
TEXT_MAX: Final = 400
#: The most a block takes: every text from a log cut, then escaped (at most ``WIDEST`` each).
BLOCK_MAX: Final = 1000 + WIDEST * (2 * TEXT_MAX + 128 + SHOWN * (3 * 120 + 60 + 30))


def passing_attempts(
    failed: Iterable[str], rows: Sequence[dict[str, Any]], cases: Sequence[Case]
) -> dict[str, str]:
    """Each failed test id that has a passing attempt, with that attempt's test id."""
    by_case: dict[str, str] = {}
    for case in cases:
        passed = next(
            (a.test_ids[0] for a in case.attempts if a.outcome == "passed" and a.test_ids), None
        )
        if passed is None:
            continue
        for attempt in case.attempts:
            if attempt.outcome == "failed":
                by_case.update((test_id, passed) for test_id in attempt.test_ids)
    healthy: dict[str, str] = {}
    for row in rows:
        if row["flap_class"] == "healthy":
            healthy.setdefault(stable_part(row["test_id"]), row["test_id"])
    found: dict[str, str] = {}
    for test_id in failed:
        other = by_case.get(test_id) or healthy.get(stable_part(test_id))
        if other is not None and other != test_id:
            found[test_id] = other
    return found


def comparisons(
    files: Sequence[str], pairs: dict[str, str], *, first_token_timeout: float
) -> dict[str, Comparison]:
    """The comparison of each failed test id with its passing attempt, read in one pass."""
    if not pairs:
        return {}
    stories: dict[str, Story] = {i: Story(i) for i in {*pairs, *pairs.values()}}
    with Inputs(files) as inputs:
        for source in inputs:
            source.numbered = False
        for record in merged(inputs, _ignored, test_id=frozenset(stories)):
            stories[record.envelope["test_id"]].add(record)
    found: dict[str, Comparison] = {}
    for failed, passed in pairs.items():
        one, two = stories[passed], stories[failed]
        if not (one.count and two.count):
            continue
        for story in (one, two):
            if not story.finished:  # a passing attempt may stand beside several failures
                story.finish(first_token_timeout=first_token_timeout)
        found[failed] = compare(one, two)
    return found


def attach(
    report: Report, files: Sequence[str], cases: Sequence[Case], *, first_token_timeout: float
) -> None:
    """``report.comparisons``: each drawn failure (a class other than healthy, or a failed
    attempt's test id) that has a passing attempt, compared with it."""
    failures = [s.test_id for s in report.stories if s.verdict.flap_class != "healthy"]
    failures += [i for c in cases for a in c.attempts if a.outcome == "failed" for i in a.test_ids]
    drawn = {story.test_id for story in report.stories}
    wanted = [test_id for test_id in dict.fromkeys(failures) if test_id in drawn]
    pairs = passing_attempts(wanted, report.rows, cases)
    report.comparisons = comparisons(files, pairs, first_token_timeout=first_token_timeout)


def _ignored(problem: Malformed) -> None:
    pass  # the first read reported the malformed lines


def mark(drawn: Waterfall, test_id: str, compared: Iterable[Comparison]) -> None:
    """The first split on ``test_id``'s waterfall, as the failure or as a passing attempt beside
    one: a mark on its top lane at the moment its story split from the other's."""
    for result in compared:
        for story, at in ((result.a, result.split_at[0]), (result.b, result.split_at[1])):
            if story.test_id != test_id or at is None or not drawn.lanes:
                continue
            other = result.b if story is result.a else result.a
            label = f"first split from {cut(other.test_id, 128)}: {cut(result.split or '', 300)}"
            drawn.lanes[0].marks.insert(0, Mark(at, "split", label))
            return


def block(result: Comparison, anchor: Callable[[str], str | None]) -> str:
    """The section's "compared with a passing attempt" block."""
    passed = result.a.test_id
    link = anchor(passed)
    name = text(passed, 128)
    shown = f'<a href="#{link}">{name}</a>' if link else name
    parts = [f'<div class="compared"><h3>Compared with a passing attempt: {shown}</h3>']
    if result.same:
        parts.append("<p>Same story, by structure: what failed is not in the backend's log.</p>")
    else:
        if result.shared:
            parts.append(f"<p>Both reached {text(' → '.join(result.shared), TEXT_MAX)}.</p>")
        parts.append(f'<p class="split">First split: {text(result.split or "", TEXT_MAX)}</p>')
        parts.append("<ul>")
        for item in result.differences[:SHOWN]:
            parts.append(
                f"<li>+{text(format(item.at_ms, '.0f'), 30)} ms {text(item.where, 120)}"
                f" {text(item.what, 60)}:"
                f" {text(said(item.a), 120)} → {text(said(item.b), 120)}</li>"
            )
        parts.append("</ul>")
    parts.append("</div>")
    return "".join(parts)
