"""The probe's tests share: a probe writer on a file of the test's, installed for the test and
taken away after it; the backend run by uvicorn in a process of its own; and the probe's lines
read back, each one checked against the published v1 schema and cvdiag's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# httpx and httpx2 import their transports' cores lazily, at a client's first connection. A
# pytester session run in this process before these tests (tests/pytest_plugin) would import
# them inside its own run and take them out of sys.modules when it ends; the clients here would
# then meet a second copy whose exceptions the transports no longer map (a raw
# httpcore.ConnectError instead of httpx.ConnectError). Imported at collection, they stay.
import httpcore  # noqa: F401
import httpcore2  # noqa: F401
import orjson
import pytest

from cvdiag.probe import ProbeWriter, install, uninstall
from cvdiag.schema.vocabulary import Tier
from tests.schema_check import assert_valid

ROOT = Path(__file__).resolve().parents[2]


class Probe:
    """A writer installed for one test; ``lines()`` flushes it and reads its file back."""

    def __init__(self, path: Path, tier: Tier) -> None:
        self.path = path
        self.writer = ProbeWriter(path, tier=tier)
        install(self.writer)
        self.writer.begin_test("tests/probe::a test")

    def end(self, outcome: str = "passed") -> None:
        if self.writer.active:
            self.writer.end_test(outcome)

    def lines(self) -> list[dict[str, Any]]:
        self.writer.flush()
        found: list[dict[str, Any]] = []
        if not self.path.exists():  # nothing written: the file is made by the first line
            return found
        for raw in self.path.read_bytes().splitlines():
            assert raw.startswith(b"CVDIAG "), raw
            envelope = orjson.loads(raw[len(b"CVDIAG ") :])
            assert_valid(envelope)
            found.append(envelope)
        return found

    def of(self, boundary: str) -> list[dict[str, Any]]:
        return [env for env in self.lines() if env["boundary"] == boundary]


@pytest.fixture
def probe(tmp_path: Path) -> Iterator[Probe]:
    made = Probe(tmp_path / "probe.log", Tier.VERBOSE)
    yield made
    uninstall()
    made.writer.close()


@pytest.fixture
def debug_probe(tmp_path: Path) -> Iterator[Probe]:
    made = Probe(tmp_path / "probe.log", Tier.DEBUG)
    yield made
    uninstall()
    made.writer.close()


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``tests.support.probe_backend`` under uvicorn in its own process: its URL and its log."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path_factory.mktemp("backend") / "backend.log"
    env = {**os.environ, "CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_VERBOSE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "tests.support.probe_backend:app",
             "--port", str(port), "--log-level", "warning"],
            stdout=out, env=env, cwd=ROOT,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, "the backend exited"
            assert time.monotonic() < deadline, "the backend never listened"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", log
    process.terminate()
    process.wait(timeout=60)


def free_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
