"""Real processes ending in every way a process ends, with envelopes still queued.

Shared by tests/reliability/test_lifecycle.py and benchmarks/reliability.py (which reports the
loss of ``os._exit`` without a flush).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from typing import IO

import httpx
import orjson

from tests.reliability.drivers import PREFIX, ROOT
from tests.support.servers import KEEP_SERVING

HOST = textwrap.dedent(
    """
    import os, signal, sys, time
    from cvdiag import Settings, configure, emit, flush

    # A suite started in the background (`cmd &` in a script) hands its children SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler: take it back.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    (sink,) = configure(Settings(enabled=True, queue_size={queue})).sinks
    for i in range({count}):
        emit("backend.error.caught", metadata={{"message_scrubbed": "line %d " % i + "x" * 200}})
    # Lines dropped so far because the pipe was full (counted, and reported once it drains).
    sys.stderr.write(f"emitted {{sink.dropped}}\\n")
    sys.stderr.flush()
    {tail}
    """
)

#: How each way of ending is brought about, after the host has emitted everything.
ENDINGS = {
    "sigterm": KEEP_SERVING,
    "sigint": KEEP_SERVING,
    "uncaught exception": "raise RuntimeError('host bug')",
    "sys.exit": "sys.exit(4)",
    "os._exit after flush()": "flush(); os._exit(3)",
    "os._exit without flush": "os._exit(3)",
}
SIGNALS = {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT}
#: Seconds a process may take to end once told to: far beyond the 5 s its exit flush may wait.
HANG = 60


@dataclass
class Ending:
    emitted: int
    dropped: int  # lines the full queue dropped before the ending (counted by the sink)
    written: int  # complete envelope lines on stdout (drop reports not included)
    partial: int  # a line cut short (only os._exit can do that)
    returncode: int
    stderr: bytes

    @property
    def lost_at_exit(self) -> int:
        """Lines neither written nor counted as dropped: what the ending itself cost."""
        return self.emitted - self.dropped - self.written


def parse(out: bytes) -> tuple[int, int]:
    """Complete envelope lines (drop reports aside), and lines cut short, in ``out``."""
    written = partial = 0
    for line in out.split(b"\n"):
        if not line:
            continue
        try:
            envelope = orjson.loads(line[len(PREFIX) :]) if line.startswith(PREFIX) else None
        except orjson.JSONDecodeError:
            envelope = None
        if envelope is None:
            partial += 1
        elif envelope["boundary"] != "cvdiag.queue_dropped":
            written += 1
    return written, partial


def end_a_host(ending: str, *, count: int, queue: int, read_while_running: bool) -> Ending:
    """Emit ``count`` envelopes in a fresh process, then end it as ``ending`` says.

    ``read_while_running=False``: nobody reads stdout until the process has been told to end,
    so most lines are still queued when it is.
    """
    code = HOST.format(count=count, queue=queue, tail=ENDINGS[ending])
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    out = bytearray()
    reader = _drain(proc.stdout, out)
    if read_while_running:
        reader.start()
    ready = proc.stderr.readline().split()
    assert ready[:1] == [b"emitted"], [*ready, proc.stderr.read()]
    dropped = int(ready[1])
    if ending in SIGNALS:
        proc.send_signal(SIGNALS[ending])
    if not read_while_running:
        # Not a synchronization: the ending is brought about while nobody reads, so that most
        # lines are still queued when it starts. Reading at once would only test less.
        time.sleep(0.3)
        reader.start()
    err = bytearray()
    errors = _drain(proc.stderr, err)
    errors.start()
    _wait_or_dump(proc, [reader, errors], err)
    written, partial = parse(bytes(out))
    return Ending(count, dropped, written, partial, proc.returncode, bytes(err))


def _drain(stream: IO[bytes], into: bytearray) -> threading.Thread:
    """A thread (not yet started) that reads ``stream`` to its end into ``into``."""

    def read() -> None:
        while chunk := os.read(stream.fileno(), 1 << 16):
            into.extend(chunk)

    return threading.Thread(target=read, daemon=True)


def _wait_or_dump(
    proc: subprocess.Popen[bytes], readers: list[threading.Thread], err: bytearray
) -> None:
    """Wait for the process and its pipes; a process still running after ``HANG`` seconds is
    aborted, so that ``-X faulthandler`` prints every thread's stack, and the test fails with it
    instead of hanging to its timeout."""
    try:
        proc.wait(HANG)
    except subprocess.TimeoutExpired as hung:
        proc.send_signal(signal.SIGABRT)
        proc.wait(10)
        for reader in readers:
            reader.join(10)
        stacks = bytes(err).decode(errors="replace")[-6000:]
        raise AssertionError(f"the process hung; its stacks:\n{stacks}") from hung
    for reader in readers:
        reader.join(HANG)


# --- uvicorn -----------------------------------------------------------------------------------


def end_uvicorn(sig: signal.Signals, requests: int) -> tuple[int, int, bytes]:
    """``CVDIAG_BACKEND_EMITTER=1 CVDIAG_VERBOSE=1 python -m uvicorn …``, ``requests`` requests
    while nobody reads its stdout, then ``sig``. Returns the requests whose ingress and
    completion both reached stdout, the process's return code, and its stderr."""
    env = {**os.environ, "CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_VERBOSE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "uvicorn", "tests.reliability.apps:app",
         "--port", "0", "--log-level", "info", "--no-access-log"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    url = None
    deadline = time.monotonic() + 30
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if found:
            url = found.group(1)
    assert url is not None, "uvicorn did not start"
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(requests):
            assert client.get("/plain", headers={"x-test-id": f"life-{i}"}).text == "hello"
    proc.send_signal(sig)
    time.sleep(0.3)  # uvicorn shuts down before anyone reads
    try:
        out, err = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired as hung:
        proc.send_signal(signal.SIGABRT)  # -X faulthandler: every thread's stack on stderr
        _, err = proc.communicate(timeout=10)
        stacks = err.decode(errors="replace")[-6000:]
        raise AssertionError(f"uvicorn hung; its stacks:\n{stacks}") from hung
    seen: dict[str, set[str]] = {}
    for raw in out.splitlines():
        envelope = orjson.loads(raw[len(PREFIX) :])
        seen.setdefault(envelope["test_id"], set()).add(envelope["boundary"])
    both = {"backend.request.ingress", "backend.response.complete"}
    told = sum(1 for i in range(requests) if seen.get(f"life-{i}") == both)
    return told, proc.returncode, err
