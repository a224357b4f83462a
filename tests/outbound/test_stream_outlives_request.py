"""A streamed LLM call is followed by what reads it, from any task or thread, and ends when its
stream ends: read to the end (``ok``), closed unread (``StreamCancelled``) or at shutdown
(``Shutdown``), never at the end of the request that opened it. A call that goes on after its
request's terminal says so, once, on its response: ``after_request_end_ms``.

The app is a graph run as LangGraph does it: the handler starts the run in a task of its own,
which reads each chunk of the real ``openai`` SDK's stream from a new task (or a worker thread)
and hands it to the SSE response. The client leaves after the first event; the run then goes on
reading. Real uvicorn servers, the fake provider, instrumented httpx2 clients.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from cvdiag import CvdiagMiddleware, MemorySink, instrument_httpx
from cvdiag.otel.genai import AFTER_REQUEST_END
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from examples.fake_provider import FakeProvider
from tests.support.asgi_apps import wait_for
from tests.support.cli import cvdiag
from tests.support.otel import sdk
from tests.support.servers import serve_uvicorn

Envelope = Mapping[str, Any]
TERMINALS = ("backend.response.complete", "backend.sse.aborted")
CHAT: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "Say hello"}],
    "stream": True,
    "stream_options": {"include_usage": True},
}


def story(sink: MemorySink | CvdiagEvents, test_id: str) -> list[Envelope]:
    return [e for e in list(sink.envelopes) if e["test_id"] == test_id]


def names(envelopes: list[Envelope]) -> list[str]:
    return [e["boundary"] for e in envelopes]


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[FakeProvider, str]]:
    fake = FakeProvider()
    with serve_uvicorn(fake.app) as url:
        yield fake, url


def graph_app(
    provider_url: str, sink: MemorySink | CvdiagEvents, *, then: str, reader: str
) -> FastAPI:
    """``POST /run``: an SSE response fed by a graph run that outlives it.

    The run reads the first chunk, waits until the request's terminal is written (the client
    has left), then, per ``then``: ``read`` the rest, ``close`` the stream unread, or ``hold``
    it open until the server shuts down. ``reader`` is ``tasks`` (each chunk read by a new
    asyncio task) or ``threads`` (each chunk read by the sync SDK in a worker thread).
    """
    app = FastAPI()
    app.add_middleware(CvdiagMiddleware)
    hosts = {provider_url.removeprefix("http://"): "openai"}
    options: dict[str, Any] = {"api_key": "sk-test", "max_retries": 0}
    runs: set[asyncio.Task[None]] = set()
    hold = asyncio.Event()  # never set: a held stream stays open until shutdown

    async def request_over(test_id: str) -> None:
        while not any(n in TERMINALS for n in names(story(sink, test_id))):
            await asyncio.sleep(0.01)

    async def run(test_id: str, out: asyncio.Queue[str | None]) -> None:
        if reader == "tasks":
            client = openai.AsyncOpenAI(
                base_url=f"{provider_url}/v1",
                http_client=instrument_httpx(httpx2.AsyncClient(), llm_hosts=hosts),
                **options,
            )
            stream = await client.chat.completions.create(**CHAT)
            chunks = stream.__aiter__()

            async def next_chunk() -> Any:
                try:
                    return await chunks.__anext__()
                except StopAsyncIteration:
                    return None

            async def read() -> Any:
                return await asyncio.create_task(next_chunk())  # a new task per chunk

            async def close() -> None:
                await stream.close()
        else:
            sync = openai.OpenAI(
                base_url=f"{provider_url}/v1",
                http_client=instrument_httpx(httpx2.Client(), llm_hosts=hosts),
                **options,
            )
            sync_stream = await asyncio.to_thread(sync.chat.completions.create, **CHAT)
            sync_chunks = iter(sync_stream)

            async def read() -> Any:
                return await asyncio.to_thread(next, sync_chunks, None)  # a worker thread

            async def close() -> None:
                await asyncio.to_thread(sync_stream.close)

        await out.put("first")
        await read()
        await out.put(None)
        await request_over(test_id)  # the client has left and the request is over
        if then == "read":
            while await read() is not None:
                pass
        elif then == "close":
            await close()
        else:
            await hold.wait()

    @app.post("/run")
    async def start(body: dict[str, str]) -> StreamingResponse:
        out: asyncio.Queue[str | None] = asyncio.Queue()
        task = asyncio.create_task(run(body["test_id"], out))  # the request's context copied
        runs.add(task)
        task.add_done_callback(runs.discard)

        async def events() -> AsyncIterator[bytes]:
            while (item := await out.get()) is not None:
                yield f"data: {item}\n\n".encode()
            await asyncio.Event().wait()  # the response stays open: only the client ends it

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def flowing(sink: MemorySink | CvdiagEvents, test_id: str) -> bool:
    """Whether a heartbeat of the request's call says its first token came."""
    return any(
        e["boundary"] == "backend.llm.call.heartbeat" and "first_token_delta_ms" in e["metadata"]
        for e in story(sink, test_id)
    )


def leave_after_first_event(
    url: str, test_id: str, until: Callable[[], bool] = lambda: True
) -> None:
    with (
        httpx.Client(base_url=url, timeout=10) as client,
        client.stream(
            "POST", "/run", headers={"x-test-id": test_id}, json={"test_id": test_id}
        ) as response,
    ):
        for line in response.iter_lines():
            if line.startswith("data:"):
                wait_for(until)
                return  # hang up mid-stream


def the_call(sink: MemorySink | CvdiagEvents, test_id: str) -> tuple[list[Envelope], Envelope]:
    wait_for(lambda: "backend.llm.call.response" in names(story(sink, test_id)))
    time.sleep(0.2)  # heartbeats are due every 20 ms: any after the response would show
    envelopes = story(sink, test_id)
    (answer,) = [e for e in envelopes if e["boundary"] == "backend.llm.call.response"]
    return envelopes, answer


def assert_outlived(envelopes: list[Envelope], answer: Envelope) -> None:
    """The request's terminal came first, the call's one response after it, saying so."""
    order = names(envelopes)
    assert order.count("backend.sse.aborted") == 1, order
    assert order.index("backend.sse.aborted") < envelopes.index(answer), order
    assert envelopes[-1] is answer, order  # no heartbeat after the response
    late = answer["metadata"]["after_request_end_ms"]
    assert isinstance(late, int)
    assert late >= 0


@pytest.mark.parametrize("reader", ["tasks", "threads"])
def test_a_stream_read_on_after_the_client_left_ends_ok_when_read_to_its_end(
    cvdiag_events: CvdiagEvents, provider: tuple[FakeProvider, str], reader: str
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    test_id = new_uuid7()
    with serve_uvicorn(graph_app(provider[1], sink, then="read", reader=reader)) as url:
        leave_after_first_event(url, test_id)
        envelopes, answer = the_call(sink, test_id)
    assert_outlived(envelopes, answer)
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("ok", None)
    assert answer["metadata"]["response_token_count"] == len(provider[0].words)


def test_the_model_kept_generating_is_said_by_classify_and_on_the_span(
    cvdiag_events: CvdiagEvents, provider: tuple[FakeProvider, str], tmp_path: Path
) -> None:
    """What the call's response says reaches the reader of the log and of the traces: ``cvdiag
    classify`` says the model kept generating after the client left, and the LLM call's span
    carries ``cvdiag.llm.after_request_end_ms`` (the real SDK, its in-memory exporter)."""
    exporter, _ = sdk()
    exporter.clear()
    sink = cvdiag_events("verbose", heartbeat_interval=0.02, otel=True)
    test_id = new_uuid7()
    with serve_uvicorn(graph_app(provider[1], sink, then="read", reader="tasks")) as url:
        # The client leaves once the log shows the model's tokens flowing (a heartbeat with
        # the first token), as a user leaves a stream already under way. Left at once, the
        # first heartbeat may come after the hang-up, and the verdict is then a wait, not a
        # call that went on: the order would be the machine's, not the story's.
        leave_after_first_event(url, test_id, until=lambda: flowing(sink, test_id))
        envelopes, answer = the_call(sink, test_id)
    assert_outlived(envelopes, answer)
    late = answer["metadata"]["after_request_end_ms"]
    spans = exporter.get_finished_spans()
    (server,) = [s for s in spans if (s.attributes or {}).get("cvdiag.test_id") == test_id]
    assert server.context is not None
    mine = [
        s for s in spans if s.context is not None and s.context.trace_id == server.context.trace_id
    ]
    (llm,) = [s for s in mine if AFTER_REQUEST_END in (s.attributes or {})]
    assert (llm.attributes or {})[AFTER_REQUEST_END] == late
    log = tmp_path / "backend.log"
    log.write_bytes(b"".join(b"CVDIAG " + line + b"\n" for line in sink.lines))
    result = cvdiag("classify", test_id, str(log), "--json")
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert "the model kept generating" in verdict["reason"], verdict["reason"]


def test_a_stream_closed_unread_after_the_request_is_stream_cancelled(
    cvdiag_events: CvdiagEvents, provider: tuple[FakeProvider, str]
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    provider[0].chunk_delay = 0.05  # still streaming when the run closes it
    test_id = new_uuid7()
    try:
        with serve_uvicorn(graph_app(provider[1], sink, then="close", reader="tasks")) as url:
            leave_after_first_event(url, test_id)
            envelopes, answer = the_call(sink, test_id)
    finally:
        provider[0].chunk_delay = 0.0
    assert_outlived(envelopes, answer)
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("err", "StreamCancelled")


def test_a_stream_still_open_at_shutdown_ends_with_the_process(
    cvdiag_events: CvdiagEvents, provider: tuple[FakeProvider, str]
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    test_id = new_uuid7()
    app = graph_app(provider[1], sink, then="hold", reader="tasks")
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        leave_after_first_event(f"http://127.0.0.1:{port}", test_id)
        # The request is over; its call is not: it beats on, as a held-open stream truly is.
        wait_for(lambda: "backend.sse.aborted" in names(story(sink, test_id)))
        beats = len([n for n in names(story(sink, test_id)) if n.endswith(".heartbeat")])
        wait_for(
            lambda: (
                len([n for n in names(story(sink, test_id)) if n.endswith(".heartbeat")]) > beats
            )
        )
        assert "backend.llm.call.response" not in names(story(sink, test_id))
    finally:
        server.should_exit = True  # lifespan shutdown ends what is still outstanding
        thread.join(10)
    envelopes, answer = the_call(sink, test_id)
    assert_outlived(envelopes, answer)
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("err", "Shutdown")
