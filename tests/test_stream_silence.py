"""A streamed LLM call's heartbeats say when its latest chunk came (``last_chunk_delta_ms``), so
a stream that went silent mid-way shows in the log. Real uvicorn provider, real httpx and httpx2
clients instrumented by ``instrument_httpx``."""

from __future__ import annotations

import asyncio
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
    async def frames() -> AsyncIterator[bytes]:
        for word in ("Hel", "lo"):
            yield b'data: {"choices": [{"delta": {"content": "%s"}}]}\n\n' % word.encode()
        await asyncio.sleep(PAUSE_S)  # the provider goes quiet mid-stream
        yield b"data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    with serve_uvicorn(
        Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])
    ) as url:
        yield url


def _beats(events: CvdiagEvents) -> list[dict[str, Any]]:
    return [dict(e["metadata"]) for e in events.of("backend.llm.call.heartbeat")]


@pytest.mark.parametrize("library", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_heartbeats_show_a_stream_gone_quiet(
    cvdiag_events: CvdiagEvents, provider: str, library: Any
) -> None:
    events = cvdiag_events("verbose", heartbeat_interval=BEAT_S)
    host = provider.removeprefix("http://")

    async def read() -> None:
        async with instrument_httpx(library.AsyncClient(), llm_hosts={host: "openai"}) as client:
            body = {"model": "m", "stream": True, "messages": []}
            async with client.stream("POST", f"{provider}/v1/chat/completions", json=body) as r:
                async for _ in r.aiter_bytes():
                    pass

    asyncio.run(read())
    (answer,) = events.of("backend.llm.call.response")
    assert answer["outcome"] == "ok"
    streaming = [b for b in _beats(events) if "first_token_delta_ms" in b]
    assert len(streaming) >= 3, _beats(events)
    for beat in streaming:
        assert beat["first_token_delta_ms"] <= beat["last_chunk_delta_ms"]
        assert beat["last_chunk_delta_ms"] <= beat["elapsed_ms_since_start"]
    # Inside the pause the latest chunk stays where it was while the beats go on.
    quiet = [
        b
        for b in streaming
        if b["elapsed_ms_since_start"] - b["last_chunk_delta_ms"] >= BEAT_S * 1000
    ]
    assert len({b["last_chunk_delta_ms"] for b in quiet}) == 1, streaming
    assert len(quiet) >= 2, streaming


def test_a_hand_marked_first_chunk_claims_no_latest_chunk(cvdiag_events: CvdiagEvents) -> None:
    """Only an instrumented client sees every chunk: a hand-written stream that marks its first
    chunk must not look silent from then on."""
    events = cvdiag_events("verbose", heartbeat_interval=BEAT_S)

    async def stream_by_hand() -> None:
        async with llm_call("fake", "fake-1") as call:
            call.mark_first_chunk()
            await asyncio.sleep(BEAT_S * 4)

    asyncio.run(stream_by_hand())
    beats = _beats(events)
    assert beats
    assert all("first_token_delta_ms" in b for b in beats), beats
    assert not any("last_chunk_delta_ms" in b for b in beats)
