from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cvdiag import MemorySink, Settings, configure
from cvdiag.schema import Tier

pytest_plugins = ["pytester"]

# Reference data vendored from the CVDIAG v1 publication (see tests/data/README.md): the suite
# reads nothing outside the repository, so a fresh clone in an empty folder passes.
REFERENCE = Path(__file__).resolve().parent / "data"


@pytest.fixture
def capture() -> Iterator[Callable[..., MemorySink]]:
    """``capture(tier="debug", **settings)``: enable the process-wide emitter into memory.

    The emitter is reset to disabled afterwards, so tests stay isolated.
    """

    def start(tier: Tier | str = Tier.DEBUG, **options: object) -> MemorySink:
        sink = MemorySink()
        configure(Settings(enabled=True, tier=tier, **options), sinks=[sink])  # type: ignore[arg-type]
        return sink

    yield start
    configure(Settings(), sinks=[MemorySink()])


@pytest.fixture
def reference_dir() -> Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"vendored reference data not found at {REFERENCE}")
    return REFERENCE
