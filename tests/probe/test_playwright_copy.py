"""``python -m cvdiag.probe.playwright``: the fixture file handed out as the package holds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cvdiag.probe.playwright import FIXTURE, fixture_text
from cvdiag.probe.playwright.__main__ import main

SHIPPED = Path(__file__).resolve().parents[2] / "cvdiag" / "probe" / "playwright" / FIXTURE


def test_printed_as_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert capsys.readouterr().out == SHIPPED.read_text(encoding="utf-8") == fixture_text()


def test_copied_into_a_project_its_folder_made(tmp_path: Path) -> None:
    target = tmp_path / "e2e" / "tests" / "cvdiag.ts"
    assert main([str(target)]) == 0
    assert target.read_text(encoding="utf-8") == fixture_text()
    assert 'from "@playwright/test"' in fixture_text()


def test_a_wrong_call_says_how(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--help"]) == 2
    assert main(["a", "b"]) == 2
    assert "usage: python -m cvdiag.probe.playwright [PATH]" in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main([str(blocked / "cvdiag.ts")]) == 1  # a folder that is a file: one line, no trace
    assert capsys.readouterr().err.startswith(f"cvdiag: cannot write {blocked / 'cvdiag.ts'}")
