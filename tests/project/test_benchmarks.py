"""The benchmarks keep running: each request and envelope benchmark runs at a tiny size and its
``--json`` names every variant it promises. Timings are not asserted (they are figures, see
docs/performance.md); what is asserted is that the run completes, every variant answered
(the scripts check each one's status and events first), and nothing was dropped."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.compiled import COMPILED

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

MIDDLEWARE = [
    "(a) bare app",
    "(b) cvdiag disabled",
    "(c) cvdiag default",
    "(d) cvdiag verbose",
    "(e) cvdiag debug",
    "(f) OTel asgi",
    "(g) verbose + OTel bridge",
    "(h) floor, async wrapper",
    "(i) floor, plain wrapper",
]
AGUI = [
    "bare app",
    "cvdiag disabled",
    "cvdiag default",
    "cvdiag verbose",
    "cvdiag debug",
    "OTel asgi",
]
SERVER = ["bare", "off", "default", "verbose", "debug", "floor", "correlation", "accesslog", "otel"]
EMIT = [
    "orjson.dumps alone (floor)",
    "an empty call (the timer's own)",
    "public emit() → stdout sink",
    "request template → stdout sink",
    "uuid6.uuid7() (was cvdiag's)",
    "cvdiag.schema.ids.new_uuid7()",
]


#: The build the servers run: the one under test (a checkout holding the compiled build's
#: extensions, as CI's compiled stage runs from, is no pure build).
BUILD = "compiled" if COMPILED else "pure"


def run(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize(
    ("script", "names"),
    [("middleware.py", MIDDLEWARE), ("agui.py", AGUI)],
    ids=["middleware", "agui"],
)
def test_request_benchmark_runs(script: str, names: list[str]) -> None:
    result = run(script, "--rounds", "2", "--requests", "3")
    rows = result["variants"]
    assert [row["variant"] for row in rows] == names
    for row in rows:
        assert row["rounds"] == 2
        assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
        assert row["us_per_request"] > 0
    assert rows[0]["ratio"] == 1.0  # the bare app is the baseline of its own rounds
    assert result["envelopes_emitted"] > 0
    assert result["envelopes_dropped"] == 0
    assert result["spans_otel_asgi"] > 0  # OTel's middleware traced, on its own provider


def test_middleware_benchmark_bridge_traces_on_its_own_provider() -> None:
    result = run("middleware.py", "--rounds", "1", "--requests", "2")
    assert result["spans_otel_bridge"] > 0


def test_emit_benchmark_runs() -> None:
    result = run("emit.py", "--n", "200", "--rounds", "2")
    assert [row["variant"] for row in result["variants"]] == EMIT
    assert result["dropped"] == 0
    assert result["emitted"] > 0


def test_cli_many_ids_benchmark_runs(tmp_path: Path) -> None:
    """``benchmarks/cli.py --many-ids`` (its other mode writes a gigabyte: not run here)."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "cli.py"), "--many-ids", "300", "--dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "generated 300 test ids" in done.stdout
    for name in ("cvdiag ls --json", "cvdiag stats --by-class", "baseline: python json.loads"):
        assert f"\n{name} " in done.stdout
    assert list(tmp_path.iterdir()) == []  # the log is removed


def test_compare_benchmark_runs(tmp_path: Path) -> None:
    """``benchmarks/compare.py`` at a tiny size: every command it holds flakes and diff to."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "compare.py"), "--size-mb", "1", "--runs", "3",
         "--run-mb", "1", "--repeat", "1", "--dir", str(tmp_path), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert list(figures["flakes"]) == ["read once (json.loads)", "cvdiag ls", "cvdiag flakes"]
    assert list(figures["diff"]) == ["cvdiag ls", "cvdiag diff"]
    for figure in [*figures["flakes"].values(), *figures["diff"].values()]:
        assert figure["cpu_seconds"] > 0
        assert figure["peak_mb"] > 0
    assert list(tmp_path.iterdir()) == []  # the logs are removed


@pytest.mark.skipif(
    shutil.which("wrk") is None, reason="no wrk: apt-get install wrk (.ci/run installs it)"
)
def test_server_benchmark_runs() -> None:
    """``benchmarks/server.py``, the figure of record, at its tiny size: every variant served by
    a real uvicorn under wrk on the agent route (a POST through wrk's script), each answering
    2xx (the script stops on anything else) and cvdiag's tiers writing their lines, uvicorn's
    access log its one per request."""
    result = run(
        "server.py", "--rounds", "1", "--seconds", "1", "--warmup", "0",
        "--connections", "4", "--routes", "agent", "--build", BUILD,
    )  # fmt: skip
    assert set(result["agent"]) == set(SERVER)
    for variant, row in result["agent"].items():
        assert row["cpu_us_per_request"] > 0, variant
        written = row["lines_per_request"]
        writes = variant in ("default", "verbose", "debug", "floor", "accesslog")
        assert (written > 0) == writes, (variant, written)
    # uvicorn's access log, the line users compare cvdiag with: one per request served. wrk counts
    # only the requests it saw answered; each of its 4 connections may have one more in flight
    # when a round stops, which the server still answers and logs (up to 4 rounds: one measured,
    # three more where a starved machine answered none).
    access = result["agent"]["accesslog"]
    assert access["served"] <= access["lines"] <= access["served"] + 4 * 4


def test_log_volume_counts_every_tiers_lines() -> None:
    """``benchmarks/log_volume.py``, whose table docs/production.md quotes: each request writes
    lines at every tier, a larger tier never fewer, and the debug tier one per SSE event."""
    result = run("log_volume.py", "--n", "1")
    assert set(result) == {"json", "sse", "agent"}
    for name, by_tier in result.items():
        lines = [by_tier[tier]["lines"] for tier in ("default", "verbose", "debug")]
        assert 0 < lines[0] <= lines[1] <= lines[2], name
        assert all(by_tier[tier]["bytes"] > 300 * by_tier[tier]["lines"] for tier in by_tier)
    assert result["sse"]["debug"]["lines"] == result["sse"]["verbose"]["lines"] + 20


@pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="no valgrind: apt-get install valgrind"
)
def test_server_instructions_benchmark_runs() -> None:
    """``benchmarks/server_instructions.py`` at its tiny size: the default tier's server and the
    bare app's, each under callgrind once (``--once``), every request answered 200 (the client
    stops on anything else). Only the requests are counted: the server's start-up, over half a
    billion instructions (some 50 million a request at this size, when it was counted), runs with
    counting off, so a bare request counts a few hundred thousand, and the default tier's more."""
    result = run(
        "server_instructions.py", "--requests", "12", "--only", "default", "--routes", "json",
        "--once", "--builds", BUILD,
    )  # fmt: skip
    rows = result["json"]
    assert set(rows) == {"bare", "default"}
    assert 0 < rows["bare"]["instructions"] < 10_000_000
    assert rows["default"]["instructions"] > rows["bare"]["instructions"]


def test_the_server_benchmark_never_measures_a_server_that_took_its_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A free port is only free until someone binds it: with another suite beside it, the
    benchmark once picked a port another server took first, connected to that server and sent
    it its load. Here the first port handed out is another server's: the benchmark's own server
    cannot bind it, is started again on a port of its own, and that is the one it answers on."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import server as bench  # type: ignore[import-not-found]  # benchmarks/ is not a package

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken.settimeout(0.1)
        stop = threading.Event()
        threading.Thread(target=_answer_as_another_server, args=(taken, stop), daemon=True).start()
        ports = iter([taken.getsockname()[1]])
        real = bench._free_port
        monkeypatch.setattr(bench, "_free_port", lambda: next(ports, None) or real())
        started = bench.Server("bare", tmp_path, build=BUILD)
        try:
            assert started.port != taken.getsockname()[1]
            with socket.create_connection(("127.0.0.1", started.port)) as sock:
                sock.sendall(b"GET /whoami HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
                answer = b""
                while chunk := sock.recv(4096):
                    answer += chunk
            assert answer.endswith(started.token.encode())
        finally:
            stop.set()
            started.stop()


_OTHER_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nother"


def _answer_as_another_server(listening: socket.socket, stop: threading.Event) -> None:
    """Answer every request on ``listening`` as a server other than the benchmark's does, until
    ``stop``: promptly, and without the benchmark's token."""
    while not stop.is_set():
        try:
            conn, _ = listening.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(4096)
                conn.sendall(_OTHER_ANSWER)
            except OSError:
                pass
