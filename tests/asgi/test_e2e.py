"""End to end: a real uvicorn (and hypercorn) on 127.0.0.1, real httpx and httpx2 clients."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, current_context, emit
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from tests.support.asgi_apps import (
    CLIENTS,
    FAKE_KEY,
    FINAL_SEND_SERVERS,
    ON_EVERY_SERVER,
    boundaries,
    check_all,
    make_app,
    only,
    serve,
    sse_event,
    terminals,
    wait_for,
    wait_terminal,
)

servers = pytest.mark.parametrize("server", ON_EVERY_SERVER)
#: A complete stream, on every server (under trio its final send may be cancelled).
final_send_servers = pytest.mark.parametrize("server", FINAL_SEND_SERVERS)
#: The app or client here is asyncio's own.
asyncio_servers = pytest.mark.parametrize("server", ["uvicorn", "hypercorn"])
clients = pytest.mark.parametrize("client", ["httpx", "httpx2"])


@final_send_servers
@clients
def test_happy_sse_stream(cvdiag_events: CvdiagEvents, server: str, client: str) -> None:
    sink = cvdiag_events("debug")
    test_id = new_uuid7()
    lib = CLIENTS[client]
    with serve(server, make_app()) as url, lib.Client(timeout=10) as http:
        response = http.get(f"{url}/chat/sse?n=5", headers={"x-test-id": test_id})
        assert response.status_code == 200
        assert response.content == "".join(sse_event(i) for i in range(5)).encode()
        envelopes = wait_terminal(sink)
    envelopes = check_all(sink)
    assert boundaries(envelopes) == [
        "backend.request.ingress",
        "backend.sse.first_byte",
        *["backend.sse.event"] * 5,
        "backend.response.complete",
    ]
    assert {e["test_id"] for e in envelopes} == {test_id}
    assert len({e["trace_id"] for e in envelopes}) == 1
    complete = envelopes[-1]["metadata"]
    assert complete["content_length"] == len(response.content)
    assert complete["sse_event_count"] == 5
    assert complete["http_status"] == 200


@servers
@clients
def test_client_reads_two_chunks_and_closes(
    cvdiag_events: CvdiagEvents, server: str, client: str
) -> None:
    sink = cvdiag_events("default")
    lib = CLIENTS[client]
    with serve(server, make_app()) as url, lib.Client(timeout=10) as http:
        with http.stream("GET", f"{url}/chat/sse?n=100000&delay=0.002") as response:
            raw = response.iter_raw()
            received = len(next(raw)) + len(next(raw))
        envelopes = wait_terminal(sink)
    envelopes = check_all(sink, "default")
    (aborted,) = terminals(envelopes)
    assert aborted["boundary"] == "backend.sse.aborted"
    assert aborted["metadata"]["termination_kind"] == "rst"
    assert aborted["metadata"]["termination_cause"] == "client_disconnect"
    assert aborted["metadata"]["bytes_before_abort"] >= received > 0
    assert "backend.error.caught" not in boundaries(envelopes)


@servers
@clients
def test_stream_that_raises_after_two_events(
    cvdiag_events: CvdiagEvents, server: str, client: str
) -> None:
    sink = cvdiag_events("debug")
    lib = CLIENTS[client]
    with serve(server, make_app()) as url, lib.Client(timeout=10) as http:
        body = b""
        with (
            contextlib.suppress(lib.HTTPError),
            http.stream("GET", f"{url}/chat/sse-raises") as response,
        ):
            for part in response.iter_raw():
                body += part
        assert body.startswith(sse_event(0).encode() + sse_event(1).encode())
        envelopes = wait_terminal(sink)
    envelopes = check_all(sink)
    assert boundaries(envelopes)[-2:] == ["backend.error.caught", "backend.sse.aborted"]
    (aborted,) = terminals(envelopes)
    assert aborted["metadata"]["termination_kind"] == "chunk_error"
    assert only(envelopes, "backend.error.caught")["metadata"]["exception_type"] == "RuntimeError"
    assert [
        e["metadata"]["sequence_num"] for e in envelopes if e["boundary"] == "backend.sse.event"
    ] == [0, 1]
    assert FAKE_KEY.encode() not in b"".join(sink.lines)


@servers
@clients
def test_endpoint_that_raises_before_responding(
    cvdiag_events: CvdiagEvents, server: str, client: str
) -> None:
    sink = cvdiag_events("debug")
    lib = CLIENTS[client]
    with serve(server, make_app()) as url, lib.Client(timeout=10) as http:
        response = http.get(f"{url}/chat/raises")
        assert response.status_code == 500  # the host's error handler answered
        envelopes = wait_terminal(sink)
    envelopes = check_all(sink)
    assert boundaries(envelopes) == [
        "backend.request.ingress",
        "backend.error.caught",
        "backend.response.complete",
    ]
    complete = envelopes[-1]
    assert (complete["outcome"], complete["metadata"]["http_status"]) == ("err", 500)
    error = envelopes[-2]["metadata"]
    assert error["exception_type"] == "ValueError"
    assert error["message_scrubbed"] == "upstream refused key [REDACTED]"
    assert error["stack_brief"]
    assert all(not f["file"].startswith("/") for f in error["stack_brief"])
    assert FAKE_KEY.encode() not in b"".join(sink.lines)


async def _agui(request: Request) -> Response:
    async def events() -> Any:
        yield {"event": "RUN_STARTED", "data": '{"threadId": "t1"}'}
        yield {"data": '{"type": "TEXT_MESSAGE_CONTENT", "delta": "hi"}'}
        yield {"data": "multi\nline"}

    return EventSourceResponse(events(), ping=60)


@final_send_servers
@clients
def test_sse_starlette_event_source_response(
    cvdiag_events: CvdiagEvents, server: str, client: str
) -> None:
    sink = cvdiag_events("debug")
    app = Starlette(routes=[Route("/agui", _agui)])
    app.add_middleware(CvdiagMiddleware)
    lib = CLIENTS[client]
    with serve(server, app) as url, lib.Client(timeout=10) as http:
        response = http.get(f"{url}/agui")
        assert response.status_code == 200
        envelopes = wait_terminal(sink)
    envelopes = check_all(sink)
    events = [e["metadata"] for e in envelopes if e["boundary"] == "backend.sse.event"]
    assert [(e["event_type"], e["payload_size_bytes"]) for e in events] == [
        ("RUN_STARTED", len('{"threadId": "t1"}')),
        ("TEXT_MESSAGE_CONTENT", len('{"type": "TEXT_MESSAGE_CONTENT", "delta": "hi"}')),
        ("message", len("multi\nline")),
    ]
    complete = only(envelopes, "backend.response.complete")["metadata"]
    assert complete["sse_event_count"] == 3
    assert complete["content_length"] == len(response.content)


# --- 200 concurrent requests, each with its own test id ------------------------------------------


async def _item(request: Request) -> Response:
    n = request.path_params["n"]

    async def in_task() -> None:
        emit("backend.agent.enter", metadata={"agent_name": f"agent-{n}"})

    await asyncio.create_task(in_task())
    await run_in_threadpool(emit, "backend.agent.exit", metadata={"terminal_outcome": "ok"})
    context = current_context()
    assert context is not None

    async def events() -> Any:
        for i in range(3):
            await asyncio.sleep(0)
            yield sse_event(i)

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"x-seen": context.test_id}
    )


@asyncio_servers
@clients
def test_200_concurrent_requests_keep_their_own_test_ids(
    cvdiag_events: CvdiagEvents, server: str, client: str
) -> None:
    sink = cvdiag_events("debug")
    app = Starlette(routes=[Route("/item/{n:int}", _item)])
    app.add_middleware(CvdiagMiddleware)
    lib = CLIENTS[client]
    ids = {n: new_uuid7() for n in range(200)}

    async def run(url: str) -> list[Any]:
        limits = lib.Limits(max_connections=200)
        async with lib.AsyncClient(timeout=30, limits=limits) as http:
            return await asyncio.gather(
                *(http.get(f"{url}/item/{n}", headers={"x-test-id": ids[n]}) for n in range(200))
            )

    with serve(server, app) as url:
        responses = asyncio.run(run(url))
        wait_for(lambda: len(terminals(list(sink.envelopes))) >= 200)
    assert [r.headers["x-seen"] for r in responses] == [ids[n] for n in range(200)]
    envelopes = check_all(sink)
    request_of = {
        e["span_id"]: int(e["metadata"]["path"].rsplit("/", 1)[1])
        for e in envelopes
        if e["boundary"] == "backend.request.ingress"
    }
    assert len(request_of) == 200
    per_request: dict[int, list[str]] = {n: [] for n in range(200)}
    for envelope in envelopes:
        n = request_of[
            envelope["span_id"]
            if envelope["parent_span_id"] is None
            else envelope["parent_span_id"]
        ]
        assert envelope["test_id"] == ids[n]
        if envelope["boundary"] == "backend.agent.enter":
            assert envelope["metadata"]["agent_name"] == f"agent-{n}"
        per_request[n].append(envelope["boundary"])
    for seen in per_request.values():
        assert sorted(seen) == sorted(
            [
                "backend.request.ingress",
                "backend.agent.enter",
                "backend.agent.exit",
                "backend.sse.first_byte",
                *["backend.sse.event"] * 3,
                "backend.response.complete",
            ]
        )
