"""What ``python -m examples NAME`` does: run one example offline, end to end, and read its log.

The example's ``app.py`` runs exactly as its README says — its own process, cvdiag switched on
by environment variables, stdout (the ``CVDIAG`` lines) going to a log file — on a free
loopback port. Whatever it talks to is faked in this process (the bundled fake provider, a
stand-in OTLP collector), so nothing reaches the network and no key is needed. Real clients
(httpx, websockets) then play the example's visits, a healthy one and the failures it shows
off, each under a test id of its own; the server is stopped, and the log is read back with the
very ``cvdiag`` commands printed for you to run again.

Each example describes itself in ``examples/<name>/offline.py`` as an ``Example``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TERMINALS = frozenset({"backend.response.complete", "backend.sse.aborted"})
#: Boundaries that open a scope, and the one that closes it: a visit is over when all are closed.
PAIRS = {
    "backend.agent.enter": "backend.agent.exit",
    "backend.llm.call.start": "backend.llm.call.response",
}


@dataclasses.dataclass(frozen=True)
class Client:
    """What a visit drives: the server's base URLs and an HTTP client on it."""

    http: Any  # an httpx.Client with base_url set
    base_url: str
    ws_url: str


@dataclasses.dataclass(frozen=True)
class Visit:
    test_id: str
    title: str
    #: Plays the visit with the test id; returns what the client saw, in one line.
    drive: Callable[[Client, str], str]
    #: The class ``cvdiag classify`` names; the run fails (exit 1) if it names another.
    expected: str
    classify_options: tuple[str, ...] = ()


@dataclasses.dataclass
class World:
    """What the app talks to, faked here: the environment that points the app at it, a line or
    two saying what it is, and what it has to say after the run (given the log's envelopes)."""

    env: dict[str, str]
    describe: list[str] = dataclasses.field(default_factory=list)
    report: Callable[[list[dict[str, Any]]], list[str]] = lambda envelopes: []


@contextlib.contextmanager
def nothing_to_fake() -> Iterator[World]:
    yield World({})


@dataclasses.dataclass(frozen=True)
class Example:
    name: str
    summary: str
    #: cvdiag's settings for the app, as a user would export them.
    env: Mapping[str, str]
    visits: Sequence[Visit]
    #: Modules the app and the clients import (checked first, for a helpful message).
    needs: Sequence[str] = ()
    world: Callable[[], contextlib.AbstractContextManager[World]] = nothing_to_fake


class Unavailable(Exception):
    """The example cannot run here (a missing package, a server that does not start)."""


#: Where ``free_port`` picks: below Linux's ephemeral range (32768-60999), from which the kernel
#: hands ports to port-0 servers and to clients' ends of connections. A port the kernel handed
#: out could be taken by any of those between the pick and the app's own bind: the app then
#: failed to start while the readiness probe reached another server (seen with three test
#: suites on two cores). Here only another pick can collide.
_PICKED = range(20_000, 32_000)
#: A source of its own: the ``random`` module's state may be a test's (hypothesis seeds it).
_PICKER = random.SystemRandom()


def free_port() -> int:
    """A loopback port for a server that must be told its port before it starts (the example's
    app, a process of its own)."""
    for _ in range(100):
        port = _PICKER.choice(_PICKED)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise Unavailable("no free port in 20000-31999")


def _envelopes(log: Path) -> list[dict[str, Any]]:
    found = []
    for line in log.read_bytes().splitlines():
        if line.startswith(b"CVDIAG {"):
            with contextlib.suppress(ValueError):  # a line still being written
                found.append(json.loads(line[len(b"CVDIAG ") :]))
    return found


def _wait_until_over(log: Path, test_id: str, timeout: float = 10.0) -> None:
    """A request can end after its client has gone: wait for its terminal envelope and for every
    agent turn and LLM call it opened to be closed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = [e["boundary"] for e in _envelopes(log) if e.get("test_id") == test_id]
        if TERMINALS & set(seen) and all(seen.count(a) == seen.count(b) for a, b in PAIRS.items()):
            return
        time.sleep(0.05)


@contextlib.contextmanager
def _server(example: Example, env: dict[str, str], log: Path, port: int) -> Iterator[None]:
    with log.open("wb") as stdout, tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(
            [sys.executable, str(HERE / example.name / "app.py")],
            cwd=ROOT,
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        try:
            _wait_until_up(process, port, stderr)
            yield
        finally:
            process.send_signal(signal.SIGINT)  # uvicorn shuts down cleanly, cvdiag flushes
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_up(process: subprocess.Popen[bytes], port: int, stderr: IO[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if process.poll() is not None or time.monotonic() > deadline:
            stderr.seek(0)
            said = stderr.read().decode(errors="replace").strip()
            raise Unavailable(f"the example's server did not start:\n{said}")
        time.sleep(0.05)


def _cvdiag(*args: str) -> tuple[int, str]:
    """A ``cvdiag`` command line, run in this process: (exit code, what it printed)."""
    from cvdiag.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


def run(example: Example, *, log: str | None = None, out: IO[str] | None = None) -> int:
    """Run ``example`` offline, writing its log to ``log`` (``<name>.log`` here by default);
    returns 0 when every visit got the class it shows off."""
    stream = out if out is not None else sys.stdout

    def say(text: str = "") -> None:
        stream.write(text.rstrip() + "\n")
        stream.flush()

    missing = [m for m in ("httpx", "uvicorn", *example.needs) if not _importable(m)]
    if missing:
        raise Unavailable(
            f"examples/{example.name} needs {', '.join(missing)}: pip install -e '.[dev]'"
        )
    import httpx

    path = Path(log or f"{example.name}.log")
    name = shlex.quote(str(path))
    try:
        path.write_bytes(b"")  # a fresh log: the commands printed below read this run only
    except OSError as exc:
        raise Unavailable(f"cannot write {name}: {exc.strerror or exc}; try --log PATH") from None
    port = free_port()
    say(f"examples/{example.name}, offline: {example.summary}")
    with example.world() as world:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_")}
        env.update({**example.env, **world.env, "PORT": str(port)})
        # The app runs as a script: cvdiag and the examples importable even when not installed.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        settings = " ".join(f"{k}={v}" for k, v in example.env.items())
        for line in world.describe:
            say(f"  {line}")
        say(f"  the app: {settings} python examples/{example.name}/app.py > {name}")
        say(f"           on http://127.0.0.1:{port}; its stdout is the log: the CVDIAG lines")
        say("           (and uvicorn's access log, which cvdiag reads past)")
        base = f"http://127.0.0.1:{port}"
        with _server(example, env, path, port), httpx.Client(base_url=base, timeout=30) as http:
            client = Client(http, base, f"ws://127.0.0.1:{port}")
            for number, visit in enumerate(example.visits, 1):
                say()
                say(f"{number}/{len(example.visits)} {visit.title}")
                say(f"    test id {visit.test_id} (sent as x-test-id)")
                say(f"    the client saw: {visit.drive(client, visit.test_id)}")
                _wait_until_over(path, visit.test_id)
        for line in world.report(_envelopes(path)):
            say(line)

    say()
    where = "" if path.is_absolute() else f" ({path.resolve()})"
    say(f"What cvdiag says, from {name}{where}:")
    say()
    say(f"$ cvdiag ls {name}")
    _, listing = _cvdiag("ls", str(path))
    for line in listing.splitlines():
        say(f"  {line}")
    wrong = []
    for visit in example.visits:
        options = " ".join(visit.classify_options)
        say()
        say(f"$ cvdiag classify {visit.test_id} {name}{' ' + options if options else ''}")
        code, answer = _cvdiag(
            "classify", visit.test_id, str(path), "--json", *visit.classify_options
        )
        verdict = json.loads(answer) if code == 0 else {"flap_class": "?", "reason": answer}
        mark = "" if verdict["flap_class"] == visit.expected else f"  (expected {visit.expected})"
        say(f"  class   {verdict['flap_class']}{mark}")
        say(f"  reason  {verdict['reason']}")
        if mark:
            wrong.append(visit.test_id)
    say()
    say("Read it yourself:")
    for visit in example.visits[:2]:
        say(f"$ cvdiag replay {visit.test_id} {name}")
    say(f"$ cvdiag tail --no-follow --lines 1000 --test-id {example.visits[-1].test_id} {name}")
    say(f"$ cvdiag stats {name}")
    if wrong:
        say()
        say(f"unexpected classes for {', '.join(wrong)}: a bug in cvdiag, or a very slow machine")
        return 1
    return 0


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
