"""The Playwright fixture (``cvdiag.ts``), shipped with the package: what a Playwright test saw
(its requests, the page's SSE events, first token and console errors, how it ended) written as
CVDIAG v1 ``probe`` lines. A TypeScript file Playwright runs as it is, with no dependency but
``@playwright/test``; this module only finds it and hands it out (docs/ci.md, "Playwright").
"""

from __future__ import annotations

from importlib.resources import files

#: The fixture's file name inside this package, and the name docs/ci.md copies it to.
FIXTURE = "cvdiag.ts"


def fixture_text() -> str:
    """The fixture file's text, as installed with the package (a wheel or a checkout)."""
    return files(__name__).joinpath(FIXTURE).read_text(encoding="utf-8")


__all__ = ["FIXTURE", "fixture_text"]
