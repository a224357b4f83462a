"""The showcase face under a real uvicorn server on 127.0.0.1 with real httpx clients: an SSE
stream told to its end, a client that leaves mid-stream, a raising route. The lines are read
from the ``sys.stdout`` in force (``capsys``), as the integrations' tests read them."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag.scrubbing.rules import fake
from cvdiag.showcase import (
    CvdiagBackendMiddleware,
    LlmCallScope,
    emit_agent_enter,
    emit_agent_exit,
)
from cvdiag.showcase.bootstrap import setup
from tests.support.servers import serve_uvicorn

KEY = "sk-proj-" + fake("url", 48)
SLUG = "ms-agent-python"


def app() -> Starlette:
    async def chat(request: Request) -> Response:
        ctx = request.state.cvdiag
        emit_agent_enter(ctx, agent_name="showcase", model_id="gpt-4o-mini")
        endless = request.query_params.get("endless") == "1"

        async def body() -> Any:
            async with LlmCallScope(ctx, provider="openai", model="gpt-4o-mini", interval_s=10):
                yield b"data: hello\n\n"
                i = 0
                while endless:  # until the client leaves
                    yield f"data: chunk-{i}\n\n".encode()
                    i += 1
                    await asyncio.sleep(0.01)
                yield b"data: world\n\n"
            emit_agent_exit(ctx, terminal_outcome="ok", total_duration_ms=1)

        return StreamingResponse(body(), media_type="text/event-stream")

    async def boom(request: Request) -> Response:
        raise RuntimeError(f"upstream rejected key {KEY}")

    application = Starlette(
        routes=[Route("/", chat, methods=["POST"]), Route("/boom", boom, methods=["POST"])]
    )
    application.add_middleware(CvdiagBackendMiddleware)
    return application


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    setup({"SHOWCASE_ENV": "test", "CVDIAG_DEBUG": "1"})
    with serve_uvicorn(app()) as url:
        yield url


class Lines:
    """What the face wrote to ``sys.stdout`` so far, read as it comes (the server is a thread).

    Read without taking: ``capsys.readouterr()`` reads the capture and then empties it, two
    steps, and a line the server thread writes between them is lost (a 30 s wait for the abort
    once ran out on a machine running three suites: the abort line had gone that way). So the
    capture's bytes are copied whole, one call that no write can split, and only those past the
    last look are new. Each line is parsed once: an endless stream writes a hundred lines a
    second, and parsing them all again at every look took the GIL from the server thread."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        del capsys  # asked for so that ``sys.stdout`` is its capture while the test runs
        self.text = ""  # all of it, as written
        self.seen = 0  # bytes of the capture already looked at
        self.rest = ""  # a line not yet ended
        self.envelopes: list[dict[str, Any]] = []

    def of(self, test_id: str) -> list[dict[str, Any]]:
        captured = sys.stdout.buffer
        assert isinstance(captured, io.BytesIO), "Lines reads capsys's capture of sys.stdout"
        written = captured.getvalue()
        out = written[self.seen :].decode()  # cut between two writes, each whole UTF-8
        self.seen = len(written)
        self.text += out
        *lines, self.rest = (self.rest + out).split("\n")
        self.envelopes += [json.loads(line[7:]) for line in lines if line.startswith("CVDIAG {")]
        return [envelope for envelope in self.envelopes if envelope["test_id"] == test_id]

    def until(self, test_id: str, boundary: str) -> list[dict[str, Any]]:
        """The request's envelopes once ``boundary`` is among them (a deadline only for failure)."""
        deadline = time.monotonic() + 30
        while True:
            found = self.of(test_id)
            if any(e["boundary"] == boundary for e in found):
                return found
            assert time.monotonic() < deadline, [e["boundary"] for e in found]
            time.sleep(0.01)


def test_an_sse_stream_told_to_its_end(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    test_id = "0190a9c0-1a2b-7c3d-8e4f-5a6b7c8d9e01"
    with httpx.Client(base_url=server, timeout=10) as client:
        response = client.post("/", headers={"x-test-id": test_id, "x-aimock-context": SLUG})
    assert response.text == "data: hello\n\ndata: world\n\n"
    story = [e["boundary"] for e in Lines(capsys).until(test_id, "backend.response.complete")]
    assert story == [
        "backend.request.ingress",
        "backend.agent.enter",
        "backend.llm.call.start",
        "backend.sse.first_byte",
        "backend.sse.event",
        "backend.sse.event",
        "backend.llm.call.response",
        "backend.agent.exit",
        "backend.response.complete",
    ]


def test_a_client_that_leaves(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    test_id = "0190a9c0-1a2b-7c3d-8e4f-5a6b7c8d9e02"
    with (
        httpx.Client(base_url=server, timeout=10) as client,
        client.stream(
            "POST", "/?endless=1", headers={"x-test-id": test_id, "x-aimock-context": SLUG}
        ) as response,
    ):
        for _ in response.iter_lines():
            break  # the first line read, the client goes
    envelopes = Lines(capsys).until(test_id, "backend.sse.aborted")
    (aborted,) = [e for e in envelopes if e["boundary"] == "backend.sse.aborted"]
    assert aborted["metadata"]["termination_kind"] == "rst"
    assert aborted["metadata"]["bytes_before_abort"] > 0
    assert all(e["slug"] == SLUG for e in envelopes)
    assert "backend.response.complete" not in [e["boundary"] for e in envelopes]


def test_a_raising_route(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    test_id = "0190a9c0-1a2b-7c3d-8e4f-5a6b7c8d9e03"
    with httpx.Client(base_url=server, timeout=10) as client:
        response = client.post("/boom", headers={"x-test-id": test_id, "x-aimock-context": SLUG})
    assert response.status_code == 500
    lines = Lines(capsys)
    envelopes = lines.until(test_id, "backend.response.complete")
    (error,) = [e for e in envelopes if e["boundary"] == "backend.error.caught"]
    assert error["metadata"]["message_scrubbed"] == "upstream rejected key [REDACTED]"
    assert KEY not in lines.text


def test_a_test_id_that_is_no_uuid7_is_replaced(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with httpx.Client(base_url=server, timeout=10) as client:
        response = client.post("/", headers={"x-test-id": "d4-run-7", "x-aimock-context": SLUG})
    minted = response.headers["x-test-id"]  # cvdiag echoes the request's id
    assert minted != "d4-run-7"
    assert minted[14] == "7"  # a UUIDv7
    assert Lines(capsys).until(minted, "backend.response.complete")


def test_lines_lose_no_line_a_thread_writes_while_they_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The server thread writes while the test looks: every line it wrote is read. A capture
    read and then emptied (``capsys.readouterr()``) loses the lines written between the two, and
    with the interpreter switching threads as often as it can, some of these land there."""
    test_id = "0190a9c0-1a2b-7c3d-8e4f-5a6b7c8d9e04"
    count = 200_000
    written = threading.Event()

    def server_thread() -> None:
        for i in range(count):
            sys.stdout.write(f'CVDIAG {{"test_id": "{test_id}", "boundary": "b{i}"}}\n')
        written.set()

    lines = Lines(capsys)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    writer = threading.Thread(target=server_thread)
    writer.start()
    try:
        while not written.is_set():
            lines.of(test_id)
    finally:
        writer.join()
        sys.setswitchinterval(interval)
    assert [e["boundary"] for e in lines.of(test_id)] == [f"b{i}" for i in range(count)]


def test_a_line_written_as_lines_read_the_capture_is_kept(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure above made certain: the server's line lands the moment the capture has been
    read. ``capsys.readouterr()`` reads it (its ``getvalue``) and then empties it, and the line
    that came between is gone; ``Lines`` never empties it. A reader that does not go through
    ``getvalue`` gets the line written after its look instead, and finds it at the next."""
    test_id = "0190a9c0-1a2b-7c3d-8e4f-5a6b7c8d9e05"
    arrived: list[str] = []

    def line(boundary: str) -> None:
        arrived.append(boundary)
        sys.stdout.write(f'CVDIAG {{"test_id": "{test_id}", "boundary": "{boundary}"}}\n')

    capture: Any = type(sys.stdout)  # capsys's CaptureIO
    read = capture.getvalue

    def read_then_a_line_lands(self: Any) -> str:
        value: str = read(self)
        if not arrived[1:]:
            line("backend.sse.aborted")
        return value

    monkeypatch.setattr(capture, "getvalue", read_then_a_line_lands)
    line("backend.sse.event")
    lines = Lines(capsys)
    lines.of(test_id)
    if not arrived[1:]:  # the look read no ``getvalue``: the line lands right after it
        line("backend.sse.aborted")
    assert [e["boundary"] for e in lines.of(test_id)] == arrived
