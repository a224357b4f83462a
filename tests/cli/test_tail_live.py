"""``uvicorn app:app | cvdiag tail``: a real server process piped into the live view."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def _wait_until_up(base: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/nowhere", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("the server never came up")


def test_tail_follows_a_live_server_pipe() -> None:
    port = free_port()
    env = {
        **os.environ,
        "CVDIAG_BACKEND_EMITTER": "1",
        "CVDIAG_VERBOSE": "1",
        "NO_COLOR": "1",
        "PYTHONUNBUFFERED": "1",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "examples.starlette_sse.app:app", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdout is not None
    viewer = subprocess.Popen(
        [sys.executable, "-m", "cvdiag", "tail"],
        stdin=server.stdout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    server.stdout.close()  # the viewer holds the pipe now
    assert viewer.stdout is not None
    seen: list[str] = []
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_until_up(base, time.monotonic() + 30)
        with httpx.stream(
            "GET", f"{base}/agent?prompt=hi", headers={"x-test-id": "live-1"}, timeout=10
        ) as response:
            assert response.status_code == 200
            for _ in response.iter_lines():
                pass
        # The viewer prints each line as it arrives: read until the request's terminal.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = viewer.stdout.readline().decode()
            if not line:
                break
            seen.append(line)
            if "live-1" in line and "complete" in line:
                break
    finally:
        server.terminate()
        server.wait(timeout=10)
        viewer.wait(timeout=10)  # the pipe closes with the server: tail ends by itself
    mine = [line for line in seen if "live-1" in line]
    assert any("ingress" in line for line in mine), seen
    assert any("llm.response" in line for line in mine), seen
    assert "complete" in mine[-1]
    assert not any(line.startswith("CVDIAG {") for line in seen)
    assert all(len(line) < 300 for line in mine)
    assert viewer.returncode == 0
