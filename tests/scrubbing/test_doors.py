"""Every credential of the corpus, through every door of a real uvicorn server, reaches no
envelope (none of the 8-character pieces of its secret is written); every benign string comes
out exactly as it went in. What is checked is what the emit path wrote: the sink's lines.

Doors: an error before and during a stream, nested metadata keys and values, agent and LLM call
names, the path and its first segment (``demo``), the test id, slug and edge request headers,
edge response headers, SSE event types (``event:`` and JSON ``type``) and WebSocket event types.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.sync.client import connect

from cvdiag import CvdiagMiddleware, MemorySink, Settings, Tier, configure, emit
from tests.reliability.apps import ROUTES
from tests.support.corpus import Credential, benign, credentials
from tests.support.servers import serve_uvicorn


async def emit_json(request: Request) -> Response:
    emit("backend.error.caught", metadata=orjson.loads(await request.body()))
    return PlainTextResponse("emitted")


async def events(request: Request) -> Response:
    """Two SSE events typed by the request body: an ``event:`` field and a JSON ``type``."""
    kind = (await request.body()).decode()
    field = kind.replace("\r", " ").replace("\n", " ")

    async def stream() -> AsyncIterator[str]:
        yield f"event: {field}\ndata: x\n\n"
        yield f"data: {orjson.dumps({'type': kind}).decode()}\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


async def typed_echo(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            text = await websocket.receive_text()
            await websocket.send_text(orjson.dumps({"type": text}).decode())
    except WebSocketDisconnect:
        return


def build() -> Starlette:
    app = Starlette(
        routes=[
            *ROUTES,
            Route("/emit-json", emit_json, methods=["POST"]),
            Route("/events", events, methods=["POST"]),
            WebSocketRoute("/typed", typed_echo),
        ]
    )
    app.add_middleware(CvdiagMiddleware)
    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, MemorySink]]:
    sink = MemorySink(maxlen=None)
    configure(
        Settings(enabled=True, tier=Tier.DEBUG, debug_max_envelopes=10**9, debug_max_seconds=1e9),
        sinks=[sink],
    )
    try:
        with serve_uvicorn(build()) as url:
            yield url, sink
    finally:
        configure(Settings(), sinks=[MemorySink()])


def header_safe(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ").encode("latin-1", "replace").decode("latin-1")


def knock(url: str, client: httpx.Client, text: str) -> None:
    """Send ``text`` through every door once. A door may end in a server error or a broken
    stream: that is what it is for, so transport errors are part of the knock."""
    message = f"failed with {text} (retrying)"
    header = header_safe(text).strip()
    nested = {"message_scrubbed": {"deep": [{text: text}], text: [text]}, "agent_name": text}
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/raises", {"params": {"message": message}}),
        ("GET", "/sse-raises", {"params": {"message": message}}),
        ("GET", "/agent", {"params": {"name": text}}),
        ("POST", "/emit-json", {"content": orjson.dumps(nested)}),
        ("GET", "/echo/" + quote(text, safe=""), {}),
        ("GET", "/" + quote(text, safe="") + "/x", {}),
        (
            "GET",
            "/plain",
            {
                "headers": {
                    "x-test-id": header,
                    "x-aimock-context": header,
                    "via": header,
                    "cf-ray": header,
                }
            },
        ),
        ("GET", "/edge", {"params": {"server": header, "via": header}}),
        ("POST", "/events", {"content": text.encode()}),
    ]
    for method, path, options in requests:
        with contextlib.suppress(httpx.HTTPError):
            client.request(method, path, **options)
    with connect(url.replace("http://", "ws://") + "/typed") as ws:
        ws.send(text)
        ws.recv(timeout=5)


def written(sink: MemorySink, since: int) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in list(sink.lines)[since:]]


def settle(sink: MemorySink, since: int) -> list[dict[str, Any]]:
    """The envelopes since ``since``, once the WebSocket's terminal is written."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        envelopes = written(sink, since)
        if any(
            e["boundary"] in ("backend.response.complete", "backend.sse.aborted")
            and e["demo"] == "typed"
            for e in envelopes
        ):
            return envelopes
        time.sleep(0.01)
    return written(sink, since)


def test_no_credential_passes_any_door(server: tuple[str, MemorySink]) -> None:
    url, sink = server
    leaks: dict[str, list[str]] = {}
    with httpx.Client(base_url=url, timeout=10) as client:
        for credential in credentials():
            since = len(sink.lines)
            knock(url, client, credential.text)
            envelopes = settle(sink, since)
            assert len(envelopes) >= 20, credential.family  # the doors were really knocked on
            found = _leaked(credential, list(sink.lines)[since:])
            if found:
                leaks[f"{credential.family}: {credential.text[:60]!r}"] = found
    assert leaks == {}


def _leaked(credential: Credential, lines: list[bytes]) -> list[str]:
    # Both as written (JSON escapes included) and decoded: a secret must be in neither.
    raw = b"\n".join(lines).decode("utf-8")
    decoded = "\n".join(repr(orjson.loads(line)) for line in lines)
    return credential.leaked(raw) + credential.leaked(decoded)


_NOT_JOIN_KEY = re.compile(r"[^a-z0-9._-]+")
_NOT_SLUG = re.compile(r"[^a-z0-9-]+")


def test_benign_strings_pass_every_door_unchanged(server: tuple[str, MemorySink]) -> None:
    url, sink = server
    changed: dict[str, list[str]] = {}
    with httpx.Client(base_url=url, timeout=10) as client:
        for _, text in benign():
            since = len(sink.lines)
            knock(url, client, text)
            envelopes = settle(sink, since)
            problems = _differences(text, envelopes)
            if problems:
                changed[text] = problems
    assert changed == {}


def _differences(text: str, envelopes: list[dict[str, Any]]) -> list[str]:
    """Where ``text`` did not come out as it went in (what no scrubber would change)."""
    header = header_safe(text).strip()
    problems = []

    def meta(boundary: str, key: str) -> list[Any]:
        return [e["metadata"].get(key) for e in envelopes if e["boundary"] == boundary]

    messages = meta("backend.error.caught", "message_scrubbed")
    if f"failed with {text} (retrying)" not in messages:
        problems.append(f"error message: {messages}")
    if text not in meta("backend.agent.enter", "agent_name"):
        problems.append("agent name")
    if text not in meta("backend.llm.call.start", "model"):
        problems.append("model")
    nested = [m for m in messages if isinstance(m, dict)]
    if {"deep": [{text: text}], text: [text]} not in nested:
        problems.append(f"nested metadata: {nested}")
    if "/echo/" + text not in meta("backend.request.ingress", "path"):
        problems.append("path")
    first = text.partition("/")[0]
    if first and first[:256] not in {e["demo"] for e in envelopes}:
        problems.append("demo")
    join_key = _NOT_JOIN_KEY.sub("", header.lower())[:128]
    if join_key and join_key not in {e["test_id"] for e in envelopes}:
        problems.append("test id")
    slug = _NOT_SLUG.sub("-", header.lower()).lstrip("-0123456789")[:64].rstrip("-")
    if slug and slug not in {e["slug"] for e in envelopes}:
        problems.append("slug")
    edges = {v for e in envelopes for v in (e["edge_headers"] or {}).values() if v}
    if header and header[:256] not in edges:
        problems.append("edge headers")
    types = set(meta("backend.sse.event", "event_type"))
    if text[:256] not in types:
        problems.append(f"event types: {types}")
    return problems
