"""A testcase's attempts as its runner wrote them: which test ids, which failure text, which
outcome belongs to which attempt, whichever of its ways a runner took.

- **pytest** (pytest-rerunfailures): each attempt is a ``<testcase>`` of its own, the same
  name again; an attempt that was rerun has no ``<failure>`` (pytest's JUnit keeps none), so
  the plugin's ``cvdiag_failure`` property carries its failure text, and an earlier testcase of
  the same name in a pytest file is a failed attempt whatever it says.
- **Playwright** with ``includeRetries``: the retries as Surefire's children
  (``<flakyFailure>``...) each with its own output and stack trace; the testcase's own output is
  the last attempt's when the test passed at last (flaky), the first attempt's when it failed
  every time, and its properties (an annotation's id) always the last attempt's. Without
  ``includeRetries``: one testcase, the output of every attempt in order, and one
  ``<failure>`` telling each failed attempt after a ``Retry #N`` line.
- **vitest, Jest**: one testcase, the id lines of every attempt in its output.

An attempt with no id of its own but an ``x-test-id: <id>`` in its failure text (Playwright's
request call log prints the headers it sent) takes that id.
"""

from __future__ import annotations

import re
from typing import Final

from cvdiag.runs.cases import ATTEMPTS_MAX, IDS_MAX, Attempt, failure_text
from cvdiag.schema.ids import join_key

#: A header line a runner's failure text holds: the id the failed attempt sent.
HEADER_LINE: Final = re.compile(r"x-test-id:[ \t]*([^\s\"'<>,;]+)", re.IGNORECASE)
#: Where Playwright's failure text (``formatFailure``) starts a retry's errors.
RETRY_LINE: Final = re.compile(r"^[ \t]*Retry #(\d+)\b[^\n]*$", re.MULTILINE)


def sections(text: str) -> dict[int, str]:
    """A failure text cut per attempt (0-based) at Playwright's ``Retry #N`` lines; the text
    whole as attempt 0's when it has none."""
    found: dict[int, str] = {}
    start, number = 0, 0
    for match in RETRY_LINE.finditer(text):
        retry = int(match.group(1))
        if retry <= number or retry >= ATTEMPTS_MAX:
            continue  # out of order: a test's own text that merely says "Retry #"
        found[number] = text[start : match.start()].strip()
        start, number = match.end(), retry
    found[number] = text[start:].strip()
    return found


def header_ids(text: str) -> list[str]:
    """The ``x-test-id`` values a failure text shows, normalised as the middleware adopts them."""
    ids: list[str] = []
    for match in HEADER_LINE.finditer(text):
        test_id = join_key(match.group(1))
        if test_id is not None and test_id not in ids:
            ids.append(test_id)
    return ids[:IDS_MAX]


def spread(outcome: str, text: str, out_ids: list[str], prop_ids: list[str]) -> list[Attempt]:
    """One testcase without retry children: ``out_ids`` (output lines, one per attempt in the
    order run), ``prop_ids`` (properties: the last attempt's, or the only one's), ``text``
    (the final failure, perhaps telling every failed attempt after ``Retry #N`` lines)."""
    ids = [*out_ids, *(i for i in prop_ids if i not in out_ids)]
    parts = sections(text) if outcome == "failed" else {0: text}
    count = min(ATTEMPTS_MAX, max(len(ids), max(parts) + 1))
    if count <= 1:
        return [Attempt(outcome, ids[:IDS_MAX], failure_text(text))]
    attempts = [Attempt("failed") for _ in range(count - 1)]
    attempts.append(Attempt(outcome))
    if len(ids) >= count:  # one id line per attempt, in the order run
        for attempt, test_id in zip(attempts, ids[-count:], strict=True):
            attempt.test_ids = [test_id]
    else:  # the ids there are, the last attempt's last (a property is the last attempt's)
        attempts[-1].test_ids = ids[-1:]
        for attempt, test_id in zip(attempts[-len(ids) : -1], ids[:-1], strict=False):
            attempt.test_ids = [test_id]
    if len(parts) > 1:
        for number, part in parts.items():
            if number < count:
                attempts[number].failure = failure_text(part)
    else:
        attempts[-1].failure = failure_text(text) if outcome == "failed" else ""
    return from_headers(attempts)


def from_headers(attempts: list[Attempt]) -> list[Attempt]:
    """Each failed attempt without an id of its own takes the ``x-test-id`` its failure text
    shows, if it shows one that no other attempt has."""
    taken = {test_id for attempt in attempts for test_id in attempt.test_ids}
    for attempt in attempts:
        if attempt.outcome == "failed" and not attempt.test_ids and attempt.failure:
            found = [i for i in header_ids(attempt.failure) if i not in taken]
            attempt.test_ids = found
            taken.update(found)
    return attempts
