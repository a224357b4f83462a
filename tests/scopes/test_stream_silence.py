"""A streamed LLM call's heartbeats say how long its stream has waited on the provider for the
next chunk (``chunk_wait_ms``), so a provider gone silent mid-stream shows in the log, and an
app slow to consume what the provider already sent does not. Real uvicorn provider, real httpx
and httpx2 clients instrumented by ``instrument_httpx``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from cvdiag import instrument_httpx, llm_call
from cvdiag.pytest_plugin import CvdiagEvents
from tests.support.servers import serve_uvicorn

#: The provider's pause after its first two chunks, and the heartbeat interval: several beats
#: fall in the pause.
PAUSE_S = 0.4
BEAT_S = 0.05


async def _chat(request: Request) -> StreamingResponse:
    if request.query_params.get("shape") == "usage-null":
        return StreamingResponse(_usage_null_frames(), media_type="text/event-stream")
    pause = float(request.query_params.get("pause", PAUSE_S))

    async def frames() -> AsyncIterator[bytes]:
        for word in ("Hel", "lo"):
            yield b'data: {"choices": [{"delta": {"content": "%s"}}]}\n\n' % word.encode()
        await asyncio.sleep(pause)  # the provider goes quiet mid-stream
        yield b"data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream")


async def _usage_null_frames() -> AsyncIterator[bytes]:
    """Chat Completions asked for usage (``stream_options``): every chunk says ``"usage":
    null``, the finish reason comes in its own chunk, then the usage chunk, then ``[DONE]``."""
    for delta, finish in (({"content": "Hi"}, None), ({}, "stop")):
        chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None}
        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
    await asyncio.sleep(PAUSE_S)  # the usage chunk and [DONE] come later: nobody reads them
    yield b'data: {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}\n\n'
    yield b"data: [DONE]\n\n"


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    app = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])
    with serve_uvicorn(app) as url:
        yield url


def _streaming_beats(events: CvdiagEvents) -> list[dict[str, Any]]:
    beats = [dict(e["metadata"]) for e in events.of("backend.llm.call.heartbeat")]
    return [b for b in beats if "first_token_delta_ms" in b]


def _read(library: Any, provider: str, *, pause: float, consume_s: float = 0.0) -> None:
    host = provider.removeprefix("http://")

    async def read() -> None:
        async with instrument_httpx(library.AsyncClient(), llm_hosts={host: "openai"}) as client:
            body = {"model": "m", "stream": True, "messages": []}
            url = f"{provider}/v1/chat/completions?pause={pause}"
            async with client.stream("POST", url, json=body) as response:
                async for _ in response.aiter_bytes():
                    await asyncio.sleep(consume_s)  # the app's own work on each chunk

    asyncio.run(read())


@pytest.mark.parametrize("library", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_heartbeats_show_a_provider_gone_quiet(
    cvdiag_events: CvdiagEvents, provider: str, library: Any
) -> None:
    events = cvdiag_events("verbose", heartbeat_interval=BEAT_S)
    _read(library, provider, pause=PAUSE_S)
    (answer,) = events.of("backend.llm.call.response")
    assert answer["outcome"] == "ok"
    waits = [b["chunk_wait_ms"] for b in _streaming_beats(events) if "chunk_wait_ms" in b]
    # Beats inside the pause see one read waiting longer and longer, past a whole interval.
    assert len(waits) >= 3, _streaming_beats(events)
    assert waits == sorted(waits)
    assert waits[-1] >= BEAT_S * 1000 * 2


@pytest.mark.parametrize("library", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_an_app_slow_to_consume_is_no_silent_provider(
    cvdiag_events: CvdiagEvents, provider: str, library: Any
) -> None:
    """Everything arrives at once; the app spends a while on each chunk: nothing waits on the
    network, so no beat may claim the provider went quiet."""
    events = cvdiag_events("verbose", heartbeat_interval=BEAT_S)
    _read(library, provider, pause=0.0, consume_s=PAUSE_S)
    beats = _streaming_beats(events)
    assert beats, "the app's pauses span several beats"
    assert all(b.get("chunk_wait_ms", 0) < BEAT_S * 1000 for b in beats), beats


def test_a_hand_marked_first_chunk_claims_no_wait(cvdiag_events: CvdiagEvents) -> None:
    """Only an instrumented client sees each read: a hand-written stream that marks its first
    chunk never says it waits on the network."""
    events = cvdiag_events("verbose", heartbeat_interval=BEAT_S)

    async def stream_by_hand() -> None:
        async with llm_call("fake", "fake-1") as call:
            call.mark_first_chunk()
            await asyncio.sleep(BEAT_S * 4)

    asyncio.run(stream_by_hand())
    beats = _streaming_beats(events)
    assert beats
    assert not any("chunk_wait_ms" in b for b in beats)


def test_an_app_that_stops_at_the_finish_reason_ended_a_whole_answer(
    cvdiag_events: CvdiagEvents,
) -> None:
    """A common loop ``break``s on the chunk that carries ``finish_reason``, before ``[DONE]``:
    the answer was whole, so the call is ok, not cut short (real SDK, real fake provider)."""
    import openai

    from examples.fake_provider import FakeProvider

    events = cvdiag_events("verbose")
    fake = FakeProvider(reply="one two three")
    with serve_uvicorn(fake.app) as url:
        host = url.removeprefix("http://")

        async def read() -> list[str]:
            client = openai.AsyncOpenAI(
                base_url=f"{url}/v1",
                api_key="sk-test",
                max_retries=0,
                http_client=instrument_httpx(httpx2.AsyncClient(), llm_hosts={host: "openai"}),
            )
            words: list[str] = []
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            async with stream:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        words.append(chunk.choices[0].delta.content)
                    if chunk.choices and chunk.choices[0].finish_reason:
                        break
            return words

        words = asyncio.run(read())
    assert "".join(words).split() == ["one", "two", "three"]
    (answer,) = events.of("backend.llm.call.response")
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("ok", None)


@pytest.mark.parametrize("library", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_a_finish_reason_beside_usage_null_also_ends_a_whole_answer(
    cvdiag_events: CvdiagEvents, provider: str, library: Any
) -> None:
    """With ``stream_options={"include_usage": True}`` every chunk carries ``"usage": null``;
    the app that stops at the finish reason still ended a whole answer."""
    events = cvdiag_events("verbose")
    host = provider.removeprefix("http://")

    async def read() -> None:
        async with instrument_httpx(library.AsyncClient(), llm_hosts={host: "openai"}) as client:
            body = {"model": "m", "stream": True, "messages": []}
            url = f"{provider}/v1/chat/completions?shape=usage-null"
            async with client.stream("POST", url, json=body) as response:
                async for line in response.aiter_lines():
                    if '"finish_reason": "stop"' in line:
                        break

    asyncio.run(read())
    (answer,) = events.of("backend.llm.call.response")
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("ok", None)
