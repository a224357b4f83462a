"""A test of a run and its attempts: what each attempt forwarded (its test ids), how it ended,
what its runner said about a failure; the test's outcome over its attempts, and the headline
that counts tests, never test ids, by outcome."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import Final

from cvdiag.scrubbing.redact import scrub_text

#: The outcomes of a test, in the headline's order: a failure first, what hides one next.
OUTCOMES: Final = ("failed", "flaky", "passed", "skipped")
#: Characters of a runner's failure text kept per attempt (its head: the message comes first).
FAILURE_MAX: Final = 4000
#: Test ids kept per attempt: a test that forwards a fresh id per request still fits the page.
IDS_MAX: Final = 50
#: Attempts kept per test (a runner's retries are a handful; a bad file could claim millions).
ATTEMPTS_MAX: Final = 20


@dataclasses.dataclass(slots=True)
class Attempt:
    """One run of a test: ``passed``, ``failed`` or ``skipped``."""

    outcome: str
    test_ids: list[str] = dataclasses.field(default_factory=list)
    #: The runner's failure text, scrubbed and bounded (``failure_text``); empty when it passed.
    failure: str = ""


@dataclasses.dataclass(slots=True)
class Case:
    """One test (a pytest node id, a JUnit testcase) and its attempts, in the order they ran."""

    name: str
    attempts: list[Attempt] = dataclasses.field(default_factory=list)
    #: The run it is from (the JUnit file that names it; empty for the pytest session's own).
    run: str = ""

    @property
    def outcome(self) -> str:
        """``failed``, ``flaky`` (failed, then passed on a retry), ``passed`` or ``skipped``:
        the last attempt decides, and a failure before a pass makes it flaky."""
        if not self.attempts:
            return "skipped"
        last = self.attempts[-1].outcome
        if last == "passed" and any(attempt.outcome == "failed" for attempt in self.attempts):
            return "flaky"
        return last

    def test_ids(self) -> list[str]:
        """Every attempt's test ids, in order, each once."""
        return list(dict.fromkeys(i for attempt in self.attempts for i in attempt.test_ids))


def failure_text(text: str) -> str:
    """A runner's failure text as a page may show it: secrets redacted, at most ``FAILURE_MAX``
    characters. Scrubbed before it is cut, so a credential is never split into a part no rule
    recognises."""
    return scrub_text(text, FAILURE_MAX) if text else ""


def headline(cases: Iterable[Case]) -> str:
    """``1 failed, 1 flaky, 4 passed``: tests by outcome, those with none left out. Given
    several runs (JUnit files that name a test more than once), each test is counted once, by
    its outcome over the runs: ``3 tests in 5 runs: 1 failed, 1 flaky, 1 passed``."""
    cases = list(cases)
    runs = {case.run for case in cases}
    by_name: dict[str, list[str]] = {}
    for case in cases:
        by_name.setdefault(case.name, []).append(case.outcome)
    # Several files of one run (a Playwright, a vitest and a Jest file) name no test twice.
    several = len(runs) > 1 and len(by_name) < len(cases)
    if several:
        counts = Counter(over_runs(outcomes) for outcomes in by_name.values())
    else:
        counts = Counter(case.outcome for case in cases)
    parts = [f"{counts[name]} {name}" for name in OUTCOMES if counts[name]]
    shown = ", ".join(parts) if parts else "no tests"
    if not several:
        return shown
    tests = sum(counts.values())
    return f"{tests} test{'' if tests == 1 else 's'} in {len(runs)} runs: {shown}"


def over_runs(outcomes: Iterable[str]) -> str:
    """A test's outcome over several runs: ``failed`` in every run it ran, ``flaky`` when it
    failed (or was flaky) in some, ``passed`` in every one, ``skipped`` when it never ran."""
    ran = [outcome for outcome in outcomes if outcome != "skipped"]
    if not ran:
        return "skipped"
    if all(outcome == "failed" for outcome in ran):
        return "failed"
    return "flaky" if any(outcome in ("failed", "flaky") for outcome in ran) else "passed"


def drawn_ids(cases: Iterable[Case]) -> frozenset[str]:
    """The test ids whose stories a page draws whatever their class: every attempt's of each
    failed or flaky test (a flaky test's passing attempt is the one to compare with)."""
    return frozenset(
        test_id
        for case in cases
        if case.outcome in ("failed", "flaky")
        for test_id in case.test_ids()
    )


def labels(cases: Iterable[Case]) -> dict[str, str]:
    """Test id → the test that forwarded it, its outcome and, when it ran more than once, the
    attempt: ``test_chat.py::test_stream (flaky, attempt 1 of 2: failed)``. A test id several
    tests forwarded is labelled with the first."""
    named: dict[str, str] = {}
    for case in cases:
        count = len(case.attempts)
        for number, attempt in enumerate(case.attempts, 1):
            which = f", attempt {number} of {count}: {attempt.outcome}" if count > 1 else ""
            for test_id in attempt.test_ids:
                named.setdefault(test_id, f"{case.name} ({case.outcome}{which})")
    return named
