"""Real servers on 127.0.0.1 for end-to-end tests: uvicorn (and hypercorn, on asyncio or on its
trio worker) in a thread."""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cvdiag.cli.demo import serve

#: The last statement of a host process that a test ends with a signal: it keeps serving in short
#: sleeps. One long ``time.sleep`` can swallow the signal for its whole length: CPython runs a
#: Python handler between bytecodes, so a signal that lands after the interpreter's last check and
#: before the sleep's system call waits for the sleep to end (seen once in CI, a 30 s hang).
KEEP_SERVING = "while True: time.sleep(0.05)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


#: uvicorn in a thread on a free loopback port, yielding the base URL: the demo's own helper,
#: so the tests exercise the code users run with ``cvdiag demo``.
serve_uvicorn = serve


#: The same with the app's lifespan on: leaving, it runs lifespan shutdown, as on SIGTERM.
serve_uvicorn_lifespan = functools.partial(serve, lifespan="on")


def _hypercorn_config(port: int) -> Any:
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    config.accesslog = None
    return config


def _until_listening(port: int, server: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server} did not start") from None
            time.sleep(0.02)


@contextmanager
def serve_hypercorn(app: Any) -> Iterator[str]:
    """Run ``app`` under hypercorn on a free loopback port; yields the base URL."""
    from hypercorn.asyncio import serve

    port = free_port()
    config = _hypercorn_config(port)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]

    thread = threading.Thread(target=run, name="hypercorn-test", daemon=True)
    thread.start()
    _until_listening(port, "hypercorn")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


@contextmanager
def serve_hypercorn_trio(app: Any) -> Iterator[str]:
    """Run ``app`` under hypercorn's trio worker (``worker_class = "trio"``): the app, its
    lifespan and cvdiag inside it run under trio, with no asyncio loop anywhere in that thread."""
    import trio
    from hypercorn.trio import serve

    port = free_port()
    config = _hypercorn_config(port)
    config.worker_class = "trio"
    ready = threading.Event()
    running: dict[str, Any] = {}

    async def main() -> None:
        running["stop"] = stop = trio.Event()
        running["token"] = trio.lowlevel.current_trio_token()
        ready.set()
        await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    thread = threading.Thread(target=trio.run, args=(main,), name="hypercorn-trio", daemon=True)
    thread.start()
    ready.wait(10)
    _until_listening(port, "hypercorn (trio)")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        trio.from_thread.run_sync(running["stop"].set, trio_token=running["token"])
        thread.join(10)
