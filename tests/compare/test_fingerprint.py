"""``request_fingerprint`` on ``backend.llm.call.start`` (additive to v1): a short hash over the
model, the system prompt, the tool names and the last user message, written by the instrumented
client from the request it sends (real OpenAI and Anthropic SDKs against the fake provider),
never the text itself."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag import MemorySink, Settings, Tier, configure, instrument_httpx
from cvdiag.providers.fingerprint import fingerprint
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.schema_check import assert_valid

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

SECRET_PROMPT = "my-distinctive-prompt-text-4711"


def _starts(ask: Any) -> list[Mapping[str, Any]]:
    memory = MemorySink()
    configure(Settings(enabled=True, tier=Tier.VERBOSE), sinks=[memory])
    try:
        with serve_fake_provider(FakeProvider(reply="ok")) as url:
            asyncio.run(ask(url))
    finally:
        configure(Settings(), sinks=[MemorySink()])
    for envelope in memory.envelopes:
        assert_valid(envelope)
        assert SECRET_PROMPT not in str(envelope)  # the hash, never the text
    return [e for e in memory.envelopes if e["boundary"] == "backend.llm.call.start"]


def test_openai_calls_carry_a_fingerprint_that_follows_the_prompt() -> None:
    async def ask(url: str) -> None:
        http = instrument_httpx(
            httpx.AsyncClient(), llm_hosts={url.removeprefix("http://"): "openai"}
        )
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", http_client=http)
        for prompt in (SECRET_PROMPT, SECRET_PROMPT, SECRET_PROMPT + " again"):
            await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": prompt},
                ],
            )
        await http.aclose()

    first, second, third = (s["metadata"]["request_fingerprint"] for s in _starts(ask))
    assert re.fullmatch(r"[0-9a-f]{12}", first)
    assert first == second != third


def test_anthropic_calls_carry_one_too() -> None:
    async def ask(url: str) -> None:
        http = instrument_httpx(
            httpx2.AsyncClient(), llm_hosts={url.removeprefix("http://"): "anthropic"}
        )
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", http_client=http)
        await client.messages.create(
            model="claude-3-5-haiku-latest",
            max_tokens=16,
            system="be brief",
            messages=[{"role": "user", "content": SECRET_PROMPT}],
        )
        await http.aclose()

    [start] = _starts(ask)
    assert re.fullmatch(r"[0-9a-f]{12}", start["metadata"]["request_fingerprint"])


def _body(system: str, user: str, tools: list[str]) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "tools": [{"type": "function", "function": {"name": n}} for n in tools],
    }


texts = st.text(max_size=50)


@given(texts, texts, st.lists(st.text(min_size=1, max_size=10), max_size=4), texts)
def test_each_part_changes_the_fingerprint(
    system: str, user: str, tools: list[str], other: str
) -> None:
    base = fingerprint(_body(system, user, tools), "m")
    assert fingerprint(_body(system, user, list(reversed(tools))), "m") == base  # order-free
    if other != user:
        assert fingerprint(_body(system, other, tools), "m") != base
    if other != system:
        assert fingerprint(_body(other, user, tools), "m") != base
    assert fingerprint(_body(system, user, tools), "m2") != base


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(
        st.text(max_size=8), children, max_size=4
    )


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), _containers))
def test_any_json_body_gives_a_fingerprint_never_an_error(body: Any) -> None:
    parsed = body if isinstance(body, dict) else {"messages": body, "tools": body, "system": body}
    assert re.fullmatch(r"[0-9a-f]{12}", fingerprint(parsed, "m"))


def test_earlier_turns_do_not_change_it() -> None:
    turn = [{"role": "user", "content": "last"}]
    earlier = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert fingerprint({"messages": earlier + turn}, "m") == fingerprint({"messages": turn}, "m")
