"""``finish_reasons`` on ``backend.llm.call.response`` (issue 25, additive to v1): why the model
stopped, as the provider's answer says it, read by the instrumented client from a real fake
provider, streamed and not, and written on the call's response envelope."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from cvdiag import MemorySink, Settings, Tier, configure, instrument_httpx
from examples.fake_provider import FakeProvider, serve_fake_provider


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_the_response_envelope_carries_the_finish_reasons(stream: bool) -> None:
    memory = MemorySink()
    configure(Settings(enabled=True, tier=Tier.VERBOSE), sinks=[memory])
    try:
        with serve_fake_provider(FakeProvider(reply="hi there")) as url:
            host = url.removeprefix("http://")

            async def ask() -> None:
                async with instrument_httpx(
                    httpx.AsyncClient(), llm_hosts={host: "openai"}
                ) as client:
                    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
                    async with client.stream(
                        "POST", f"{url}/v1/chat/completions", json={**body, "stream": stream}
                    ) as answer:
                        await answer.aread()

            asyncio.run(ask())
    finally:
        configure(Settings(), sinks=[MemorySink()])
    [response] = [e for e in memory.envelopes if e["boundary"] == "backend.llm.call.response"]
    assert response["metadata"]["finish_reasons"] == ["stop"]
