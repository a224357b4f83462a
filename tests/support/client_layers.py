"""Reading the client's layer beside the backend's as a user does, for the end-to-end tests of
issue 45 (tests/e2e/test_client_layer_pytest.py, tests/probe/test_playwright.py): ``cvdiag
classify`` over the backend's log and the probe's log given as two files, and over one log
holding both; ``cvdiag report`` over them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.cli import cvdiag

_TS = re.compile(rb'"ts":"([^"]+)"')


def joined(backend: Path, probe: Path, into: Path) -> Path:
    """One log holding both layers, their lines interleaved by their wall-clock stamps as one
    file both wrote to would hold them (a line with no stamp, uvicorn's own, stays after the
    line before it)."""
    lines: list[tuple[bytes, int, bytes]] = []
    for number, path in enumerate((backend, probe)):
        key = b""
        for line in path.read_bytes().splitlines(keepends=True):
            found = _TS.search(line)
            key = found.group(1) if found else key
            lines.append((key, number, line))
    lines.sort(key=lambda item: (item[0], item[1]))  # stable: each file's order kept
    into.write_bytes(b"".join(line for _, _, line in lines))
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
