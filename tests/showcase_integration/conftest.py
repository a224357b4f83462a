"""This folder is laid out as a showcase integration is: ``agents/_cvdiag_backend.py`` and
``_shared/cvdiag_bootstrap.py``, each one line over ``cvdiag.showcase``. An integration's tests
put its root on ``sys.path`` so that ``agents`` and ``_shared`` import; so do these, but only
while this folder's test modules are imported: ``agents`` is also the OpenAI Agents SDK's name
(tests/e2e/test_frameworks.py and docs/frameworks.md import it), so the SDK's modules are set aside
for that moment and put back after. ``_shared`` stays imported, for a test that imports it late.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _agents_modules() -> dict[str, object]:
    return {
        name: module
        for name, module in sys.modules.items()
        if name == "agents" or name.startswith("agents.")
    }


@contextmanager
def _integration_importable() -> Iterator[None]:
    theirs = _agents_modules()
    for name in theirs:
        del sys.modules[name]
    sys.path.insert(0, str(HERE))
    try:
        importlib.import_module("_shared.cvdiag_bootstrap")
        yield
    finally:
        sys.path.remove(str(HERE))
        for name in _agents_modules():
            del sys.modules[name]
        sys.modules.update(theirs)  # type: ignore[arg-type]


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    if isinstance(collector, pytest.Module) and collector.path.parent == HERE:
        with _integration_importable():
            return (yield)
    return (yield)


@pytest.fixture(autouse=True)
def _no_face_left_behind() -> Iterator[None]:
    """The face installs its emitter process-wide (as the showcase's bootstrap is process-wide):
    after each test the next starts from the environment's again, with no emitter of the face's
    in force for the tests that share this worker."""
    yield
    import cvdiag.showcase.bootstrap as bootstrap
    from cvdiag import MemorySink, Settings, configure

    bootstrap.setup(None)
    bootstrap.forget()
    configure(Settings(), sinks=[MemorySink()])
