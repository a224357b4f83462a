from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cvdiag.pytest_plugin import EVENTS_KEY

pytest_plugins = ["pytester"]

# Reference data vendored from the CVDIAG v1 publication (see tests/data/README.md): the suite
# reads nothing outside the repository, so a fresh clone in an empty folder passes.
REFERENCE = Path(__file__).resolve().parent / "data"
#: CVDIAG v1's ``termination_kind`` values: the only ones cvdiag may write.
V1_TERMINATION_KINDS = frozenset({"rst", "timeout", "chunk_error", "fin_premature"})


@pytest.fixture(autouse=True)
def _wire_stays_v1(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test that captures (the plugin's ``cvdiag_events``, which users also get) holds the
    wire to CVDIAG v1's termination kinds, and to one type per field: every duration is whole
    milliseconds."""
    yield
    events = request.node.stash.get(EVENTS_KEY, None)
    if events is None:
        return
    for envelope in list(events.envelopes):
        metadata = envelope.get("metadata") or {}
        kind = metadata.get("termination_kind")
        assert kind is None or kind in V1_TERMINATION_KINDS, envelope
        for key, value in metadata.items():
            if key.endswith("_ms") or key.startswith("delta_ms"):
                assert value is None or type(value) is int, (key, envelope)


@pytest.fixture
def reference_dir() -> Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"vendored reference data not found at {REFERENCE}")
    return REFERENCE


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line naming the framework recipes (tests/test_frameworks.py) left out, and why; only
    when this run skipped some of them (a run that did not select them left nothing out)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not any(getattr(r, "nodeid", "").startswith("tests/test_frameworks.py") for r in skipped):
        return
    from tests.test_frameworks import RECIPES, missing

    left_out = {name: missing(name) for name in RECIPES}
    absent = sorted({dist for dists in left_out.values() for dist in dists})
    if absent:
        names = ", ".join(name for name, dists in left_out.items() if dists)
        terminalreporter.write_line(
            f"frameworks recipes skipped: {names} ({', '.join(absent)} not installed;"
            " pip install -e '.[frameworks]')"
        )
