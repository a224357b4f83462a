"""``cvdiag demo``: an instrumented agent backend, five conversations, and what cvdiag says.

Everything runs in this process on a free loopback port: a Starlette app with
``CvdiagMiddleware``, an agent turn (``agent_scope``) around a fake streaming LLM (``llm_call``),
cvdiag at the debug tier writing envelopes to a log file (``cvdiag-demo.log`` in the current
directory unless told otherwise), and clients that drive a healthy chat, a slow LLM call
(heartbeats), a client that hangs up mid-stream, an LLM error whose message carries a fake API
key (scrubbed), and a WebSocket chat. Each envelope is shown as ``cvdiag tail`` shows it; after
each conversation the demo prints the test id's replay and class, read back from that log
exactly as the ``cvdiag replay`` and ``cvdiag classify`` commands it prints would read it.

The server and clients (uvicorn, httpx, websockets) are the ``demo`` extra, not runtime
dependencies of cvdiag; all missing ones are named at once. A log the demo cannot write fails
it in one line, before its server starts or as soon as an envelope is lost, never later.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import json
import os
import stat
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Final, Literal, TextIO

from cvdiag.cli.output import NOTHING, USAGE, Failure, printed
from cvdiag.core.settings import Settings
from cvdiag.diagnosis import classify, timeline
from cvdiag.logs.reading import Input, Record, records
from cvdiag.pipeline.emitter import configure, flush
from cvdiag.schema.vocabulary import Tier
from cvdiag.sinks import FileSink, MemorySink

#: Where the demo writes its log, relative to the current directory.
DEMO_LOG: Final = "cvdiag-demo.log"

if TYPE_CHECKING:
    import httpx
    from starlette.applications import Starlette

#: Looks like an OpenAI key, so the scrubber must catch it; it is not a real credential.
FAKE_API_KEY: Final = "sk-demo-" + "Zx81Qe0Lk3Tu7Wd2"
SLOW_LLM_S: Final = 1.5
HEARTBEAT_S: Final = 0.2
#: The slow scenario is classified with this first-token timeout (the default is 60 s).
DEMO_FIRST_TOKEN_TIMEOUT: Final = 1.0
#: The page ``cvdiag report`` writes of the demo's log, at its end.
DEMO_REPORT: Final = "cvdiag-demo.html"
TOKENS: Final = ("Hello", "!", " How", " can", " I", " help", "?")


class DemoUnavailable(Exception):
    """The demo's server or clients are not installed."""


class DemoFailed(Exception):
    """A scenario did not get the class it shows off (a bug, or a machine far too slow)."""


# --- the example backend ------------------------------------------------------------------


async def fake_llm(mode: str) -> list[str]:
    """A fake LLM call: quick, slow (heartbeats while it waits), or failing with a key in its
    error message, the way provider SDKs sometimes echo credentials."""
    from cvdiag.scopes import llm_call

    async with llm_call(
        "fake", "fake-chat-1", prompt_token_count_estimate=12, heartbeat_interval=HEARTBEAT_S
    ) as call:
        if mode == "slow":
            await asyncio.sleep(SLOW_LLM_S)
        elif mode == "error":
            raise PermissionError(f"401 from provider: invalid api key {FAKE_API_KEY}")
        tokens = list(TOKENS) * (6 if mode == "long" else 1)
        call.record_response(len(tokens))
        return tokens


def build_app() -> Starlette:
    """The example agent backend: SSE chat on ``POST /chat``, WebSocket chat on ``/ws``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket

    from cvdiag.asgi.middleware import CvdiagMiddleware
    from cvdiag.scopes import agent_scope

    async def chat(request: Request) -> Response:
        mode = request.query_params.get("mode", "ok")
        if mode == "error":
            try:
                async with agent_scope("demo-agent", model_id="fake-chat-1"):
                    await fake_llm(mode)
            except PermissionError:
                return JSONResponse({"error": "the model provider refused the call"}, 502)

        async def stream() -> AsyncIterator[str]:
            async with agent_scope("demo-agent", model_id="fake-chat-1"):
                for token in await fake_llm(mode):
                    data = json.dumps({"type": "TEXT_MESSAGE_CONTENT", "delta": token})
                    yield f"event: TEXT_MESSAGE_CONTENT\ndata: {data}\n\n"
                    await asyncio.sleep(0.03 if mode == "long" else 0.002)

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def ws_chat(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.receive_text()
        async with agent_scope("demo-agent", model_id="fake-chat-1"):
            for token in await fake_llm("ok"):
                await websocket.send_text(
                    json.dumps({"type": "TEXT_MESSAGE_CONTENT", "delta": token})
                )
        await websocket.close(1000)

    app = Starlette(routes=[Route("/chat", chat, methods=["POST"]), WebSocketRoute("/ws", ws_chat)])
    app.add_middleware(CvdiagMiddleware, slug="demo")
    return app


@contextmanager
def serve(app: Any, *, lifespan: Literal["on", "off"] = "off") -> Iterator[str]:
    """uvicorn in a thread on a free loopback port; yields the base URL. ``lifespan="on"``
    runs the app's lifespan too (shutdown as the server leaves, as on SIGTERM)."""
    import uvicorn

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan=lifespan
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="cvdiag-demo-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise DemoUnavailable("the demo server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


# --- the scenarios ------------------------------------------------------------------------


def _sse(client: httpx.Client, test_id: str, mode: str, *, stop_after: int | None = None) -> None:
    with client.stream(
        "POST", f"/chat?mode={mode}", headers={"x-test-id": test_id}, json={"message": "hi"}
    ) as response:
        events = 0
        for line in response.iter_lines():
            events += line.startswith("data:")
            if stop_after is not None and events >= stop_after:
                return  # hang up mid-stream: leaving the block closes the connection


def _websocket(base: str, test_id: str) -> None:
    from websockets.sync.client import connect

    with connect(
        base.replace("http://", "ws://") + "/ws", additional_headers={"x-test-id": test_id}
    ) as ws:
        ws.send(json.dumps({"message": "hi"}))
        with suppress(Exception):  # the server closing the socket ends the chat
            while True:
                ws.recv(timeout=5)


@dataclasses.dataclass(frozen=True)
class Scenario:
    title: str
    test_id: str
    what: str
    drive: Callable[[httpx.Client, str, str], None]
    #: The class this scenario shows off; the demo fails (exit 1) if cvdiag says otherwise.
    expected: str
    first_token_timeout: float = classify.DEFAULT_FIRST_TOKEN_TIMEOUT


SCENARIOS: Final = (
    Scenario(
        "healthy chat",
        "demo-1-healthy-chat",
        "POST /chat: the agent calls the LLM and streams its answer as SSE",
        lambda client, base, tid: _sse(client, tid, "ok"),
        "healthy",
    ),
    Scenario(
        "slow LLM call",
        "demo-2-slow-llm",
        f"the LLM takes {SLOW_LLM_S:g} s; heartbeats every {HEARTBEAT_S:g} s while it is"
        f" outstanding (classified with a {DEMO_FIRST_TOKEN_TIMEOUT:g} s first-token timeout)",
        lambda client, base, tid: _sse(client, tid, "slow"),
        "slow-first-token",
        DEMO_FIRST_TOKEN_TIMEOUT,
    ),
    Scenario(
        "client abort",
        "demo-3-client-abort",
        "the client hangs up after three events of a long answer",
        lambda client, base, tid: _sse(client, tid, "long", stop_after=3),
        "client-abort",
    ),
    Scenario(
        "error with an API key",
        "demo-4-llm-error",
        "the LLM call fails with the API key in its message; the envelope carries it scrubbed",
        lambda client, base, tid: _sse(client, tid, "error"),  # a JSON 502, read whole
        "backend-error",
    ),
    Scenario(
        "WebSocket chat",
        "demo-5-websocket",
        "the same agent over a WebSocket (/ws)",
        lambda client, base, tid: _websocket(base, tid),
        "healthy",
    ),
)


def _check_dependencies() -> None:
    """Every module the demo needs, named at once: one ``pip install`` line, not one per run."""
    missing = []
    for name in ("uvicorn", "httpx", "websockets"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:  # cvdiag is on no package index: name the packages, then the extra
        raise DemoUnavailable(
            f"missing {', '.join(missing)} (it needs uvicorn, httpx and websockets): pip install"
            f" {' '.join(missing)}, or from a checkout: pip install -e '.[demo]'"
        )


def _fresh_log(log: str) -> None:
    """Empty ``log`` after writing a byte (a full disk refuses it); only a regular file, as it is
    read back (``/dev/full`` reads as endless NULs: the demo spun reading it)."""
    try:
        # Non-blocking: a FIFO without a reader fails here rather than hang the demo.
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644)
        try:
            os.write(fd, b"\n")
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise DemoUnavailable(f"cannot use {log}: not a regular file")
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        raise DemoUnavailable(f"cannot write {log}: {exc.strerror or exc}") from None


def _records(log: str, test_id: str, sink: FileSink) -> list[Record]:
    """The test id's envelopes read back from the log, exactly as ``cvdiag`` reads it; a line
    the sink lost (it counts and goes on, as in a host) fails the demo: no wrong story."""
    flush()
    if sink.dropped:
        raise DemoUnavailable(f"cannot write {log}: {sink.dropped} envelope(s) lost")
    with open(log, "rb") as file:
        return list(records(Input(log, file), lambda problem: None, test_id=test_id))


def _wait_until_ended(memory: MemorySink, test_id: str, timeout: float = 10.0) -> None:
    """A request can end after its client has gone: wait for its terminal and its agent's exit."""
    wanted = {"backend.agent.exit"}
    ends = {"backend.response.complete", "backend.sse.aborted"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {e["boundary"] for e in list(memory.envelopes) if e["test_id"] == test_id}
        if wanted <= seen and seen & ends:
            return
        time.sleep(0.02)


def run(
    out: TextIO | None = None,
    log: str = DEMO_LOG,
    report: str | None = DEMO_REPORT,
    color: str = "auto",
) -> int:
    """Run the demo: envelopes to ``log``, their page to ``report`` (both replaced), coloured as
    ``color`` (``--color``) says; 0 when every scenario got the class it shows off."""
    from cvdiag.cli.commands import _failed_row, render_verdict  # late: no import cycle
    from cvdiag.cli.style import Style, class_color, safe, use_color
    from cvdiag.cli.tail import render

    stream = out if out is not None else sys.stdout
    style = Style(use_color(color, stream))
    _check_dependencies()
    _fresh_log(log)
    import httpx

    def say(text: str = "", *names: str) -> None:  # escaped, then coloured, as commands do
        flush()  # envelopes queued so far come first
        printed(style(safe(text.rstrip()), *names) + "\n", stream, "demo")  # /dev/full: exit 2

    memory, sink = MemorySink(), FileSink(log)
    # Code-given settings are trusted: the debug tier whatever the environment label says.
    configure(
        Settings(enabled=True, tier=Tier.DEBUG, heartbeat_interval=HEARTBEAT_S),
        sinks=[sink, memory],
    )
    name = log if " " not in log else repr(log)
    verdicts: list[tuple[Scenario, classify.Verdict]] = []
    try:
        with serve(build_app()) as base, httpx.Client(base_url=base, timeout=30) as client:
            say(f"cvdiag demo: an example agent backend on {base}, cvdiag at the debug tier")
            say(f"(its envelopes go to {name}; each is shown below as 'cvdiag tail' shows it)")
            for number, scenario in enumerate(SCENARIOS, 1):
                say()
                say(f"=== {number}/{len(SCENARIOS)} {scenario.title}: {scenario.what}", "bold")
                say(f"    test id {scenario.test_id} (sent as the x-test-id header)")
                scenario.drive(client, base, scenario.test_id)
                _wait_until_ended(memory, scenario.test_id)
                found = _records(log, scenario.test_id, sink)
                for record in found:
                    line, names = render(record.envelope)
                    say(f"  {line}", *names)
                say()
                say(f"$ cvdiag replay {scenario.test_id} {name}", "cyan")
                rows = timeline.render(timeline.build(scenario.test_id, found))
                for i, row in enumerate(rows):  # styled as ``cvdiag replay`` styles them
                    say(f"  {row}", *("bold",) if i == 0 else ("red",) if _failed_row(row) else ())
                verdict = classify.classify(
                    classify.gather(scenario.test_id, found),
                    first_token_timeout=scenario.first_token_timeout,
                )
                verdicts.append((scenario, verdict))
                timeout = scenario.first_token_timeout
                default = timeout == classify.DEFAULT_FIRST_TOKEN_TIMEOUT
                option = "" if default else f" --first-token-timeout {timeout:g}"
                say(f"$ cvdiag classify {scenario.test_id} {name}{option}", "cyan")
                # What the command prints, as it styles it: the transcript is one to rerun.
                for i, row in enumerate(render_verdict(verdict)):
                    say(f"  {row}", *class_color(verdict.flap_class) if i == 1 else ())
    finally:
        flush()
        configure(Settings(), sinks=[MemorySink()])
    say()
    say("=== summary", "bold")
    width = max(len(s.title) for s, _ in verdicts)
    for scenario, verdict in verdicts:
        mark = (
            "" if verdict.flap_class == scenario.expected else f"  (expected {scenario.expected})"
        )
        row = f"  {scenario.title:<{width}}  {scenario.test_id:<22}  {verdict.flap_class}{mark}"
        say(row, *(class_color(verdict.flap_class) if not mark else ("red", "bold")))
    say()
    where = os.path.abspath(log)
    say(f"Every envelope above is in {name} ({where}). Try:")
    say(f"  cvdiag ls {name}")
    say(f"  cvdiag replay {SCENARIOS[0].test_id} {name}")
    say(f"  cvdiag classify {SCENARIOS[2].test_id} {name}")
    say()
    if report is not None:
        page = _report(log, report)
        shown = report if " " not in report else repr(report)
        say(f"The same story as one page, for a browser (a CI job keeps it as an artifact): {page}")
        say("written as this command writes it:")
        say(f"  cvdiag report {name} --first-token-timeout {DEMO_FIRST_TOKEN_TIMEOUT:g} -o {shown}")
        say()
    say("On your own backend: app.add_middleware(CvdiagMiddleware), set the environment variable")
    say("CVDIAG_BACKEND_EMITTER=1, run it with '| tee app.log', and read it live with")
    say("'| cvdiag tail', or afterwards with: cvdiag ls|replay|classify ... app.log")
    wrong = [s.title for s, v in verdicts if v.flap_class != s.expected]
    if wrong or len(verdicts) != len(SCENARIOS):
        raise DemoFailed(f"unexpected classes for: {', '.join(wrong) or 'missing scenarios'}")
    return 0


def _report(log: str, path: str) -> str:
    """Write the report of ``log`` to ``path``, as ``cvdiag report`` would; its absolute path."""
    from cvdiag.cli.report import write_page
    from cvdiag.report import gather

    write_page(path, gather([log], first_token_timeout=DEMO_FIRST_TOKEN_TIMEOUT))
    return os.path.abspath(path)


def demo(args: argparse.Namespace) -> int:
    """The ``cvdiag demo`` command: ``run`` with its failures as the command's error lines."""
    try:
        return run(log=args.log, report=args.report, color=args.color)
    except DemoUnavailable as exc:
        raise Failure(f"demo: {exc}", USAGE) from None
    except DemoFailed as exc:
        raise Failure(f"demo: {exc}", NOTHING) from None
