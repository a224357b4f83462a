"""The page's tests: each test of the run (pytest's, or a JUnit file's) with its outcome, its
failure text and every attempt's test ids, each linked to its story and shown with its class.

A test's outcome is its runner's; the class beside each test id is cvdiag's, and never changes
the outcome: a test that asserts a 500 passed, and its request is ``backend-error``. Failed and
flaky tests come first, drawn whole; passed and skipped ones are listed too when the page
draws every test id (``--all``), up to ``MAX_CASES`` in all. The headline counts them all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Final

from cvdiag.report.markup import WIDEST, attr, text
from cvdiag.report.style import badge
from cvdiag.runs.cases import ATTEMPTS_MAX, FAILURE_MAX, IDS_MAX, Case

if TYPE_CHECKING:
    from cvdiag.report.gather import Report

#: Tests listed on a page: past them, a note counts the rest.
MAX_CASES: Final = 2000
#: Characters of a test's name shown (a long node id wraps, it is never cut short).
NAME_SHOWN: Final = 500
#: Characters of one test id (as the overview shows them).
ID_SHOWN: Final = 256
#: The order tests are listed in: what needs reading first.
ORDER: Final = {"failed": 0, "flaky": 1, "passed": 2, "skipped": 3}
_ID_MAX: Final = 200 + WIDEST * 2 * ID_SHOWN
#: The most one test's entry takes, whatever its runner wrote.
CASE_MAX: Final = (
    700 + 2 * WIDEST * NAME_SHOWN + ATTEMPTS_MAX * (200 + WIDEST * FAILURE_MAX + IDS_MAX * _ID_MAX)
)


def ordered(cases: Sequence[Case]) -> list[Case]:
    """What needs reading first: failed, flaky, passed, skipped. Given several runs (a test
    named in more than one JUnit file), the flakiest test first, its runs together."""
    rates = flake_rates(cases)
    if all(runs == 1 for _, runs in rates.values()):
        return sorted(cases, key=lambda case: ORDER.get(case.outcome, 4))
    return sorted(
        cases,
        key=lambda case: (
            -rates[case.name][0] / rates[case.name][1],
            case.name,
            ORDER.get(case.outcome, 4),
        ),
    )


def flake_rates(cases: Sequence[Case]) -> dict[str, tuple[int, int]]:
    """Per test name: the runs in which it failed or was flaky, and the runs it is in."""
    rates: dict[str, tuple[int, int]] = {}
    for case in cases:
        failing, runs = rates.get(case.name, (0, 0))
        rates[case.name] = (failing + (case.outcome in ("failed", "flaky")), runs + 1)
    return rates


def distinct(paths: Sequence[str]) -> dict[str, str]:
    """Each path as the page names it: its file name, or as many of its last folders as tell
    it from the others (``run-1/backend.log`` beside ``run-2/backend.log``)."""
    parts = {path: path.replace("\\", "/").split("/") for path in dict.fromkeys(paths)}
    named: dict[str, str] = {}
    for path, words in parts.items():
        for depth in range(1, len(words) + 1):
            name = "/".join(words[-depth:])
            others = ("/".join(w[-depth:]) for p, w in parts.items() if p != path)
            if name not in others:
                break
        named[path] = name
    return named


def render(report: Report) -> Iterator[str]:
    """The tests' section (nothing when the page knows no tests)."""
    if not report.cases:
        return
    anchors = {story.test_id: index for index, story in enumerate(report.stories)}
    classes = {row["test_id"]: row["flap_class"] for row in report.rows}
    wanted = ("failed", "flaky")
    cases = [c for c in ordered(report.cases) if report.every or c.outcome in wanted]
    yield '<section id="tests" aria-label="tests">\n<h2>Tests</h2>\n'
    if not cases:
        yield '<p class="note">no test failed</p>\n'
    yield '<ol class="cases">\n'
    rates = flake_rates(report.cases)
    runs = distinct([case.run for case in report.cases if case.run])
    for case in cases[:MAX_CASES]:
        run = runs.get(case.run, "") if rates[case.name][1] > 1 else ""  # one of several runs
        yield _case(case, anchors, classes, rates[case.name], run)
    yield "</ol>\n"
    if len(cases) > MAX_CASES:
        yield f'<p class="note">{len(cases) - MAX_CASES} more test(s) not listed</p>\n'
    yield "</section>\n"


def _case(
    case: Case,
    anchors: dict[str, int],
    classes: dict[str, str],
    rate: tuple[int, int],
    run: str = "",
) -> str:
    outcome = case.outcome
    failing, runs = rate
    said = [f"failed in {failing} of {runs} runs"] if runs > 1 else []
    said += [f"this run: {run}"] if run else []  # which run these attempts came from
    runs_shown = (
        f' <small class="rate">{text(" · ".join(said), NAME_SHOWN)}</small>' if said else ""
    )
    parts = [
        f"<li{attr('class', f'case o-{outcome}')}{attr('data-outcome', outcome)}>"
        f'<p class="case-head"><b class="outcome">{text(outcome)}</b>'
        f' <span class="name">{text(case.name, NAME_SHOWN)}</span>{runs_shown}</p>'
    ]
    whole = outcome in ("failed", "flaky")
    several = len(case.attempts) > 1
    for number, attempt in enumerate(case.attempts, 1):
        ids = ", ".join(_test_id(test_id, anchors, classes) for test_id in attempt.test_ids)
        head = f"attempt {number}: {text(attempt.outcome)} · " if several else ""
        parts.append(f'<p class="attempt">{head}{ids or "no test id recorded"}</p>')
        if whole and attempt.failure:
            parts.append(f'<pre class="failure">{text(attempt.failure, FAILURE_MAX)}</pre>')
    parts.append("</li>\n")
    return "".join(parts)


def _test_id(test_id: str, anchors: dict[str, int], classes: dict[str, str]) -> str:
    shown = f'<span class="id">{text(test_id, ID_SHOWN)}</span>'
    index = anchors.get(test_id)
    if index is not None:
        shown = f'<a href="#t{index}">{shown}</a>'
    flap_class = classes.get(test_id)
    if flap_class is None:
        return f"{shown} <small>(not in the log)</small>"
    return f"{shown} {badge(flap_class)}"
