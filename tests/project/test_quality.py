"""The code stays typed (mypy --strict) and lint-clean (ruff): checked with the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def tool(name: str) -> str:
    path = BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it is part of the dev extra")
    return found


def test_ruff_check() -> None:
    result = run(tool("ruff"), "check", "cvdiag", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = run(tool("ruff"), "format", "--check", "cvdiag", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = run(tool("mypy"))
    assert result.returncode == 0, result.stdout + result.stderr


#: A user's app adding each of cvdiag's middleware classes as Starlette and FastAPI take one.
MIDDLEWARE_SNIPPET = """
from fastapi import FastAPI
from starlette.applications import Starlette

from cvdiag import CvdiagMiddleware
from cvdiag.showcase import CvdiagBackendMiddleware

api = FastAPI()
api.add_middleware(CvdiagMiddleware)
api.add_middleware(CvdiagMiddleware, slug="chat", exclude_paths=["/health"])
api.add_middleware(CvdiagBackendMiddleware)
api.add_middleware(CvdiagBackendMiddleware, slug="chat")
site = Starlette()
site.add_middleware(CvdiagMiddleware)
site.add_middleware(CvdiagBackendMiddleware, echo_test_id=False)
wrapped = CvdiagBackendMiddleware(CvdiagMiddleware(api))
"""


def test_every_middleware_class_passes_mypy_strict_in_add_middleware(tmp_path: Path) -> None:
    """Issue 47: ``app.add_middleware(CvdiagBackendMiddleware)`` failed ``mypy --strict``
    (its ``**options: Any`` matched no middleware factory) where ``CvdiagMiddleware`` passed."""
    snippet = tmp_path / "user_app.py"
    snippet.write_text(MIDDLEWARE_SNIPPET, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MYPYPATH": str(ROOT)},  # this checkout's cvdiag, not another
    )
    assert result.returncode == 0, result.stdout + result.stderr
