"""CopilotKit's aimock, the real one from npm, served on loopback for a test module.

It is installed once into ``.cache/node-aimock/`` (ignored by git) at the version pinned here and
started as its README says (``llmock -p 0 -f FIXTURES``), which prints the port it bound. Where
node or npm is missing, or the registry cannot be reached, the tests that need it are skipped
with one line saying why.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import pytest

VERSION: Final = "1.43.0"
ROOT: Final = Path(__file__).resolve().parents[2]
CACHE: Final = ROOT / ".cache" / "node-aimock"
_BIN: Final = CACHE / "node_modules" / "@copilotkit" / "aimock" / "package.json"
_LISTENING: Final = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
#: How long an install and a start may take (the registry may be slow; node starts in < 1 s).
INSTALL_TIMEOUT_S: Final = 300.0
START_TIMEOUT_S: Final = 60.0


def installed() -> Path:
    """aimock's CLI script, installed if it is not; skips the test when it cannot be."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("aimock: node or npm is not installed")
    CACHE.mkdir(parents=True, exist_ok=True)
    # One install at a time: CI runs several interpreters' suites side by side on one checkout.
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _install(npm)
    package = json.loads(_BIN.read_text())
    return _BIN.parent / str(package["bin"]["llmock"])


def _install(npm: str) -> None:
    if not _version_ok():
        try:
            done = subprocess.run(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(CACHE),
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    f"@copilotkit/aimock@{VERSION}",
                ],
                capture_output=True,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"aimock: npm install failed ({exc})")
        if done.returncode != 0 or not _version_ok():
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
            pytest.skip(f"aimock: npm install failed (the registry?): {tail[0][:200]}")


def _version_ok() -> bool:
    try:
        return bool(json.loads(_BIN.read_text()).get("version") == VERSION)
    except (OSError, ValueError):
        return False


@contextmanager
def serve_aimock(fixtures: list[dict[str, Any]], folder: Path) -> Iterator[str]:
    """aimock serving ``fixtures`` on 127.0.0.1, a free port; its base URL."""
    script = installed()
    node = shutil.which("node")
    assert node is not None
    path = folder / "fixtures.json"
    path.write_text(json.dumps({"fixtures": fixtures}))
    process = subprocess.Popen(
        [node, str(script), "-p", "0", "-h", "127.0.0.1", "-f", str(path), "--log-level", "info"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1"},
    )
    found: list[str] = []
    seen: list[str] = []
    ready = threading.Event()

    def read() -> None:  # the whole output is drained, so the mock never blocks on its pipe
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace")
            if len(seen) < 50:
                seen.append(line)
            match = _LISTENING.search(line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not ready.wait(START_TIMEOUT_S) or not found:
            raise RuntimeError(f"aimock did not start: {''.join(seen)[-2000:]}")
        yield found[0]
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        reader.join(5)
