"""One agent backend, run as the same scenario again and again with one thing changed: the real
pieces ``cvdiag diff`` and ``cvdiag flakes`` are tested on.

A Starlette app with ``CvdiagMiddleware`` on uvicorn; ``POST /chat`` enters
``agent_scope("planner")`` and streams an answer from the fake provider through an instrumented
httpx client (OpenAI's chat completions, streamed), relaying each token as an SSE event. What
changes between runs is asked per request: the prompt (``prompt``), a provider directive
(``x-scenario-provider``, forwarded as ``x-fake-provider`` so the prompt and its fingerprint
stay the same), the backend's timeout on the provider (``x-scenario-llm-timeout``), edge headers
sent by the client (a proxy's ``via``), the client's own timeout, the LLM calls per turn
(``x-scenario-calls``), and a client that cuts the stream after its first event.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
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
    agent_scope,
    configure,
    flush,
    instrument_httpx,
)
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.support.servers import serve_uvicorn

SYSTEM = "You are a planner."


def build_app(provider_url: str) -> Starlette:
    host = provider_url.removeprefix("http://")

    async def chat(request: Request) -> Response:
        body = await request.json()
        directive = request.headers.get("x-scenario-provider")
        timeout = float(request.headers.get("x-scenario-llm-timeout", "30"))
        calls = int(request.headers.get("x-scenario-calls", "1"))

        async def stream() -> AsyncIterator[str]:
            async with agent_scope("planner", model_id="gpt-4o-mini"):
                client = instrument_httpx(
                    httpx.AsyncClient(timeout=timeout), llm_hosts={host: "openai"}
                )
                ask = {
                    "model": "gpt-4o-mini",
                    "stream": True,
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": body["prompt"]},
                    ],
                }
                headers = {"x-fake-provider": directive} if directive else {}
                url = f"{provider_url}/v1/chat/completions"
                try:
                    async with client:
                        for _ in range(calls):  # more than one: an agent asking again (a loop)
                            async with client.stream("POST", url, json=ask, headers=headers) as got:
                                async for line in got.aiter_lines():
                                    if line.startswith("data: {"):
                                        yield f"event: TEXT_MESSAGE_CONTENT\ndata: {line[6:]}\n\n"
                                        await asyncio.sleep(0.005)
                except httpx.TimeoutException:
                    yield f"event: RUN_ERROR\ndata: {json.dumps({'message': 'timeout'})}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/chat", chat, methods=["POST"])])
    app.add_middleware(CvdiagMiddleware, slug="scenario")
    return app


@contextmanager
def backend(log: Path) -> Iterator[str]:
    """The fake provider and the backend, cvdiag at the debug tier writing to ``log``."""
    configure(
        Settings(enabled=True, tier=Tier.DEBUG, heartbeat_interval=0.2), sinks=[FileSink(str(log))]
    )
    try:
        with (
            serve_fake_provider(FakeProvider(reply="hello there my friend")) as provider,
            serve_uvicorn(build_app(provider)) as url,
        ):
            yield url
    finally:
        flush()
        configure(Settings(), sinks=[MemorySink()])


def run(
    url: str,
    log: Path,
    test_id: str,
    *,
    prompt: str = "plan my day",
    provider: str | None = None,
    llm_timeout: float | None = None,
    headers: Mapping[str, str] | None = None,
    client_timeout: float | None = None,
    cut: bool = False,
    calls: int = 1,
) -> None:
    """One conversation under ``test_id``; returns once its terminal is in ``log``."""
    sent = {"x-test-id": test_id, **(headers or {})}
    if provider:
        sent["x-scenario-provider"] = provider
    if calls != 1:
        sent["x-scenario-calls"] = str(calls)
    if llm_timeout is not None:
        sent["x-scenario-llm-timeout"] = str(llm_timeout)
    with httpx.Client(timeout=client_timeout or 30) as client:
        try:
            with client.stream("POST", f"{url}/chat", json={"prompt": prompt}, headers=sent) as r:
                for line in r.iter_lines():
                    if cut and line.startswith("data:"):
                        break  # the connection closes with the stream: cut after one event
        except httpx.TimeoutException:
            pass  # the client gave up: the story the log must tell
    wait_for_terminal(log, test_id)


def wait_for_terminal(log: Path, test_id: str) -> None:
    """Until the test id's terminal is written (a condition, not a time: the deadline only bounds
    a failure)."""
    deadline = time.monotonic() + 30
    needle = f'"test_id":"{test_id}"'
    while time.monotonic() < deadline:
        flush()
        text = log.read_text() if log.exists() else ""
        for line in text.splitlines():
            if needle in line and (
                "backend.response.complete" in line or "backend.sse.aborted" in line
            ):
                return
        time.sleep(0.02)
    raise AssertionError(f"no terminal for {test_id} in {log}")


def renamed(log: Path, test_id: str, new_id: str) -> str:
    """The lines of ``test_id`` in ``log`` with ``new_id`` in its place: a run reused as another
    run's (the lines are real, only the id is new)."""
    needle = f'"test_id":"{test_id}"'
    return "".join(
        line.replace(needle, f'"test_id":"{new_id}"') + "\n"
        for line in log.read_text().splitlines()
        if needle in line
    )
