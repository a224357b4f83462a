"""Real servers on 127.0.0.1 for end-to-end tests: uvicorn (and hypercorn) in a thread."""

from __future__ import annotations

import asyncio
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


@contextmanager
def serve_hypercorn(app: Any) -> Iterator[str]:
    """Run ``app`` under hypercorn on a free loopback port; yields the base URL."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    port = free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.loglevel = "WARNING"
    config.accesslog = None
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]

    thread = threading.Thread(target=run, name="hypercorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("hypercorn did not start") from None
            time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
