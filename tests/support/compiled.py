"""Whether the request path under test is the compiled build (docs/production.md).

The compiled wheel keeps each module's ``.py`` beside its extension, and Python imports the
extension: a module is compiled when the file it came from is one. CI's compiled stage sets
``CVDIAG_EXPECT_COMPILED=1``, so that a run which meant to test the build cannot quietly test
the sources instead (tests/asgi/test_compiled.py).
"""

from __future__ import annotations

import importlib
import os
from importlib.machinery import EXTENSION_SUFFIXES

import pytest

#: The modules the build compiles (pyproject.toml's mypyc hook: its ``include``).
REQUEST_PATH = (
    "cvdiag.asgi.boundaries",
    "cvdiag.asgi.exchange",
    "cvdiag.asgi.headers",
    "cvdiag.asgi.http_exchange",
    "cvdiag.asgi.http_response",
    "cvdiag.asgi.lifespan",
    "cvdiag.asgi.look",
    "cvdiag.asgi.middleware",
    "cvdiag.asgi.sse",
    "cvdiag.asgi.sse_edges",
    "cvdiag.asgi.sse_parser",
    "cvdiag.asgi.tracing",
    "cvdiag.asgi.websocket_exchange",
    "cvdiag.core.context",
    "cvdiag.pipeline.budget",
    "cvdiag.pipeline.envelope",
    "cvdiag.pipeline.template",
    "cvdiag.pipeline.template_values",
    "cvdiag.schema.ids",
    "cvdiag.sinks.lane",
)
EXPECTED = os.environ.get("CVDIAG_EXPECT_COMPILED") == "1"


def compiled(name: str) -> bool:
    """Whether the module ``name`` was imported from a compiled extension."""
    origin = importlib.import_module(name).__file__ or ""
    return origin.endswith(tuple(EXTENSION_SUFFIXES))


COMPILED = compiled("cvdiag.asgi.http_exchange")

#: A test that replaces a module-level name of the request path at run time: compiled, a call
#: between compiled modules goes straight to the function or class, past the module's name.
patches_internals = pytest.mark.skipif(
    COMPILED, reason="patches the request path's internals, which compiled code calls directly"
)
