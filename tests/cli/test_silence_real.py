"""Silence before an LLM call, end to end (issue 25): a real uvicorn app that, like Google ADK
on its first request, works 0.9 s before its LLM call begins, a fake provider that then holds
the call, and a client that gives up once the call has begun. The client waited the whole
time for nothing: ``cvdiag classify`` must say the backend kept it waiting, not that the client
left of its own accord."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag import (
    CvdiagMiddleware,
    FileSink,
    MemorySink,
    Settings,
    Tier,
    configure,
    flush,
    instrument_httpx,
)
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.support.cli import cvdiag
from tests.support.servers import serve_uvicorn

TEST_ID = "silence-before-call"
#: The framework's own work before its first LLM call (ADK's was 0.9 s).
WORK_BEFORE_CALL = 0.9


class Announcing(httpx.AsyncBaseTransport):
    """The real transport, telling the test when the LLM request goes out: cvdiag's transport
    wraps this one and has written ``backend.llm.call.start`` by then, so the client leaves
    after the call began, by order, not by a timer."""

    def __init__(self, sent: threading.Event) -> None:
        self.transport = httpx.AsyncHTTPTransport()
        self.sent = sent

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.set()
        return await self.transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self.transport.aclose()


def build_app(provider_url: str, sent: threading.Event) -> Starlette:
    host = provider_url.removeprefix("http://")
    llm = instrument_httpx(
        httpx.AsyncClient(transport=Announcing(sent)), llm_hosts={host: "openai"}
    )

    async def agent(request: Request) -> Response:
        async def events() -> AsyncIterator[str]:
            await asyncio.sleep(WORK_BEFORE_CALL)  # session set-up, tools, planning: no byte
            answer = await llm.post(
                f"{provider_url}/v1/chat/completions",
                json={
                    "model": "gpt-4o-mini",
                    "messages": [{"role": "user", "content": "hi [fake:stall]"}],
                },
            )
            yield f"data: {json.dumps(answer.json())}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/run_sse", agent, methods=["POST"])])
    app.add_middleware(CvdiagMiddleware, slug="adk")
    return app


def _wait_for(memory: MemorySink, boundary: str, timeout: float = 20.0) -> None:
    # Not a threshold: a bound on waiting for the app to unwind the request the client left.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e["test_id"] == TEST_ID and e["boundary"] == boundary for e in memory.envelopes):
            return
        time.sleep(0.05)
    raise AssertionError(f"{boundary} never came")


@pytest.fixture(params=[Tier.VERBOSE, Tier.DEBUG], ids=lambda t: t.label)
def silent_log(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    tier: Tier = request.param
    path = tmp_path / "backend.log"
    memory = MemorySink()
    configure(Settings(enabled=True, tier=tier), sinks=[FileSink(path), memory])
    sent = threading.Event()
    try:
        with (
            serve_fake_provider(FakeProvider(stall_limit=5.0)) as provider_url,
            serve_uvicorn(build_app(provider_url, sent)) as base,
            httpx.Client(base_url=base, timeout=10) as client,
        ):
            with client.stream("POST", "/run_sse", headers={"x-test-id": TEST_ID}):
                assert sent.wait(10), "the app never began its LLM call"
            # Leaving the block closed the connection unread: the client gave up.
            _wait_for(memory, "backend.llm.call.response")
        flush()
    finally:
        configure(Settings(), sinks=[MemorySink()])
    return path


def test_silence_before_the_call_is_the_backend_keeping_the_client_waiting(
    silent_log: Path,
) -> None:
    result = cvdiag("classify", TEST_ID, str(silent_log), "--json")
    assert result.returncode == 0, result.stderr
    verdict: dict[str, Any] = json.loads(result.stdout)
    assert verdict["flap_class"] == "stalled-backend", verdict["reason"]
    assert "the client had got nothing for" in verdict["reason"]
    # The silence is the framework's work before the call: the call's start shows it.
    assert verdict["evidence"]["quiet_before_call_ms"] > 0
