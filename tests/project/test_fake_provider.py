"""The bundled fake provider (examples/fake_provider.py) fails when asked, through the real SDKs.

The examples' offline runs rely on these directives; the rest of the suite on its knobs, which
tests/outbound/test_httpx.py, tests/outbound/test_llm_sdks.py and tests/e2e/test_stories.py
exercise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples.fake_provider import CREATED, FAIL_MID_MESSAGE, FakeProvider, serve_fake_provider


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeProvider, str]]:
    provider = FakeProvider(reply="deterministic words")
    with serve_fake_provider(provider) as url:
        yield provider, url


def chat_client(url: str, timeout: float = 10) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0, timeout=timeout)


def ask(client: openai.OpenAI, text: str, **options: object) -> str:
    answer = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": text}],
        **options,  # type: ignore[call-overload]
    )
    return str(answer.choices[0].message.content)


def test_a_message_without_a_directive_gets_the_same_answer_every_time(
    served: tuple[FakeProvider, str],
) -> None:
    _, url = served
    client = chat_client(url)
    first = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi [fake:oops]"}]
    )
    again = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi [fake:oops]"}]
    )
    assert first.model_dump() == again.model_dump()
    assert first.created == CREATED
    assert first.choices[0].message.content == "deterministic words"


def test_a_status_in_the_message_is_the_answer(served: tuple[FakeProvider, str]) -> None:
    provider, url = served
    client = chat_client(url)
    with pytest.raises(openai.RateLimitError):
        ask(client, "hello [fake:429]")
    with pytest.raises(openai.InternalServerError):
        ask(client, "hello [fake:500]", stream=True)
    # Anthropic's SDK through its own API, the same directive.
    messages = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
    with pytest.raises(anthropic.RateLimitError):
        messages.messages.create(
            model="claude-test",
            max_tokens=16,
            messages=[{"role": "user", "content": "hello [fake:429]"}],
        )
    assert provider.requests[-1].path == "/v1/messages"


def test_a_status_in_the_header_is_the_answer(served: tuple[FakeProvider, str]) -> None:
    _, url = served
    with pytest.raises(openai.InternalServerError):
        ask(chat_client(url), "hello", extra_headers={"x-fake-provider": "503"})


def test_a_stall_holds_the_answer_until_the_caller_gives_up(
    served: tuple[FakeProvider, str],
) -> None:
    _, url = served
    with pytest.raises(openai.APITimeoutError):
        ask(chat_client(url, timeout=0.3), "hello [fake:stall]")
    # A bounded stall answers in the end; the provider is not wedged by the one left behind.
    assert ask(chat_client(url), "hello [fake:stall=0.1]") == "deterministic words"
    assert ask(chat_client(url), "hello") == "deterministic words"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(status=st.integers(400, 599), where=st.sampled_from(["body", "header"]))
def test_every_error_status_can_be_asked_for(
    served: tuple[FakeProvider, str], status: int, where: str
) -> None:
    _, url = served
    body = {"model": "m", "messages": [{"role": "user", "content": f"[fake:{status}]"}]}
    headers = {}
    if where == "header":
        body["messages"] = [{"role": "user", "content": "hello"}]
        headers["x-fake-provider"] = str(status)
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert answer.status_code == status
    assert answer.json()["error"]["type"] == "fake_error"


def _read_chat(client: openai.OpenAI, prompt: Any, words: list[str]) -> None:
    """Stream a chat answer into ``words``: what came before an error stays there."""
    for chunk in client.chat.completions.create(model="gpt-test", messages=prompt, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            words.append(chunk.choices[0].delta.content)


def _read_messages(client: anthropic.Anthropic, prompt: Any, texts: list[str]) -> None:
    with client.messages.stream(model="claude-test", max_tokens=16, messages=prompt) as stream:
        texts.extend(stream.text_stream)


PROMPT_HELLO: Any = [{"role": "user", "content": "hello"}]


def test_fail_mid_answers_200_then_reports_the_providers_own_error(
    served: tuple[FakeProvider, str],
) -> None:
    _, url = served
    prompt = [{"role": "user", "content": "hello [fake:fail-mid]"}]
    # Chat Completions: one word, then the error object the SDK raises as an APIError.
    words: list[str] = []
    with pytest.raises(openai.APIError) as chat_error:
        _read_chat(chat_client(url), prompt, words)
    assert words == ["deterministic "]
    assert chat_error.value.body == {
        "message": FAIL_MID_MESSAGE,
        "type": "server_error",
        "param": None,
        "code": None,
    }
    # Anthropic Messages: its ``event: error``, overloaded.
    messages = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
    texts: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as anthropic_error:
        _read_messages(messages, prompt, texts)
    assert texts == ["deterministic "]
    assert anthropic_error.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    # The Responses API: a ``response.failed`` event ends the stream, no ``response.completed``.
    events = list(
        chat_client(url).responses.create(
            model="gpt-test", input="hello [fake:fail-mid]", stream=True
        )
    )
    assert [e.type for e in events] == [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.failed",
    ]
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.status == "failed"
    assert failed.error is not None
    assert (failed.error.code, failed.error.message) == ("server_error", FAIL_MID_MESSAGE)
    # Not streamed, the answer comes whole; and the header asks for it as the message does.
    assert ask(chat_client(url), "hello [fake:fail-mid]") == "deterministic words"
    header = {"x-fake-provider": "fail-mid"}
    stream = chat_client(url).chat.completions.create(
        model="gpt-test", messages=PROMPT_HELLO, stream=True, extra_headers=header
    )
    with pytest.raises(openai.APIError):
        list(stream)  # the SDK reads the stream lazily: the error comes as it is read


def test_the_sdks_responses_stream_helper_reads_the_fake_as_the_api(
    served: tuple[FakeProvider, str],
) -> None:
    """``responses.stream()`` checks the order of items, parts and deltas: the fake keeps it."""
    provider, url = served
    with chat_client(url).responses.stream(model="gpt-test", input="hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas).split() == provider.reply.split()  # a word a delta, as in chat
    assert final.output_text == provider.reply


def test_gemini_answers_the_directives_too(served: tuple[FakeProvider, str]) -> None:
    _, url = served
    body = {"contents": [{"role": "user", "parts": [{"text": "hello [fake:503]"}]}]}
    answer = httpx.post(f"{url}/v1beta/models/gemini-test:generateContent", json=body, timeout=10)
    assert answer.status_code == 503
    body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
    answer = httpx.post(f"{url}/v1beta/models/gemini-test:generateContent", json=body, timeout=10)
    assert answer.status_code == 200
