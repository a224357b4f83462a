"""Shared apps and helpers for the middleware tests (this module holds no tests itself)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from cvdiag import CvdiagMiddleware, MemorySink
from cvdiag.schema.vocabulary import BYTE_CAPS, Tier
from tests.schema_check import assert_valid
from tests.support.servers import serve_hypercorn, serve_hypercorn_trio, serve_uvicorn

TERMINALS = ("backend.response.complete", "backend.sse.aborted")
FAKE_KEY = "sk-test-12345"
CLIENTS: dict[str, Any] = {"httpx": httpx, "httpx2": httpx2}
SERVERS = {
    "uvicorn": serve_uvicorn,
    "hypercorn": serve_hypercorn,
    "hypercorn-trio": serve_hypercorn_trio,  # the app and cvdiag under trio
}
#: Every test of a middleware story runs on asyncio (uvicorn, hypercorn) and trio (hypercorn's
#: trio worker). Under trio a client closing at the stream's very end makes Starlette's disconnect
#: listener cancel the app's final send: the story is still ``complete`` (issue 25).
ON_EVERY_SERVER = ["uvicorn", "hypercorn", "hypercorn-trio"]
FINAL_SEND_SERVERS = ON_EVERY_SERVER
Envelope = Mapping[str, Any]


# --- the app under test --------------------------------------------------------------------------


def sse_event(i: int) -> str:
    return f'data: {{"type":"TEXT_MESSAGE_CONTENT","delta":"token {i}"}}\n\n'


async def sse(request: Request) -> Response:
    count = int(request.query_params.get("n", "3"))
    delay = float(request.query_params.get("delay", "0"))

    async def events() -> Any:
        for i in range(count):
            yield sse_event(i)
            if delay:
                await anyio.sleep(delay)  # the app runs under asyncio or trio

    return StreamingResponse(events(), media_type="text/event-stream")


async def sse_raises(request: Request) -> Response:
    async def events() -> Any:
        yield sse_event(0)
        yield sse_event(1)
        raise RuntimeError(f"stream broke with api_key={FAKE_KEY}")

    return StreamingResponse(events(), media_type="text/event-stream")


async def raises(request: Request) -> Response:
    raise ValueError(f"upstream refused key {FAKE_KEY}")


async def plain(request: Request) -> Response:
    return PlainTextResponse("hello", headers={"server": "unit", "cf-cache-status": "HIT"})


async def chunks(request: Request) -> Response:
    async def body() -> Any:
        for part in (b"one", b"two", b"three"):
            yield part

    return StreamingResponse(body(), media_type="application/octet-stream")


async def chat(websocket: WebSocket) -> None:
    """Echoes each text message as a JSON event; "bye" makes the server close."""
    await websocket.accept()
    n = 0
    try:
        while True:
            text = await websocket.receive_text()
            if text == "bye":
                await websocket.close(code=1000)
                return
            await websocket.send_json({"type": "TEXT_MESSAGE_CONTENT", "n": n, "echo": text})
            n += 1
    except WebSocketDisconnect:
        return


def make_app(**options: Any) -> Starlette:
    app = Starlette(
        routes=[
            Route("/chat/sse", sse),
            Route("/chat/sse-raises", sse_raises),
            Route("/chat/raises", raises),
            Route("/plain", plain),
            Route("/chunks", chunks),
            Route("/health", plain),
            WebSocketRoute("/ws/chat", chat),
        ]
    )
    app.add_middleware(CvdiagMiddleware, **options)
    return app


# --- running apps --------------------------------------------------------------------------------


def http_scope(
    path: str = "/plain", headers: Sequence[tuple[bytes, bytes]] = (), **extra: Any
) -> dict[str, Any]:
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": list(headers),
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    scope.update(extra)
    return scope


async def call(
    app: Any, scope: dict[str, Any], incoming: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Call an ASGI app in-process; after ``incoming`` runs out, receive waits (a live client)."""
    queue = list(incoming) or [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def without_echo(sent: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``sent`` without the ``x-test-id`` header cvdiag echoes on the response start (pinned by
    tests/asgi/test_echo.py): what else the client saw must be the bare app's."""
    return [
        {**m, "headers": [h for h in m.get("headers") or () if h[0] != b"x-test-id"]}
        if m["type"] in ("http.response.start", "websocket.accept")
        else m
        for m in sent
    ]


# --- reading what was emitted --------------------------------------------------------------------


def boundaries(envelopes: Sequence[Envelope]) -> list[str]:
    return [e["boundary"] for e in envelopes]


def only(envelopes: Sequence[Envelope], boundary: str) -> Envelope:
    found = [e for e in envelopes if e["boundary"] == boundary]
    assert len(found) == 1, (boundary, boundaries(envelopes))
    return found[0]


def terminals(envelopes: Sequence[Envelope]) -> list[Envelope]:
    return [e for e in envelopes if e["boundary"] in TERMINALS]


def check_all(sink: MemorySink, tier: Tier | str = Tier.DEBUG) -> list[Envelope]:
    """Every envelope valid (published v1 schema for UUIDv7 test ids) and within its cap."""
    cap = BYTE_CAPS[Tier[tier.upper()] if isinstance(tier, str) else tier]
    envelopes = list(sink.envelopes)
    for envelope, line in zip(envelopes, list(sink.lines), strict=True):
        assert_valid(envelope)
        assert len(line) <= cap
    return envelopes


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll briefly: servers emit the terminal after the client has already seen the bytes."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def wait_terminal(sink: MemorySink, count: int = 1) -> list[Envelope]:
    wait_for(lambda: len(terminals(list(sink.envelopes))) >= count)
    time.sleep(0.05)  # a second terminal, were there one, would arrive right behind the first
    return list(sink.envelopes)


@contextmanager
def serve(server: str, app: Any) -> Iterator[str]:
    with SERVERS[server](app) as url:
        yield url
