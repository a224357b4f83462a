"""Several worker processes on one stdout, as users deploy: gunicorn with four
``uvicorn.workers.UvicornWorker`` workers, or ``uvicorn --workers 4``, serving
tests/support/workers_app.py at the debug tier, with stdout a file, a pipe read at once, or a
pipe whose reader is deliberately slow; stopped with SIGTERM to the master.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx
import orjson

from tests.support.servers import _until_listening, free_port

ROOT = Path(__file__).resolve().parents[2]
Server = Literal["gunicorn", "uvicorn"]
#: ``file``: a regular file; ``pipe``: read as fast as it comes; ``slow``: read 4 KiB every
#: 20 ms; ``wedged``: nobody reads it while the load runs (it fills, and the workers must drop),
#: then it is read slowly while the workers shut down.
Stdout = Literal["file", "pipe", "slow", "wedged"]
_NOT_WRITTEN = re.compile(r"^cvdiag: (\d+) envelopes not written \((.*?)\)", re.MULTILINE)


@dataclass
class Run:
    out: bytes
    err: str
    #: The status each test id got, or 0 where the request failed (the server went away).
    statuses: dict[str, int] = field(default_factory=dict)
    #: What the client saw go wrong, per failed request.
    errors: list[str] = field(default_factory=list)

    def lines(self) -> list[bytes]:
        return [line for line in self.out.split(b"\n") if line]

    def envelopes(self) -> list[dict[str, object]]:
        return [orjson.loads(line[7:]) for line in self.lines() if line.startswith(b"CVDIAG ")]

    def torn(self) -> list[bytes]:
        """Lines holding cvdiag's prefix anywhere but at their start, or not parsing as JSON."""
        bad = []
        for line in self.lines():
            if line.find(b"CVDIAG ", 1) >= 0:
                bad.append(line)
            elif line.startswith(b"CVDIAG "):
                try:
                    orjson.loads(line[7:])
                except orjson.JSONDecodeError:
                    bad.append(line)
        return bad

    def not_written(self) -> int:
        """What the workers said on stderr they did not write, summed over the workers."""
        return sum(int(count) for count, _ in _NOT_WRITTEN.findall(self.err))


def run_workers(
    server: Server,
    stdout: Stdout,
    folder: Path,
    *,
    requests: int,
    app_lines: bool = False,
    queue_size: int = 5000,
    sigterm_mid_load: bool = False,
) -> Run:
    """Serve ``requests`` SSE requests, 32 at a time, then SIGTERM the master (mid-load with
    ``sigterm_mid_load``: once half have answered) and collect all it wrote."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_")}
    env.update(
        CVDIAG_BACKEND_EMITTER="1",
        CVDIAG_DEBUG="1",
        PYTHON_ENV="test",
        PYTHONUNBUFFERED="1",
        CVDIAG_QUEUE_SIZE=str(queue_size),
        # Short where the reader is slow, so that the bound is reached and what it leaves is
        # said; long where it keeps up, so that a busy machine cannot make it run out.
        CVDIAG_SHUTDOWN_FLUSH_SECONDS="2" if stdout in ("slow", "wedged") else "30",
        APP_LINES="1" if app_lines else "0",
    )
    app = "tests.support.workers_app:app"
    if server == "gunicorn":
        cmd = [sys.executable, "-m", "gunicorn", app, "-w", "4", "-b", f"127.0.0.1:{port}"]
        cmd += ["-k", "uvicorn.workers.UvicornWorker", "--graceful-timeout", "60"]
    else:
        cmd = [sys.executable, "-m", "uvicorn", app, "--workers", "4", "--port", str(port)]
        cmd += ["--log-level", "warning"]
    err_path = folder / "stderr"
    reader: _Reader | None = None
    errors: list[str] = []
    with open(err_path, "wb") as err:
        if stdout == "file":
            out_path = folder / "stdout"
            with open(out_path, "wb") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT)
        else:
            read_fd, write_fd = os.pipe()
            proc = subprocess.Popen(cmd, stdout=write_fd, stderr=err, env=env, cwd=ROOT)
            os.close(write_fd)
            reader = _Reader(read_fd, slow=stdout != "pipe", wedged=stdout == "wedged")
    try:
        _until_listening(port, server)
        half = (requests // 2) if sigterm_mid_load else None
        stop = functools.partial(proc.send_signal, signal.SIGTERM)
        statuses = asyncio.run(_load(port, requests, half, stop, errors))
        if reader is not None:
            reader.go.set()
        if not sigterm_mid_load:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out_bytes = reader.finish() if reader is not None else (folder / "stdout").read_bytes()
    return Run(out_bytes, err_path.read_text(errors="replace"), statuses, errors)


class _Reader:
    """Reads the pipe in a thread; a slow one takes 4 KiB every 20 ms, a wedged one waits for
    ``go`` first."""

    def __init__(self, fd: int, *, slow: bool, wedged: bool) -> None:
        self.fd = fd
        self.slow = slow
        self.go = threading.Event()
        if not wedged:
            self.go.set()
        self.data = bytearray()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        self.go.wait()
        while chunk := os.read(self.fd, 4096 if self.slow else 1 << 16):
            self.data += chunk
            if self.slow:
                time.sleep(0.02)  # the slowness itself, not a wait for anything
        os.close(self.fd)

    def finish(self) -> bytes:
        self.go.set()
        self.thread.join(120)
        return bytes(self.data)


async def _load(
    port: int, requests: int, half: int | None, stop: Callable[[], None], errors: list[str]
) -> dict[str, int]:
    statuses: dict[str, int] = {}
    gate = asyncio.Semaphore(32)
    # A connection per request: a kept-alive one the server closes as the client reuses it
    # (its keep-alive timeout passing on a busy machine) fails a request that never arrived.
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits) as client:

        async def one(i: int) -> None:
            test_id = f"w-{i:04d}"
            async with gate:
                try:
                    response = await client.get("/sse", headers={"x-test-id": test_id}, timeout=60)
                    statuses[test_id] = response.status_code
                except httpx.HTTPError as exc:
                    statuses[test_id] = 0
                    errors.append(f"{test_id}: {exc!r}")
            if half is not None and len(statuses) == half:
                stop()

        await asyncio.gather(*(one(i) for i in range(requests)))
    return statuses
