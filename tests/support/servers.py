"""Real servers on 127.0.0.1 for end-to-end tests: uvicorn (and hypercorn, on asyncio or on its
trio worker) in a thread; nginx in front of one, as a process of the test's own."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cvdiag.cli.demo import serve
from examples.offline import free_port as offline_free_port

#: The last statement of a host process that a test ends with a signal: it keeps serving in short
#: sleeps. One long ``time.sleep`` can swallow the signal for its whole length: CPython runs a
#: Python handler between bytecodes, so a signal that lands after the interpreter's last check and
#: before the sleep's system call waits for the sleep to end (seen once in CI, a 30 s hang).
KEEP_SERVING = "while True: time.sleep(0.05)"


#: A loopback port for a server that must be told its port before it starts (a process of its
#: own, nginx), picked below the kernel's ephemeral range (see examples/offline.py: a port the
#: kernel handed out could be taken by a port-0 server before the test's server bound it, whose
#: readiness probe then reached another test's server). Servers in a thread bind their own.
free_port = offline_free_port


def bound_socket() -> tuple[socket.socket, int]:
    """A socket bound to a port the kernel picked, kept until a server takes it: no other
    socket can take the port in between."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    return sock, port


#: uvicorn in a thread on a free loopback port, yielding the base URL: the demo's own helper,
#: so the tests exercise the code users run with ``cvdiag demo``.
serve_uvicorn = serve


#: The same with the app's lifespan on: leaving, it runs lifespan shutdown, as on SIGTERM.
serve_uvicorn_lifespan = functools.partial(serve, lifespan="on")


def _hypercorn_config() -> tuple[Any, int]:
    """Hypercorn's configuration, bound to a socket of ours (``fd://``: it takes the socket)."""
    from hypercorn.config import Config

    sock, port = bound_socket()
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.loglevel = "WARNING"
    config.accesslog = None
    return config, port


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

    config, port = _hypercorn_config()
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

    config, port = _hypercorn_config()
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


#: Debian's nginx, where the machine has it (CI's stage 0 installs it).
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
#: What a test's nginx says to each request it passes on: the header behind the issue's reports.
NGINX_VIA = "1.1 nginx-proxy"


@contextmanager
def serve_nginx(upstream: str, folder: Path, *, location: str = "") -> Iterator[str]:
    """Real nginx in front of ``upstream`` (a base URL), as a non-root process of the test's
    own: its config, pid file, logs and temporary paths in ``folder``, ``daemon off``, a free
    port. It adds ``Via: 1.1 nginx-proxy`` to each request; ``location`` adds directives
    (``proxy_buffering off;``, ``proxy_read_timeout 2s;``). Yields its base URL; the test is
    skipped, with one line, where nginx is not installed."""
    if NGINX is None:
        pytest.skip("nginx is not installed (apt-get install nginx)")
    port = free_port()
    config = folder / "nginx.conf"
    config.write_text(
        f"""daemon off;
master_process off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {folder}/client_body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass {upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Via "{NGINX_VIA}";
            {location}
        }}
    }}
}}
"""
    )
    process = subprocess.Popen(
        [NGINX, "-p", str(folder), "-c", str(config), "-e", str(folder / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        try:
            _until_listening(port, "nginx")
        except RuntimeError:
            process.kill()
            _, err = process.communicate(timeout=10)
            raise RuntimeError(f"nginx did not start: {err.decode(errors='replace')}") from None
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
