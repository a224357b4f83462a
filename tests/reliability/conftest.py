"""The reliability suite's scale and shared fixtures.

``CVDIAG_RELIABILITY_SCALE`` picks the size (tests/reliability/scale.py): ``fast``, the default,
is what CI runs inside the normal test run; ``full`` is the issue's numbers, which
``python benchmarks/reliability.py`` runs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cvdiag.core.guard import failures
from tests.reliability.scale import SCALE


def pytest_report_header() -> str:
    return f"cvdiag reliability scale: {SCALE.name}"


@pytest.fixture
def failure_counts() -> Callable[[], dict[str, int]]:
    """cvdiag's own failure counters since the test started, by kind."""
    before = dict(failures)

    def since() -> dict[str, int]:
        return {k: n - before.get(k, 0) for k, n in failures.items() if n != before.get(k, 0)}

    return since
