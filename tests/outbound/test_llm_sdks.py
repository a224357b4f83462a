"""The real OpenAI and Anthropic SDKs, called from inside a real cvdiag-instrumented app.

A FastAPI app with ``CvdiagMiddleware`` runs under uvicorn; its handlers open agent scopes and
call two fake providers (examples/fake_provider.py, one per SDK, each on its own port)
through SDK clients built on instrumented httpx2 clients. A real httpx client calls the app with
an ``x-test-id``; the test then reads what cvdiag wrote and what the providers saw.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from cvdiag import CvdiagMiddleware, MemorySink, agent_scope, instrument_httpx
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from examples.fake_provider import FakeProvider
from tests.schema_check import assert_valid
from tests.support.servers import serve_uvicorn

Envelope = Mapping[str, Any]
PROMPT = [{"role": "user", "content": "Say hello"}]


def build_app(openai_url: str, anthropic_url: str) -> FastAPI:
    # Each fake provider's host:port names its provider, as api.openai.com would.
    hosts = {
        openai_url.removeprefix("http://"): "openai",
        anthropic_url.removeprefix("http://"): "anthropic",
    }
    oai = openai.AsyncOpenAI(
        base_url=f"{openai_url}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=instrument_httpx(httpx2.AsyncClient(), llm_hosts=hosts),
    )
    oai_sync = openai.OpenAI(
        base_url=f"{openai_url}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=instrument_httpx(httpx2.Client(), llm_hosts=hosts),
    )
    claude = anthropic.AsyncAnthropic(
        base_url=anthropic_url,
        api_key="sk-ant-test",
        max_retries=0,
        http_client=instrument_httpx(httpx2.AsyncClient(), llm_hosts=hosts),
    )
    app = FastAPI()
    app.add_middleware(CvdiagMiddleware)

    @app.post("/openai")
    async def chat_openai(stream: bool = False) -> dict[str, str]:
        async with agent_scope("openai-agent", model_id="gpt-4o-mini"):
            if not stream:
                reply = await oai.chat.completions.create(model="gpt-4o-mini", messages=PROMPT)
                return {"text": reply.choices[0].message.content or ""}
            chunks = await oai.chat.completions.create(
                model="gpt-4o-mini",
                messages=PROMPT,
                stream=True,
                stream_options={"include_usage": True},
            )
            text = [c.choices[0].delta.content or "" async for c in chunks if c.choices]
            return {"text": "".join(text)}

    @app.post("/anthropic")
    async def chat_anthropic(stream: bool = False) -> dict[str, str]:
        async with agent_scope("claude-agent", model_id="claude-sonnet"):
            if not stream:
                message = await claude.messages.create(
                    model="claude-sonnet", max_tokens=64, messages=PROMPT
                )
                return {"text": "".join(b.text for b in message.content if b.type == "text")}
            async with claude.messages.stream(
                model="claude-sonnet", max_tokens=64, messages=PROMPT
            ) as events:
                return {"text": await events.get_final_text()}

    @app.get("/relay")
    async def relay() -> StreamingResponse:
        @agent_scope("relay-agent")
        async def turn() -> AsyncIterator[str]:
            chunks = await oai.chat.completions.create(
                model="gpt-4o-mini",
                messages=PROMPT,
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield f"data: {chunk.choices[0].delta.content}\n\n"

        return StreamingResponse(turn(), media_type="text/event-stream")

    @app.post("/abandon")
    async def abandon() -> dict[str, str]:
        async with agent_scope("impatient-agent"):
            chunks = await oai.chat.completions.create(
                model="gpt-4o-mini", messages=PROMPT, stream=True
            )
            async for _ in chunks:
                break  # the first chunk is all this agent wanted
            await chunks.close()
        return {"text": "enough"}

    @app.post("/sync")
    @agent_scope("sync-agent")
    def chat_sync() -> dict[str, str]:  # FastAPI runs it in its threadpool
        reply = oai_sync.chat.completions.create(model="gpt-4o", messages=PROMPT)
        return {"text": reply.choices[0].message.content or ""}

    return app


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[str, FakeProvider, FakeProvider]]:
    """The app's base URL and the two providers behind it."""
    for_openai = FakeProvider(chunk_delay=0.005)
    for_anthropic = FakeProvider(chunk_delay=0.005)
    with (
        serve_uvicorn(for_openai.app) as openai_url,
        serve_uvicorn(for_anthropic.app) as anthropic_url,
        serve_uvicorn(build_app(openai_url, anthropic_url)) as app_url,
    ):
        yield app_url, for_openai, for_anthropic


def story(sink: MemorySink, test_id: str) -> list[Envelope]:
    """The request's envelopes, once its response is complete."""
    deadline = time.monotonic() + 10
    while True:
        mine = [env for env in list(sink.envelopes) if env["test_id"] == test_id]
        if any(env["boundary"] == "backend.response.complete" for env in mine):
            return mine
        if time.monotonic() > deadline:
            pytest.fail(f"no backend.response.complete for {test_id}: {mine}")
        time.sleep(0.01)


def the(envelopes: list[Envelope], boundary: str) -> Envelope:
    found = [env for env in envelopes if env["boundary"] == boundary]
    assert len(found) == 1, [env["boundary"] for env in envelopes]
    return found[0]


def call(app_url: str, method: str, path: str) -> tuple[str, httpx.Response]:
    test_id = new_uuid7()
    response = httpx.request(method, f"{app_url}{path}", headers={"x-test-id": test_id}, timeout=10)
    assert response.status_code == 200, response.text
    return test_id, response


def assert_one_call_tree(
    envelopes: list[Envelope], *, agent: str, provider: str, model: str, tokens: int | None
) -> Envelope:
    """ingress → agent.enter → llm.call.start → llm.call.response, one each, linked."""
    for env in envelopes:
        assert_valid(env)
    ingress = the(envelopes, "backend.request.ingress")
    enter = the(envelopes, "backend.agent.enter")
    start = the(envelopes, "backend.llm.call.start")
    answer = the(envelopes, "backend.llm.call.response")
    assert enter["metadata"]["agent_name"] == agent
    assert enter["parent_span_id"] == ingress["span_id"]
    assert the(envelopes, "backend.agent.exit")["metadata"]["terminal_outcome"] == "ok"
    assert start["parent_span_id"] == enter["span_id"]
    assert answer["parent_span_id"] == start["span_id"]
    assert start["metadata"]["provider"] == answer["metadata"]["provider"] == provider
    assert start["metadata"]["model"] == answer["metadata"]["model"] == model
    assert answer["metadata"]["response_token_count"] == tokens
    return answer


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_sdk(
    cvdiag_events: CvdiagEvents, world: tuple[str, FakeProvider, FakeProvider], stream: bool
) -> None:
    sink = cvdiag_events("verbose")
    app_url, for_openai, _ = world
    test_id, response = call(app_url, "POST", f"/openai?stream={str(stream).lower()}")
    assert response.json()["text"].split() == for_openai.words
    answer = assert_one_call_tree(
        story(sink, test_id),
        agent="openai-agent",
        provider="openai",
        model="gpt-4o-mini",
        tokens=for_openai.completion_tokens,
    )
    assert answer["outcome"] == "ok"
    seen = [r for r in for_openai.requests if r.test_id == test_id]
    assert [(r.model, r.stream) for r in seen] == [("gpt-4o-mini", stream)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_anthropic_sdk(
    cvdiag_events: CvdiagEvents, world: tuple[str, FakeProvider, FakeProvider], stream: bool
) -> None:
    sink = cvdiag_events("verbose")
    app_url, _, for_anthropic = world
    test_id, response = call(app_url, "POST", f"/anthropic?stream={str(stream).lower()}")
    assert response.json()["text"].split() == for_anthropic.words
    assert_one_call_tree(
        story(sink, test_id),
        agent="claude-agent",
        provider="anthropic",
        model="claude-sonnet",
        tokens=for_anthropic.completion_tokens,
    )
    seen = [r for r in for_anthropic.requests if r.test_id == test_id]
    assert [(r.model, r.stream) for r in seen] == [("claude-sonnet", stream)]


def test_a_streamed_agent_turn_relayed_as_sse(
    cvdiag_events: CvdiagEvents, world: tuple[str, FakeProvider, FakeProvider]
) -> None:
    sink = cvdiag_events("verbose")
    app_url, for_openai, _ = world
    test_id, response = call(app_url, "GET", "/relay")
    assert response.text.count("data:") == for_openai.completion_tokens
    assert_one_call_tree(
        story(sink, test_id),
        agent="relay-agent",
        provider="openai",
        model="gpt-4o-mini",
        tokens=for_openai.completion_tokens,
    )
    assert [r.test_id for r in for_openai.requests if r.test_id == test_id] == [test_id]


def test_a_sync_handler_in_the_threadpool(
    cvdiag_events: CvdiagEvents, world: tuple[str, FakeProvider, FakeProvider]
) -> None:
    sink = cvdiag_events("verbose")
    app_url, for_openai, _ = world
    test_id, _ = call(app_url, "POST", "/sync")
    assert_one_call_tree(
        story(sink, test_id),
        agent="sync-agent",
        provider="openai",
        model="gpt-4o",
        tokens=for_openai.completion_tokens,
    )
    assert [r.test_id for r in for_openai.requests if r.test_id == test_id] == [test_id]


def test_an_abandoned_sdk_stream_ends_its_call_once(
    cvdiag_events: CvdiagEvents, world: tuple[str, FakeProvider, FakeProvider]
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    app_url, for_openai, _ = world
    test_id, _ = call(app_url, "POST", "/abandon")
    envelopes = story(sink, test_id)
    time.sleep(0.1)  # several heartbeat intervals: nothing more for this call
    mine = [env for env in list(sink.envelopes) if env["test_id"] == test_id]
    assert len(mine) == len(envelopes)
    answer = the(mine, "backend.llm.call.response")
    assert answer["outcome"] == "err"
    assert answer["metadata"]["error_class"] == "StreamCancelled"
    assert answer["metadata"]["response_token_count"] is None
    start = the(mine, "backend.llm.call.start")
    assert all(
        env["parent_span_id"] == start["span_id"]
        for env in mine
        if env["boundary"].startswith("backend.llm.call.") and env is not start
    )
    assert the(mine, "backend.agent.exit")["metadata"]["terminal_outcome"] == "ok"
    assert [r.test_id for r in for_openai.requests if r.test_id == test_id] == [test_id]
