"""Whether an attempt passed, for ``flakes`` without JUnit, is the probe's word when a probe
wrote one (issue 45; the real Playwright run read a passing page with Chromium's favicon 404,
and one left on purpose, as failures, and the page that rendered nothing as a pass)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import cvdiag
from tests.support.client_stories import Planted, left_early, page, runner_crash
from tests.support.probes import write

CASES: dict[str, tuple[Callable[[], Planted], int, int]] = {
    # name: the planting, failures with the probe's lines, failures from the backend's alone
    "a stream left on purpose by a test that passed": (left_early, 0, 1),
    "a page that rendered nothing after a healthy backend": (lambda: page("hydration"), 1, 0),
    "a runner that died mid-request": (runner_crash, 1, 1),
}


def _failures(*files: Path) -> int:
    done = cvdiag("flakes", "--json", *map(str, files))
    assert done.returncode in (0, 1), done.stderr
    [test] = json.loads(done.stdout)
    return int(test["failures"])


@pytest.mark.parametrize("name", list(CASES))
def test_the_probes_exit_says_whether_the_attempt_passed(name: str, tmp_path: Path) -> None:
    plant, with_probe, backend_alone = CASES[name]
    story, probe = plant()
    assert probe is not None
    write(tmp_path / "backend.log", story)
    write(tmp_path / "probe.log", probe)
    assert _failures(tmp_path / "backend.log", tmp_path / "probe.log") == with_probe
    # A backend-only log is judged as before: by how its requests and calls ended.
    assert _failures(tmp_path / "backend.log") == backend_alone
