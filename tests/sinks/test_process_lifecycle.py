"""Real processes: a stdout pipe nobody reads, and SIGTERM with envelopes still queued."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import orjson

from tests.support.servers import KEEP_SERVING

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HOST = textwrap.dedent(
    """
    import sys, time
    from cvdiag import Settings, configure, emit

    configure(Settings(enabled=True, queue_size={queue}))
    sys.stderr.write("ready\\n"); sys.stderr.flush()
    for i in range({count}):
        emit("backend.error.caught", metadata={{"message_scrubbed": "x" * 200 + str(i)}})
    # The host keeps serving: every emit above returned although stdout is not being read.
    sys.stderr.write("served\\n"); sys.stderr.flush()
    {tail}
    """
)


def spawn(count: int, queue: int, tail: str) -> subprocess.Popen[bytes]:
    code = HOST.format(count=count, queue=queue, tail=tail)
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )


def envelopes(raw: bytes) -> list[dict[str, object]]:
    return [orjson.loads(line[7:]) for line in raw.splitlines() if line.startswith(b"CVDIAG {")]


def test_unread_pipe_never_blocks_the_host_and_drops_are_accounted() -> None:
    # 64 KiB of pipe buffer holds ~130 of these lines; the queue holds 100 more; the rest drop.
    proc = spawn(count=5000, queue=100, tail=KEEP_SERVING)
    assert proc.stderr is not None
    assert proc.stdout is not None
    assert proc.stderr.readline() == b"ready\n"
    assert proc.stderr.readline() == b"served\n"  # printed while stdout is still unread
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # flushes what is queued, then ends the process
    out, _ = proc.communicate(timeout=30)
    envs = envelopes(out)
    reports = [e for e in envs if e["boundary"] == "cvdiag.queue_dropped"]
    written = [e for e in envs if e["boundary"] == "backend.error.caught"]
    dropped = sum(int(r["metadata"]["dropped_count"]) for r in reports)  # type: ignore[index,call-overload]
    assert reports, "the drop must be reported once the pipe drains"
    assert dropped > 0
    assert len(written) + dropped == 5000


def test_sigterm_writes_everything_queued() -> None:
    proc = spawn(count=3000, queue=5000, tail=KEEP_SERVING)
    assert proc.stderr is not None
    assert proc.stderr.readline() == b"ready\n"
    assert proc.stderr.readline() == b"served\n"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    written = [e for e in envelopes(out) if e["boundary"] == "backend.error.caught"]
    assert len(written) == 3000
    assert proc.returncode == -signal.SIGTERM  # the default disposition still ends it


def test_what_the_shutdown_bound_leaves_is_counted_and_said() -> None:
    # Nobody reads stdout until the process has ended: the writer waits for room at most the
    # shutdown bound, then counts what it left, and says so on stderr in one line.
    code = HOST.format(count=2000, queue=5000, tail="")
    code = code.replace("queue_size=5000", "queue_size=5000, shutdown_flush_seconds=0.2")
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    assert proc.stdout is not None
    err = proc.stderr.read()  # ends when the process does: stdout is still unread
    proc.wait(timeout=30)
    out = proc.stdout.read()
    written = [e for e in envelopes(out) if e["boundary"] == "backend.error.caught"]
    said = [line for line in err.decode().splitlines() if "not written" in line]
    left = 2000 - len(written)
    assert said == [f"cvdiag: {left} envelopes not written (reader too slow at shutdown)"]
    assert 0 < len(written) < 2000
    assert out.endswith(b"\n")  # the last line whole: the pipe took whole lines or nothing


def test_uncaught_exception_still_flushes() -> None:
    proc = spawn(count=2000, queue=5000, tail="raise RuntimeError('host bug')")
    out, err = proc.communicate(timeout=30)
    assert len(envelopes(out)) == 2000
    assert proc.returncode == 1
    assert b"RuntimeError: host bug" in err


UVICORN_HOST = textwrap.dedent(
    """
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from cvdiag import CvdiagMiddleware

    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    app.add_middleware(CvdiagMiddleware)
    uvicorn.run(app, host="127.0.0.1", port={port}, log_level="warning", access_log=False)
    """
)


def test_sigterm_under_uvicorn_writes_everything_queued() -> None:
    """uvicorn restores the handlers it found at startup and raises SIGTERM again after its
    graceful shutdown: cvdiag's handler must already be in place then, or the queue is lost."""
    import httpx

    from tests.support.servers import free_port

    port = free_port()
    env = {**os.environ, "CVDIAG_BACKEND_EMITTER": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", UVICORN_HOST.format(port=port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            while True:
                try:
                    client.get("/")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "uvicorn did not start"
                    time.sleep(0.05)
            for _ in range(299):  # stdout is not read meanwhile: lines pile up in the queue
                assert client.get("/").text == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
    # Nobody reads for a while: without cvdiag's handler in place, uvicorn's re-raised SIGTERM
    # ends the process with the queue unwritten before this reader even starts.
    time.sleep(0.5)
    out, _ = proc.communicate(timeout=30)
    complete = [e for e in envelopes(out) if e["boundary"] == "backend.response.complete"]
    assert len(complete) == 300
