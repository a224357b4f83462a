"""Reading the client's layer beside the backend's as a user does, for the end-to-end tests of
issue 45 (tests/e2e/test_client_layer_pytest.py, tests/probe/test_playwright.py): ``cvdiag
classify`` over the backend's log and the probe's log given as two files, and over one log
holding both; ``cvdiag report`` over them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cli import cvdiag


def joined(backend: Path, probe: Path, into: Path) -> Path:
    """One log holding both layers: the probe's lines after the backend's, as a runner that
    appends to the backend's file would leave them (readers take any order)."""
    into.write_bytes(backend.read_bytes() + probe.read_bytes())
    return into


def verdicts(test_id: str, backend: Path, probe: Path, one: Path) -> list[dict[str, Any]]:
    """``classify --json`` for ``test_id`` over the two files, then over ``one`` (both in one
    log); each run must succeed."""
    found = []
    for files in ([str(backend), str(probe)], [str(one)]):
        done = cvdiag("classify", "--json", test_id, *files)
        assert done.returncode == 0, (files, done.stdout, done.stderr)
        found.append(json.loads(done.stdout))
    return found


def verdict(test_id: str, backend: Path, probe: Path, one: Path) -> dict[str, Any]:
    """The one verdict both ways of giving the layers agree on (class, reason and evidence)."""
    two_files, one_log = verdicts(test_id, backend, probe, one)
    for key in ("flap_class", "reason"):
        assert two_files[key] == one_log[key], (key, two_files[key], one_log[key])
    assert "probe" in text(two_files), two_files  # the verdict says it read the probe's layer
    return two_files


def text(found: dict[str, Any]) -> str:
    """A verdict's words: its reason, what it rests on and its evidence, as one string."""
    return json.dumps(found)


def report(*files: Path, into: Path) -> str:
    """``cvdiag report --all`` over ``files``: the page's text (the command must succeed)."""
    done = cvdiag("report", "--all", "-o", str(into), *map(str, files))
    assert done.returncode == 0, done.stderr
    return into.read_text(encoding="utf-8")
