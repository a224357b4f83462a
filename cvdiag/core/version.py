"""The package's version and its build: one place, read by the command's ``--version``, the
startup line on stderr and the OpenTelemetry bridge's instrumentation scope (pyproject.toml
says the same version; tests/project/test_packaging.py holds them equal).

The build is ``compiled`` where the request path came as mypyc extensions (the platform wheels
``pip install cvdiag`` picks where one exists, docs/installing.md) and ``pure Python`` anywhere
else (the ``py3-none-any`` wheel, a checkout). Told from the files, not by importing the request
path: ``cvdiag --version`` imports nothing it does not print.
"""

from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES

__version__ = "0.1.0"


def _compiled() -> bool:
    """Whether the request's context, compiled with the rest of the request path, is an
    extension here: Python imports an extension before a ``.py`` of the same name."""
    here = os.path.dirname(__file__)
    return any(os.path.exists(os.path.join(here, "context" + end)) for end in EXTENSION_SUFFIXES)


#: ``compiled`` or ``pure Python``: which request path this installation runs.
BUILD = "compiled" if _compiled() else "pure Python"
