"""An integration's own boundary tests, on the two one-line files of this folder.

The names are used exactly as a showcase integration uses them (``agents._cvdiag_backend``,
``_shared.cvdiag_bootstrap``); every assertion reads the ``CVDIAG {json}`` lines really written
to ``sys.stdout``, through ``capsys``, as the integrations' tests do.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import _shared.cvdiag_bootstrap as bootstrap
import pytest
from agents._cvdiag_backend import (
    CvdiagBackendMiddleware,
    LlmCallScope,
    _RequestCtx,
    emit_agent_enter,
    emit_agent_exit,
    scrub,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

ELEVEN = {
    "backend.request.ingress",
    "backend.agent.enter",
    "backend.llm.call.start",
    "backend.llm.call.heartbeat",
    "backend.llm.call.response",
    "backend.sse.first_byte",
    "backend.sse.event",
    "backend.sse.aborted",
    "backend.agent.exit",
    "backend.response.complete",
    "backend.error.caught",
}
EDGE_KEYS = {
    "cf-ray",
    "cf-mitigated",
    "cf-cache-status",
    "x-railway-edge",
    "x-railway-request-id",
    "x-hikari-trace",
    "retry-after",
    "via",
    "server",
}
TEST_ID = "0190a9c0-1a2b-7c3d-8e4f-5a6b7c8d9e0f"
UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
SLUG = "ms-agent-python"


def envelopes(out: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("CVDIAG ") :])
        for line in out.splitlines()
        if line.startswith("CVDIAG {")
    ]


@pytest.fixture(autouse=True)
def debug_tier(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SHOWCASE_ENV", "test")
    monkeypatch.setenv("CVDIAG_DEBUG", "1")
    bootstrap.setup({"SHOWCASE_ENV": "test", "CVDIAG_DEBUG": "1"})
    yield
    bootstrap.setup({"SHOWCASE_ENV": "test"})


def client() -> TestClient:
    async def stream(request: Request) -> Response:
        ctx = getattr(request.state, "cvdiag", None)
        if ctx is not None:
            emit_agent_enter(ctx, agent_name="showcase", model_id="gpt-4o-mini")

        async def body() -> Any:
            if ctx is None:
                yield b"data: off\n\n"
                return
            async with LlmCallScope(ctx, provider="openai", model="gpt-4o-mini", interval_s=0.02):
                # Outstanding until a heartbeat is out: waited for, never timed.
                while not any(b == "backend.llm.call.heartbeat" for b in seen_boundaries()):
                    await asyncio.sleep(0.01)
                yield b"data: hello\n\n"
                yield b"data: world\n\n"
            emit_agent_exit(ctx, terminal_outcome="ok", total_duration_ms=1)

        return StreamingResponse(body(), media_type="text/event-stream")

    async def boom(request: Request) -> Response:
        raise RuntimeError("upstream rejected key sk-test-12345 Bearer abc.def.ghi")

    async def state(request: Request) -> Response:
        return JSONResponse({"ctx": getattr(request.state, "cvdiag", None) is not None})

    app = Starlette(
        routes=[
            Route("/", stream, methods=["POST"]),
            Route("/boom", boom, methods=["POST"]),
            Route("/state", state),
        ]
    )
    app.add_middleware(CvdiagBackendMiddleware)
    return TestClient(app, raise_server_exceptions=False)


_written: list[str] = []


def seen_boundaries() -> list[str]:
    return _written


def watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Note which boundaries are written, for code that waits on a heartbeat rather than for a
    time. The face writes to the ``sys.stdout`` in force, ``capsys``'s once the test runs (pytest
    sets it again as each phase starts: so this is called from the test's body), and a wrapper
    around it sees each line as it is written."""
    real = sys.stdout

    class Watch:
        def write(self, text: str) -> int:
            if text.startswith("CVDIAG {"):
                _written.append(json.loads(text[7:])["boundary"])
            return real.write(text)

        def flush(self) -> None:
            real.flush()

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    _written.clear()
    monkeypatch.setattr(sys, "stdout", Watch())


async def drive_abort() -> None:
    async def unbounded() -> Any:
        i = 0
        while True:
            yield f"data: chunk-{i}\n\n".encode()
            i += 1

    inner = StreamingResponse(unbounded(), media_type="text/event-stream")

    async def call_next(_request: Request) -> Response:
        return inner

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(b"x-aimock-context", SLUG.encode())],
        "query_string": b"",
    }
    mw = CvdiagBackendMiddleware(app=lambda *a: None)
    response = await mw.dispatch(Request(scope, receive), call_next)
    body = response.body_iterator  # type: ignore[attr-defined]
    await body.__anext__()
    await body.aclose()


def test_all_eleven_boundaries_across_stream_abort_and_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    watch(monkeypatch)
    app = client()
    headers = {"x-test-id": TEST_ID, "x-aimock-context": SLUG}
    assert app.post("/", headers=headers).status_code == 200
    asyncio.run(drive_abort())
    assert app.post("/boom", headers=headers).status_code == 500

    written = envelopes(capsys.readouterr().out)
    assert {e["boundary"] for e in written} == ELEVEN
    assert all(e["layer"] == "backend" and e["slug"] == SLUG for e in written)
    assert all(UUID7.match(e["test_id"]) for e in written)
    forwarded = [e for e in written if e["test_id"] == TEST_ID]
    assert {e["boundary"] for e in forwarded} == ELEVEN - {"backend.sse.aborted"}
    ingress = next(e for e in forwarded if e["boundary"] == "backend.request.ingress")
    assert set(ingress["edge_headers"]) == EDGE_KEYS
    # The happy stream's story, in order, ends with its one terminal.
    story = [e["boundary"] for e in forwarded if e["boundary"] != "backend.error.caught"]
    assert story[0] == "backend.request.ingress"
    assert story.index("backend.agent.enter") < story.index("backend.llm.call.start")
    assert story.index("backend.llm.call.response") < story.index("backend.agent.exit")
    assert story.count("backend.response.complete") == 2  # the stream's, and the 500's


def test_a_secret_in_a_raised_message_is_scrubbed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    client().post("/boom", headers={"x-aimock-context": SLUG})
    out = capsys.readouterr().out
    (error,) = [e for e in envelopes(out) if e["boundary"] == "backend.error.caught"]
    assert error["metadata"]["exception_type"] == "RuntimeError"
    assert "sk-test-12345" not in out
    assert "Bearer abc" not in out
    assert "[REDACTED]" in error["metadata"]["message_scrubbed"]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("key sk-test-12345 here", "sk-test-12345"),
        ("sk-abcdefghijklmnopqrstuvwx", "sk-abcdefghijklmnopqrstuvwx"),
        ("auth Bearer secrettoken", "secrettoken"),
        ("https://user:pw@host/path", ":pw@"),
    ],
)
def test_scrub_redacts_the_showcase_shapes(text: str, secret: str) -> None:
    assert secret not in scrub(text)
    assert "[REDACTED]" in scrub(text)


def test_scrub_of_none_is_empty() -> None:
    assert scrub(None) == ""


def test_heartbeats_of_a_call_outside_any_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    watch(monkeypatch)

    async def run() -> None:
        ctx = _RequestCtx(test_id=TEST_ID, slug=SLUG, demo="default")
        async with LlmCallScope(ctx, provider="openai", model="m", interval_s=0.05):
            while seen_boundaries().count("backend.llm.call.heartbeat") < 2:
                await asyncio.sleep(0.01)

    asyncio.run(run())
    written = envelopes(capsys.readouterr().out)
    assert [e["boundary"] for e in written] == [
        "backend.llm.call.start",
        "backend.llm.call.heartbeat",
        "backend.llm.call.heartbeat",
        "backend.llm.call.response",
    ]
    assert all(e["test_id"] == TEST_ID and e["slug"] == SLUG for e in written)
    beats = [e for e in written if e["boundary"] == "backend.llm.call.heartbeat"]
    assert all(isinstance(e["metadata"]["elapsed_ms_since_start"], int) for e in beats)


def test_a_stream_closed_through_dispatch_is_aborted_not_complete(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    asyncio.run(drive_abort())
    written = envelopes(capsys.readouterr().out)
    (aborted,) = [e for e in written if e["boundary"] == "backend.sse.aborted"]
    assert aborted["metadata"]["termination_kind"] in {"rst", "timeout", "chunk_error"}
    assert aborted["metadata"]["bytes_before_abort"] > 0
    assert not [e for e in written if e["boundary"] == "backend.response.complete"]


def test_setup_switches_the_tier(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    watch(monkeypatch)
    assert bootstrap.current_tier() == "debug"
    client().post("/", headers={"x-aimock-context": SLUG})
    assert "backend.sse.event" in {e["boundary"] for e in envelopes(capsys.readouterr().out)}

    monkeypatch.delenv("CVDIAG_DEBUG")  # the tier in force is the higher of setup's and the env's
    bootstrap.setup({"SHOWCASE_ENV": "test"})
    assert bootstrap.current_tier() == "default"
    client().post("/", headers={"x-aimock-context": SLUG})
    at_default = {e["boundary"] for e in envelopes(capsys.readouterr().out)}
    assert "backend.agent.enter" in at_default
    assert not at_default & {"backend.request.ingress", "backend.sse.event"}

    bootstrap.setup({"SHOWCASE_ENV": "test", "CVDIAG_DEBUG": "1"})  # setup alone switches it
    assert bootstrap.current_tier() == "debug"


def test_a_tier_set_in_the_environment_after_setup_counts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CVDIAG_DEBUG")
    bootstrap.setup({"SHOWCASE_ENV": "test"})
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    monkeypatch.setenv("CVDIAG_VERBOSE", "1")  # after setup, as a test may set it

    async def call() -> None:
        ctx = _RequestCtx(test_id=TEST_ID, slug=SLUG, demo="default")
        async with LlmCallScope(ctx, provider="openai", model="m", interval_s=10.0):
            pass

    asyncio.run(call())
    assert bootstrap.current_tier() == "verbose"
    boundaries = [e["boundary"] for e in envelopes(capsys.readouterr().out)]
    assert boundaries == ["backend.llm.call.start", "backend.llm.call.response"]


def test_emit_cvdiag_writes_through_the_same_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    bootstrap.emit_cvdiag(
        {
            "boundary": "backend.error.caught",
            "outcome": "err",
            "test_id": TEST_ID,
            "slug": SLUG,
            "metadata": {"exception_type": "X", "message_scrubbed": "sk-test-12345", "extra": 1},
        }
    )
    (line,) = envelopes(capsys.readouterr().out)
    assert line["test_id"] == TEST_ID
    assert line["metadata"]["message_scrubbed"] == "[REDACTED]"
    assert "extra" not in line["metadata"]


def test_nothing_at_all_is_written_when_the_flag_is_unset(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CVDIAG_BACKEND_EMITTER", raising=False)
    app = client()
    assert app.post("/").text == "data: off\n\n"
    assert app.get("/state").json() == {"ctx": False}
    asyncio.run(drive_abort())

    async def call() -> None:
        ctx = _RequestCtx(test_id=TEST_ID, slug=SLUG, demo="default")
        emit_agent_enter(ctx, agent_name="a", model_id="m")
        async with LlmCallScope(ctx, provider="openai", model="m", interval_s=0.01):
            await asyncio.sleep(0)
        emit_agent_exit(ctx, terminal_outcome="ok", total_duration_ms=1)

    asyncio.run(call())
    bootstrap.emit_cvdiag({"boundary": "backend.agent.enter", "test_id": TEST_ID})
    assert capsys.readouterr().out == ""
