"""Test runs: the tests of a CI run, each with its outcome and its attempts (a rerun is one
more), and the test ids each attempt forwarded to the backend. ``cases`` holds the model and
the headline that counts tests by outcome; ``junit`` reads any runner's JUnit XML (pytest,
Playwright, vitest, Jest) into it, safely whatever the file holds. The report page draws them
beside the backend's stories; the pytest plugin builds them from its own reports.

Beside ``logs`` and ``diagnosis`` rather than inside them: it reads what test runners write, not
envelopes.

May import: cvdiag.schema, cvdiag.scrubbing.
"""

from __future__ import annotations

from cvdiag.runs.cases import Attempt, Case, drawn_ids, failure_text, headline, labels
from cvdiag.runs.junit import JUnitError, read_junit

__all__ = [
    "Attempt",
    "Case",
    "JUnitError",
    "drawn_ids",
    "failure_text",
    "headline",
    "labels",
    "read_junit",
]
