"""docs/architecture.md stays true: every module it names exists, and it names every module."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
#: Paths inside the package as the page writes them: `cvdiag/...` in backticks.
NAMED = re.compile(r"`(cvdiag/[A-Za-z0-9_/]+\.(?:py|json))`")


def named() -> set[str]:
    return set(NAMED.findall(PAGE.read_text(encoding="utf-8")))


def modules() -> set[str]:
    package = ROOT / "cvdiag"
    return {
        path.relative_to(ROOT).as_posix()
        for pattern in ("*.py", "*.json")
        for path in package.rglob(pattern)
    }


def test_every_module_the_page_names_exists() -> None:
    gone = sorted(named() - modules())
    assert not gone, f"docs/architecture.md names modules that are gone: {gone}"


def test_the_page_names_every_module() -> None:
    missing = sorted(modules() - named())
    assert not missing, f"docs/architecture.md does not say what these hold: {missing}"


def test_the_page_is_linked_from_the_docs_index() -> None:
    assert "(architecture.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
