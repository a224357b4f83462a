"""Every request tells one true story, end to end: real servers, real clients, the real SDK.

Each test drives a real uvicorn (or hypercorn) server on 127.0.0.1 and reads what cvdiag wrote
for its test id: one terminal per request, every scope exited before it (unless its work truly
goes on), CVDIAG v1 termination kinds, no LLM call outliving its stream, and sizes and counts
that are the app's own whatever sits around cvdiag.
"""

from __future__ import annotations

import asyncio
import gzip
import inspect
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from fastapi import BackgroundTasks, FastAPI, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.middleware.gzip import GZipMiddleware
from websockets.sync.client import connect

from cvdiag import CvdiagMiddleware, MemorySink, agent_scope, instrument_httpx, llm_call
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from examples.fake_provider import FakeProvider
from tests.support.asgi_apps import SERVERS, terminals, wait_for
from tests.support.servers import serve_uvicorn

Envelope = Mapping[str, Any]
PROMPT = [{"role": "user", "content": "Say hello"}]
TERMINALS = ("backend.response.complete", "backend.sse.aborted")


def story(sink: MemorySink, test_id: str) -> list[Envelope]:
    return [e for e in list(sink.envelopes) if e["test_id"] == test_id]


def names(envelopes: list[Envelope]) -> list[str]:
    return [e["boundary"] for e in envelopes]


def settled(
    sink: MemorySink, test_id: str, boundary: str = "backend.response.complete"
) -> list[Envelope]:
    """The story once ``boundary`` is in it, and a little longer: nothing may follow."""
    wait_for(lambda: boundary in names(story(sink, test_id)))
    time.sleep(0.3)  # heartbeats are due every 20 ms: any that outlived the call would show
    return story(sink, test_id)


# --- LLM streams: finished, broken off, left unclosed ----------------------------------------


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[FakeProvider, str]]:
    fake = FakeProvider()
    fake.chunk_delay = 0.02  # a stream long enough to be mid-flight when it is left
    with serve_uvicorn(fake.app) as url:
        yield fake, url


def sdk_clients(provider_url: str) -> dict[str, tuple[Any, Any]]:
    """Per API, an async and a sync way to open a stream through instrumented httpx2 clients."""
    hosts = {provider_url.removeprefix("http://"): "openai"}

    def http(sync: bool) -> Any:
        return instrument_httpx(httpx2.Client() if sync else httpx2.AsyncClient(), llm_hosts=hosts)

    options: dict[str, Any] = {"api_key": "sk-test", "max_retries": 0}
    oai = openai.AsyncOpenAI(base_url=f"{provider_url}/v1", http_client=http(False), **options)
    oai_sync = openai.OpenAI(base_url=f"{provider_url}/v1", http_client=http(True), **options)
    claude = anthropic.AsyncAnthropic(base_url=provider_url, http_client=http(False), **options)
    claude_sync = anthropic.Anthropic(base_url=provider_url, http_client=http(True), **options)
    chat: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": PROMPT,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    responses: dict[str, Any] = {"model": "gpt-4o-mini", "input": "Say hello", "stream": True}
    messages: dict[str, Any] = {
        "model": "claude-sonnet",
        "max_tokens": 64,
        "messages": PROMPT,
        "stream": True,
    }
    return {
        "chat": (
            lambda: oai.chat.completions.create(**chat),
            lambda: oai_sync.chat.completions.create(**chat),
        ),
        "responses": (
            lambda: oai.responses.create(**responses),
            lambda: oai_sync.responses.create(**responses),
        ),
        "messages": (
            lambda: claude.messages.create(**messages),
            lambda: claude_sync.messages.create(**messages),
        ),
    }


def sdk_app(provider_url: str) -> FastAPI:
    clients = sdk_clients(provider_url)
    app = FastAPI()
    app.add_middleware(CvdiagMiddleware)

    @app.post("/async/{api}/{mode}")
    async def read_async(api: str, mode: str) -> dict[str, int]:
        seen = 0
        async with agent_scope("async-agent"):
            chunks = await clients[api][0]()
            try:
                async for _chunk in chunks:  # the docs' own loop, never closed
                    seen += 1
                    if mode == "break":
                        break
                    if mode == "raise":
                        raise LookupError("the consumer failed")
            except LookupError:
                pass
        return {"seen": seen}

    @app.post("/sync/{api}/{mode}")
    def read_sync(api: str, mode: str) -> dict[str, int]:
        seen = 0
        with agent_scope("sync-agent"):
            chunks = clients[api][1]()
            try:
                for _chunk in chunks:
                    seen += 1
                    if mode == "break":
                        break
                    if mode == "raise":
                        raise LookupError("the consumer failed")
            except LookupError:
                pass
        return {"seen": seen}

    return app


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("flavour", ["async", "sync"])
@pytest.mark.parametrize("mode", ["end", "break", "raise"])
def test_an_sdk_stream_ends_its_call_once_before_the_request_ends(
    cvdiag_events: CvdiagEvents,
    provider: tuple[FakeProvider, str],
    api: str,
    flavour: str,
    mode: str,
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    test_id = new_uuid7()
    with serve_uvicorn(sdk_app(provider[1])) as url:
        reply = httpx.post(
            f"{url}/{flavour}/{api}/{mode}", headers={"x-test-id": test_id}, timeout=60
        )
        assert reply.status_code == 200, reply.text
        envelopes = settled(sink, test_id)
    assert names(envelopes)[-1] == "backend.response.complete"  # nothing after the terminal
    (answer,) = [e for e in envelopes if e["boundary"] == "backend.llm.call.response"]
    assert isinstance(answer["metadata"]["first_token_delta_ms"], int)
    assert answer["metadata"]["first_token_delta_ms"] <= answer["metadata"]["latency_ms"]
    if mode == "end":
        # The SDK may close the response right after the provider's own end event ([DONE],
        # message_stop, response.completed): a finished stream is a complete call.
        assert (answer["outcome"], answer["metadata"]["error_class"]) == ("ok", None)
        assert answer["metadata"]["response_token_count"] == len(provider[0].words)
    else:
        assert answer["outcome"] == "err"
        # Left unread: ended by the request. An SDK whose dropped sync iterator closes its
        # response on the way out (anthropic) closes it first: a stream closed early.
        assert answer["metadata"]["error_class"] in {"StreamCancelledUnclosed", "StreamCancelled"}
    assert "backend.error.caught" not in names(envelopes)


# --- WebSocket: a client leaving mid-turn ------------------------------------------------------


def approval_app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(CvdiagMiddleware)

    @app.websocket("/ws")
    async def chat(websocket: WebSocket) -> None:
        await websocket.accept()
        while True:
            await websocket.receive_text()
            async with (
                agent_scope("chat-agent"),
                llm_call("fake", "fake-1", heartbeat_interval=0.02),
            ):
                # A tool call waiting for the user's approval: the client leaves instead.
                await websocket.send_text("approve?")
                await websocket.receive_text()

    return app


@pytest.mark.parametrize("server", ["uvicorn", "hypercorn"])
@pytest.mark.parametrize("leave", ["close-1000", "close-1001", "drop"])
def test_a_websocket_client_leaving_mid_turn_is_no_error(
    cvdiag_events: CvdiagEvents, server: str, leave: str
) -> None:
    sink = cvdiag_events("verbose")
    test_id = new_uuid7()
    with SERVERS[server](approval_app()) as url:
        ws_url = url.replace("http://", "ws://") + "/ws"
        with connect(ws_url, additional_headers={"x-test-id": test_id}) as ws:
            ws.send("book the flight")
            assert ws.recv(timeout=5) == "approve?"
            if leave == "drop":
                ws.socket.shutdown(socket.SHUT_RDWR)
                ws.socket.close()
            else:
                ws.close(code=int(leave.removeprefix("close-")))
        envelopes = settled(sink, test_id, "backend.sse.aborted")
    assert "backend.error.caught" not in names(envelopes)
    (terminal,) = [e for e in envelopes if e["boundary"] in TERMINALS]
    assert envelopes[-1] is terminal  # every scope exited before it
    exit_ = next(e for e in envelopes if e["boundary"] == "backend.agent.exit")
    assert (exit_["outcome"], exit_["metadata"]["terminal_outcome"]) == ("info", "cancelled")
    answer = next(e for e in envelopes if e["boundary"] == "backend.llm.call.response")
    assert answer["outcome"] == "err"
    clean = leave != "drop" and server == "uvicorn"  # hypercorn reports every close as 1006
    expected = ("fin_premature", "client_close") if clean else ("rst", "client_disconnect")
    meta = terminal["metadata"]
    assert (meta["termination_kind"], meta["termination_cause"]) == expected


# --- an app raising, a background task -------------------------------------------------------


def test_an_app_raising_before_its_response_completes_500(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    app = FastAPI()
    app.add_middleware(CvdiagMiddleware)

    @app.get("/boom")
    async def boom() -> None:
        async with agent_scope("planner"):
            raise RuntimeError("the planner failed")

    test_id = new_uuid7()
    with serve_uvicorn(app) as url:
        reply = httpx.get(f"{url}/boom", headers={"x-test-id": test_id}, timeout=60)
        assert reply.status_code == 500
        envelopes = settled(sink, test_id)
    assert names(envelopes) == [
        "backend.agent.enter",
        "backend.error.caught",
        "backend.agent.exit",
        "backend.response.complete",
    ]
    complete = envelopes[-1]
    assert (complete["outcome"], complete["metadata"]["http_status"]) == ("err", 500)


def test_a_background_task_tells_its_part_after_the_terminal(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    app = FastAPI()
    app.add_middleware(CvdiagMiddleware)

    async def follow_up() -> None:
        async with agent_scope("summariser"):
            await asyncio.sleep(0.01)

    @app.post("/turn")
    async def turn(tasks: BackgroundTasks) -> dict[str, bool]:
        tasks.add_task(follow_up)
        return {"queued": True}

    test_id = new_uuid7()
    with serve_uvicorn(app) as url:
        httpx.post(f"{url}/turn", headers={"x-test-id": test_id}, timeout=60)
        envelopes = settled(sink, test_id, "backend.agent.exit")
    assert names(envelopes) == [
        "backend.response.complete",
        "backend.agent.enter",
        "backend.agent.exit",
    ]
    assert {e["test_id"] for e in envelopes} == {test_id}


# --- what the app sent, whatever is around cvdiag -------------------------------------------

#: Starlette's GZipMiddleware compresses event streams only when told to, and before 1.x
#: (the 0.46 floor) cannot be told: there the SSE case runs uncompressed on both sides.
GZIP_CAN_COMPRESS_SSE = "exclude_content_types" in inspect.signature(GZipMiddleware).parameters
JSON_BODY = {"rows": [{"id": i, "text": "lorem ipsum dolor sit amet " * 3} for i in range(200)]}
SSE_EVENTS = 31
NDJSON_RECORDS = 10


def gzip_app(*, cvdiag_outside: bool) -> FastAPI:
    app = FastAPI()

    @app.get("/json")
    async def as_json() -> JSONResponse:
        return JSONResponse(JSON_BODY)

    async def sse() -> AsyncIterator[bytes]:
        for i in range(SSE_EVENTS):
            yield b'data: {"token": "word %d"}\n\n' % i

    async def ndjson() -> AsyncIterator[bytes]:
        for i in range(NDJSON_RECORDS):
            yield json.dumps({"i": i, "text": "x" * 300}).encode() + b"\n"

    @app.get("/sse")
    async def as_sse() -> StreamingResponse:
        return StreamingResponse(sse(), media_type="text/event-stream")

    @app.get("/ndjson")
    async def as_ndjson() -> StreamingResponse:
        return StreamingResponse(ndjson(), media_type="application/x-ndjson")

    options: dict[str, Any] = {"minimum_size": 10}
    if GZIP_CAN_COMPRESS_SSE:  # Starlette leaves event streams alone unless told otherwise
        options["exclude_content_types"] = ()
    if cvdiag_outside:
        app.add_middleware(GZipMiddleware, **options)
        app.add_middleware(CvdiagMiddleware)  # added last: outermost, it sees gzip bytes
    else:
        app.add_middleware(CvdiagMiddleware)
        app.add_middleware(GZipMiddleware, **options)
    return app


@pytest.mark.parametrize("server", ["uvicorn", "hypercorn"])
@pytest.mark.parametrize("tier", ["default", "debug"])
@pytest.mark.parametrize("path", ["json", "sse", "ndjson"])
def test_sizes_and_counts_are_the_apps_beside_compression(
    cvdiag_events: CvdiagEvents, path: str, tier: str, server: str
) -> None:
    sink = cvdiag_events(tier)
    seen: dict[bool, tuple[int, int, bytes]] = {}
    for outside in (False, True):
        test_id = new_uuid7()
        with SERVERS[server](gzip_app(cvdiag_outside=outside)) as url:
            with httpx.Client(timeout=10) as client:
                reply = client.get(
                    f"{url}/{path}",
                    headers={"x-test-id": test_id, "accept-encoding": "gzip"},
                )
            if path != "sse" or GZIP_CAN_COMPRESS_SSE:
                assert reply.headers.get("content-encoding") == "gzip"
            meta = settled(sink, test_id)[-1]["metadata"]
        seen[outside] = (meta["content_length"], meta["sse_event_count"], reply.content)
    assert seen[False] == seen[True]
    length, count, body = seen[False]
    assert length == len(body)  # the app's own bytes, decompressed
    expected = {"json": 0, "sse": SSE_EVENTS, "ndjson": NDJSON_RECORDS}[path]
    assert count == expected
    assert gzip.compress(body)  # the client got the whole body back


# --- the rest of the response's shape -------------------------------------------------------


def test_head_counts_no_body_and_exclusions_use_the_apps_path(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    app = FastAPI()
    app.add_middleware(CvdiagMiddleware, exclude_paths=["/health"])

    async def mounted(scope: Any, receive: Any, send: Any) -> None:
        # What uvicorn --root-path /api hands the app: a path that still includes the root.
        await app({**scope, "root_path": "/api"}, receive, send)

    @app.api_route("/page", methods=["GET", "HEAD"])
    async def page() -> JSONResponse:
        return JSONResponse({"text": "x" * 500})

    @app.get("/health")
    async def health() -> dict[str, bool]:
        return {"ok": True}

    head_id, health_id = new_uuid7(), new_uuid7()
    with serve_uvicorn(mounted) as url:
        reply = httpx.head(f"{url}/api/page", headers={"x-test-id": head_id}, timeout=10)
        assert reply.status_code == 200
        httpx.get(f"{url}/api/health", headers={"x-test-id": health_id}, timeout=10)
        envelopes = settled(sink, head_id)
    assert envelopes[-1]["metadata"]["content_length"] == 0
    assert story(sink, health_id) == []
    assert terminals(list(sink.envelopes))  # the HEAD request's, and only it
