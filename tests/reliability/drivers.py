"""Driving the apps: in-process ASGI calls, a uvicorn server process, and a load of clients.

Shared by the tests and by ``benchmarks/reliability.py``, so the figures in docs/reliability.md
come from the same code the assertions run on.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = b"CVDIAG "


# --- in-process ASGI -----------------------------------------------------------------------------


def http_scope(
    path: str = "/plain",
    headers: Sequence[tuple[bytes, bytes]] = (),
    *,
    method: str = "GET",
    query: bytes = b"",
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        # Any str a fuzzer makes, lone surrogates included, becomes some bytes.
        "raw_path": path.encode("utf-8", "surrogatepass"),
        "query_string": query,
        "root_path": "",
        "headers": list(headers),
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": dict(state or {}),
    }


async def call(
    app: Any,
    scope: dict[str, Any],
    *,
    body: bytes = b"",
    disconnect_after: int | None = None,
) -> tuple[list[dict[str, Any]], BaseException | None]:
    """Call an ASGI app in-process. Returns what it sent and what it raised (if anything).

    ``receive`` gives the body, then waits like a live client; with ``disconnect_after`` the
    client goes away once that many body messages were sent (``http.disconnect`` on receive,
    and the server's ``send`` raising ``OSError`` from then on, as uvicorn's does).
    """
    sent: list[dict[str, Any]] = []
    delivered = False
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if gone.is_set():
            raise OSError("client disconnected")
        sent.append(message)
        bodies = sum(m["type"] == "http.response.body" for m in sent)
        if disconnect_after is not None and bodies >= disconnect_after:
            gone.set()

    raised: BaseException | None = None
    try:
        await app(scope, receive, send)
    except Exception as exc:
        raised = exc
    return sent, raised


def answer(sent: list[dict[str, Any]], raised: BaseException | None) -> tuple[Any, ...]:
    """What a client sees of an exchange: status, headers, body, and the exception's type.

    The ``x-test-id`` header cvdiag echoes is left out (tests/asgi/test_echo.py pins it):
    the apps here never set it, so everything else must match the bare app's answer exactly."""
    status, headers, body = None, None, b""
    for message in sent:
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = tuple(
                tuple(pair) for pair in message.get("headers") or () if pair[0] != b"x-test-id"
            )
        elif message["type"] == "http.response.body":
            body += message.get("body", b"")
    return status, headers, body, type(raised).__name__ if raised is not None else None


@dataclass(frozen=True)
class Req:
    """One kind of request of the suite's mix."""

    name: str
    path: str
    query: bytes = b""
    method: str = "GET"
    body: bytes = b""
    disconnect_after: int | None = None


#: Streaming, aborted, failing (before and during the body) and ordinary requests.
MIX: tuple[Req, ...] = (
    Req("plain", "/plain"),
    Req("sse", "/sse/1", b"n=4&delay=0"),
    Req("sse-aborted", "/sse/2", b"n=6&delay=0", disconnect_after=2),
    Req("echo", "/echo/a/b", method="POST", body=b"x" * 100),
    Req("raises", "/raises", b"message=boom"),
    Req("sse-raises", "/sse-raises"),
)


async def exchange(
    app: Any, req: Req, headers: Sequence[tuple[bytes, bytes]] = ()
) -> tuple[Any, ...]:
    """Run one request of the mix in-process; what its client saw (see ``answer``)."""
    scope = http_scope(req.path, headers, method=req.method, query=req.query)
    sent, raised = await call(app, scope, body=req.body, disconnect_after=req.disconnect_after)
    return answer(sent, raised)


async def websocket_call(app: Any, path: str, texts: Sequence[str], close_code: int) -> list[Any]:
    """A WebSocket exchange in-process: send ``texts``, then close with ``close_code``."""
    scope = http_scope(path)
    scope.update(type="websocket", scheme="ws", subprotocols=[])
    incoming: list[dict[str, Any]] = [{"type": "websocket.connect"}]
    incoming += [{"type": "websocket.receive", "text": t} for t in texts]
    incoming.append({"type": "websocket.disconnect", "code": close_code})
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "websocket.disconnect", "code": 1006}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "websocket.accept":  # the echoed test id left out, as in answer()
            headers = [pair for pair in message.get("headers") or () if pair[0] != b"x-test-id"]
            message = {**message, "headers": headers}
        sent.append(message)

    await app(scope, receive, send)
    return sent


# --- a server process ----------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """A ``tests.reliability.apps`` server: its URL, its stdout (drained as it comes), stats."""

    proc: subprocess.Popen[bytes]
    url: str = ""
    stdout: bytearray = field(default_factory=bytearray)
    stderr: list[bytes] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def envelopes(self) -> list[dict[str, Any]]:
        return [
            orjson.loads(line[len(PREFIX) :])
            for line in bytes(self.stdout).splitlines()
            if line.startswith(PREFIX)
        ]


@contextmanager
def server_process(
    tier: str, *, env: dict[str, str] | None = None, stdout_file: str | None = None
) -> Iterator[ServerProcess]:
    """Run the app under uvicorn in its own process, its stdout a pipe this process reads (or,
    with ``stdout_file``, a file: then this process spends nothing on reading it)."""
    sink = open(stdout_file, "wb") if stdout_file else None  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.apps", "--tier", tier],
        stdout=sink or subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    server = ServerProcess(proc)
    assert proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    port_seen = threading.Event()

    def drain_stdout() -> None:
        if stdout is None:
            return
        while chunk := os.read(stdout.fileno(), 1 << 16):
            server.stdout += chunk

    def drain_stderr() -> None:
        for line in stderr:
            server.stderr.append(line)
            if line.startswith(b"PORT "):
                server.url = f"http://127.0.0.1:{int(line.split()[1])}"
                port_seen.set()
            elif line.startswith(b"STATS "):
                server.stats = orjson.loads(line[6:])

    readers = [threading.Thread(target=f, daemon=True) for f in (drain_stdout, drain_stderr)]
    for reader in readers:
        reader.start()
    try:
        if not port_seen.wait(30):
            raise RuntimeError(b"".join(server.stderr).decode("utf-8", "replace"))
        yield server
    finally:
        try:
            httpx.get(f"{server.url}/__shutdown", headers={"x-test-id": "shutdown"}, timeout=10)
        except httpx.HTTPError:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(10)
        if sink is not None:
            sink.close()
            with open(sink.name, "rb") as written:
                server.stdout += written.read()


# --- load --------------------------------------------------------------------------------------


@dataclass
class Result:
    index: int
    test_id: str
    disconnect_after: int | None  # SSE events read before closing; None: read to the end
    status: int = 0
    body: bytes = b""
    latency: float = 0.0  # seconds from sending the request to the end (or the close)
    error: str | None = None


def plan(n: int, share: float, events: int, seed: int) -> list[Result]:
    """``n`` requests; ``share`` of them close their stream after a random number of events."""
    rng = random.Random(seed)
    leaving = set(rng.sample(range(n), round(n * share)))
    return [
        Result(i, f"load-{i}", rng.randrange(events) if i in leaving else None) for i in range(n)
    ]


async def _one(client: Any, url: str, result: Result, events: int, delay: float) -> None:
    start = time.perf_counter()
    query = f"n={events}&delay={delay}"
    if result.disconnect_after is not None:
        # The server holds the rest of the stream until this client has left (it reads at least
        # one chunk first), so the stream is cut however fast the server and however busy this
        # process: no race between the two decides whether there is an abort to observe.
        query += f"&leave={max(result.disconnect_after, 1)}"
    try:
        async with client.stream(
            "GET",
            f"{url}/sse/{result.index}?{query}",
            headers={"x-test-id": result.test_id},
        ) as response:
            result.status = response.status_code
            seen = 0
            async for chunk in response.aiter_raw():
                result.body += chunk
                seen = result.body.count(b"\n\n")
                if result.disconnect_after is not None and seen >= result.disconnect_after:
                    break  # leaving the block closes the response early: a disconnect
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.latency = time.perf_counter() - start


async def run_load(
    url: str, results: Sequence[Result], *, events: int, delay: float = 0.002
) -> None:
    """All requests at once, alternating between an httpx and an httpx2 client."""
    limits = {"max_connections": None, "max_keepalive_connections": 0}
    timeout = 120.0
    async with (
        httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(**limits)) as one,
        httpx2.AsyncClient(timeout=timeout, limits=httpx2.Limits(**limits)) as two,
    ):
        await asyncio.gather(
            *(_one((one, two)[r.index % 2], url, r, events, delay) for r in results)
        )


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- memory ------------------------------------------------------------------------------------


def rss_bytes() -> int:
    """This process's resident set size, from /proc (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class MemoryRun:
    requests: int
    rss_after_warmup: int = 0
    rss_after: int = 0
    tasks_after: int = 0
    threads_after_warmup: int = 0
    threads_after: int = 0
    #: Threads alive at the end that were not alive after the warm-up: what the run left behind.
    #: (A count alone is not it: in a shared worker process a thread another test started, such
    #: as an idle anyio worker, may end meanwhile and hide one this run leaked.)
    threads_new: list[str] = field(default_factory=list)
    contexts_left: int = 0  # requests after which a cvdiag context was still set
    outstanding_calls: int = 0  # LLM calls the heartbeat scheduler still tracks
    heartbeat_heap: int = 0
    emitted: int = 0
    answered: dict[str, int] = field(default_factory=dict)

    @property
    def rss_growth(self) -> int:
        return self.rss_after - self.rss_after_warmup


async def _one_of_each(app: Any, i: int, run: MemoryRun) -> None:
    from cvdiag import current_context
    from cvdiag.scopes import current_llm_call

    kind = i % (len(MIX) + 2)
    headers = ((b"x-test-id", b"mem-%d" % i),)
    if kind < len(MIX):
        req = MIX[kind]
        await exchange(app, req, headers)
        name = req.name
    else:
        code = 1000 if kind == len(MIX) else 1006  # a clean close, then a dropped socket
        await websocket_call(app, "/ws", ["hello", "again"], code)
        name = f"websocket-{code}"
    run.answered[name] = run.answered.get(name, 0) + 1
    if current_context() is not None or current_llm_call() is not None:
        run.contexts_left += 1


async def memory_run(requests: int, warmup: int) -> MemoryRun:
    """``requests`` requests of every kind (streaming, aborted, failing, WebSocket) through the
    app with cvdiag at the debug tier, stdout at /dev/null; RSS and leftovers after a warm-up."""
    import gc

    from cvdiag import Settings, Tier, configure, flush
    from cvdiag.scopes.heartbeat import scheduler
    from tests.reliability.apps import build

    emitter = configure(
        Settings(
            enabled=True,
            tier=Tier.DEBUG,
            debug_max_envelopes=10**12,
            debug_max_seconds=1e12,
            heartbeat_interval=0.5,
        )
    )
    app = build()
    run = MemoryRun(requests)
    for i in range(warmup):
        await _one_of_each(app, i, run)
    flush(30)
    gc.collect()
    run.rss_after_warmup = rss_bytes()
    run.threads_after_warmup = threading.active_count()
    warm_threads = set(threading.enumerate())
    run.answered.clear()
    run.contexts_left = 0
    for i in range(requests):
        await _one_of_each(app, warmup + i, run)
    flush(30)
    await asyncio.sleep(0)
    gc.collect()
    run.rss_after = rss_bytes()
    run.tasks_after = len(asyncio.all_tasks())
    run.threads_after = threading.active_count()
    run.threads_new = [t.name for t in threading.enumerate() if t not in warm_threads]
    run.outstanding_calls = scheduler().outstanding
    run.heartbeat_heap = len(scheduler()._heap)
    run.emitted = emitter.emitted
    return run


def memory_run_with_devnull_stdout(requests: int, warmup: int) -> MemoryRun:
    devnull = open(os.devnull, "w")  # noqa: SIM115 - held for the run
    real, sys.stdout = sys.stdout, devnull
    try:
        return asyncio.run(memory_run(requests, warmup))
    finally:
        from cvdiag import MemorySink, Settings, configure

        configure(Settings(), sinks=[MemorySink()])
        sys.stdout = real
        devnull.close()
