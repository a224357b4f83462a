"""This folder is laid out as a showcase integration is: ``agents/_cvdiag_backend.py`` and
``_shared/cvdiag_bootstrap.py``, each one line over ``cvdiag.showcase``. An integration's tests
put its root on ``sys.path`` so that ``agents`` and ``_shared`` import; so does this."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


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
