"""instrument_httpx: header forwarding and LLM-call recording for httpx and httpx2, sync and async.

Real clients against real uvicorn servers on 127.0.0.1: an echo app (what headers arrived) and
the fake provider (OpenAI- and Anthropic-shaped answers with usage).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from cvdiag import (
    AsyncCvdiagTransport,
    CvdiagTransport,
    MemorySink,
    RequestContext,
    agent_scope,
    instrument_httpx,
    llm_call,
)
from cvdiag.pytest_plugin import CvdiagEvents
from examples.fake_provider import FakeProvider
from tests.support.requests import in_request as request_context
from tests.support.requests import of, one
from tests.support.servers import free_port, serve_uvicorn

Envelope = Mapping[str, Any]

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello"}]}
MESSAGES = {
    "model": "claude-sonnet",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Say hello"}],
}


# --- servers and clients -----------------------------------------------------------------------


async def _echo(request: Request) -> JSONResponse:
    return JSONResponse({"headers": dict(request.headers)})


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    app = Starlette(routes=[Route("/echo", _echo, methods=["GET", "POST"])])
    with serve_uvicorn(app) as url:
        yield url


@pytest.fixture(scope="module")
def provider_server() -> Iterator[tuple[FakeProvider, str]]:
    provider = FakeProvider()
    with serve_uvicorn(provider.app) as url:
        yield provider, url


@pytest.fixture
def provider(provider_server: tuple[FakeProvider, str]) -> Iterator[FakeProvider]:
    fake = provider_server[0]
    fake.requests.clear()
    yield fake
    fake.reply = FakeProvider().reply
    fake.first_byte_delay = fake.chunk_delay = 0.0
    fake.fail_status = None
    fake.first_byte_when = None


@pytest.fixture
def base(provider_server: tuple[FakeProvider, str]) -> str:
    return provider_server[1]


class Client:
    """One face over httpx/httpx2 × sync/async, so each test runs against all four."""

    def __init__(self, library: str, is_async: bool, **options: Any) -> None:
        self.library = importlib.import_module(library)
        self.is_async = is_async
        self.raw = (self.library.AsyncClient if is_async else self.library.Client)(
            timeout=options.pop("timeout", 10.0)
        )
        instrument_httpx(self.raw, **options)

    async def request(self, method: str, url: str, **kwargs: Any) -> Any:
        if self.is_async:
            return await self.raw.request(method, url, **kwargs)
        return self.raw.request(method, url, **kwargs)

    async def stream(self, url: str, body: Any, *, chunks: int | None = None) -> list[bytes]:
        """POST and read the body raw: all of it, or ``chunks`` chunks and then close."""
        got: list[bytes] = []
        if self.is_async:
            async with self.raw.stream("POST", url, json=body) as response:
                async for chunk in response.aiter_raw():
                    got.append(chunk)
                    if chunks is not None and len(got) >= chunks:
                        break
        else:
            with self.raw.stream("POST", url, json=body) as response:
                for chunk in response.iter_raw():
                    got.append(chunk)
                    if chunks is not None and len(got) >= chunks:
                        break
        return got

    async def drop_unclosed(self, url: str, body: Any, *, chunks: int) -> None:
        """Start a streamed response, read ``chunks`` chunks, and drop it without closing it."""
        request = self.raw.build_request("POST", url, json=body)
        if self.is_async:
            response = await self.raw.send(request, stream=True)
            if chunks:
                await response.stream.__aiter__().__anext__()
        else:
            response = self.raw.send(request, stream=True)
            if chunks:
                next(iter(response.stream))
        del response

    async def close(self) -> None:
        if self.is_async:
            await self.raw.aclose()
        else:
            self.raw.close()


VARIANTS = [("httpx", False), ("httpx", True), ("httpx2", False), ("httpx2", True)]
IDS = ["httpx-sync", "httpx-async", "httpx2-sync", "httpx2-async"]


@pytest.fixture(params=VARIANTS, ids=IDS)
async def make_client(request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., Client]]:
    library, is_async = request.param
    made: list[Client] = []

    def make(**options: Any) -> Client:
        client = Client(library, is_async, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


def in_request(
    test_id: str = "req-7", slug: str = "my-demo"
) -> AbstractContextManager[RequestContext]:
    return request_context(test_id, slug)


async def wait_for(sink: MemorySink, boundary: str, timeout: float = 10.0) -> list[Envelope]:
    """Poll without blocking the event loop (it runs the finalizers of dropped streams)."""
    deadline = time.monotonic() + timeout
    while not of(sink, boundary):
        if time.monotonic() > deadline:
            pytest.fail(f"no {boundary} within {timeout}s")
        await asyncio.sleep(0.01)
    return of(sink, boundary)


# --- headers -----------------------------------------------------------------------------------


async def test_forwards_the_test_id_and_slug(
    cvdiag_events: CvdiagEvents, make_client: Callable[..., Client], echo_url: str
) -> None:
    cvdiag_events("default")
    client = make_client()
    with in_request():
        seen = (await client.request("GET", f"{echo_url}/echo")).json()["headers"]
        kept = (
            await client.request("GET", f"{echo_url}/echo", headers={"X-Test-Id": "callers-own"})
        ).json()["headers"]
    outside = (await client.request("GET", f"{echo_url}/echo")).json()["headers"]
    assert seen["x-test-id"] == "req-7"
    assert seen["x-aimock-context"] == "my-demo"
    assert kept["x-test-id"] == "callers-own"  # never overwritten
    assert kept["x-aimock-context"] == "my-demo"
    assert "x-test-id" not in outside  # no request, nothing to forward


async def test_header_names_are_configurable(
    cvdiag_events: CvdiagEvents, make_client: Callable[..., Client], echo_url: str
) -> None:
    cvdiag_events("default")
    client = make_client(test_id_header="X-Run-Id", slug_header=None)
    with in_request():
        seen = (await client.request("POST", f"{echo_url}/echo")).json()["headers"]
    assert seen["x-run-id"] == "req-7"
    assert "x-test-id" not in seen
    assert "x-aimock-context" not in seen
    with in_request(slug="unknown"):
        seen = (await make_client().request("GET", f"{echo_url}/echo")).json()["headers"]
    assert "x-aimock-context" not in seen  # no slug known: none invented


async def test_headers_are_forwarded_even_when_llm_calls_are_not_recorded(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("default")  # llm.call.* are verbose-tier
    with in_request():
        await make_client().request("POST", f"{base}/v1/chat/completions", json=CHAT)
    assert provider.requests[-1].test_id == "req-7"
    assert list(sink.envelopes) == []


# --- LLM calls ---------------------------------------------------------------------------------


async def test_a_json_chat_completion_is_one_llm_call(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("verbose")
    with in_request() as request:
        response = await make_client().request("POST", f"{base}/v1/chat/completions", json=CHAT)
    assert response.json()["usage"]["completion_tokens"] == provider.completion_tokens
    start = one(sink, "backend.llm.call.start")
    assert start["metadata"]["provider"] == "openai-compatible"
    assert start["metadata"]["model"] == "gpt-4o-mini"
    assert start["metadata"]["prompt_token_count_estimate"] > 0
    assert start["parent_span_id"] == request.span_id
    answer = one(sink, "backend.llm.call.response")
    assert answer["outcome"] == "ok"
    assert answer["parent_span_id"] == start["span_id"]
    assert answer["metadata"]["response_token_count"] == provider.completion_tokens
    assert answer["metadata"]["error_class"] is None
    assert {env["test_id"] for env in list(sink.envelopes)} == {"req-7"}
    assert provider.requests[-1].test_id == "req-7"


async def test_an_anthropic_message_is_recognized_by_its_path(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("verbose")
    with in_request(), agent_scope("claude-agent") as agent:
        await make_client().request("POST", f"{base}/v1/messages", json=MESSAGES)
    start = one(sink, "backend.llm.call.start")
    assert start["metadata"]["provider"] == "anthropic"
    assert start["metadata"]["model"] == "claude-sonnet"
    assert start["parent_span_id"] == agent.span_id
    answer = one(sink, "backend.llm.call.response")
    assert answer["metadata"]["response_token_count"] == provider.completion_tokens


@pytest.mark.parametrize(
    ("path", "body", "tokens"),
    [
        (
            "/v1/chat/completions",
            {**CHAT, "stream": True, "stream_options": {"include_usage": True}},
            "all",
        ),
        ("/v1/chat/completions", {**CHAT, "stream": True}, None),
        ("/v1/messages", {**MESSAGES, "stream": True}, "all"),
    ],
    ids=["openai-with-usage", "openai-without-usage", "anthropic"],
)
async def test_a_streamed_answer_takes_its_tokens_from_the_usage_chunk(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
    path: str,
    body: dict[str, Any],
    tokens: str | None,
) -> None:
    sink = cvdiag_events("verbose")
    with in_request():
        chunks = await make_client().stream(f"{base}{path}", body)
    assert b"".join(chunks).count(b"data:") > provider.completion_tokens
    answer = one(sink, "backend.llm.call.response")
    assert answer["outcome"] == "ok"
    expected = provider.completion_tokens if tokens == "all" else None
    assert answer["metadata"]["response_token_count"] == expected


async def test_heartbeats_while_the_provider_thinks_and_none_after(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.05)
    # The provider thinks until the call has beaten three times, not for a fixed time: a loaded
    # machine can keep the heartbeat thread off the CPU for hundreds of milliseconds.
    provider.first_byte_when = lambda: len(of(sink, "backend.llm.call.heartbeat")) >= 3
    with in_request():
        await make_client().stream(f"{base}/v1/messages", {**MESSAGES, "stream": True})
    start = one(sink, "backend.llm.call.start")
    beats = of(sink, "backend.llm.call.heartbeat")
    assert len(beats) >= 3
    assert {env["parent_span_id"] for env in beats} == {start["span_id"]}
    answer = one(sink, "backend.llm.call.response")
    assert list(sink.envelopes)[-1] is answer
    await asyncio.sleep(0.15)
    assert list(sink.envelopes)[-1] is answer


async def test_a_stream_closed_early_ends_its_call_once(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    provider.chunk_delay = 0.01
    with in_request():
        chunks = await make_client().stream(
            f"{base}/v1/chat/completions", {**CHAT, "stream": True}, chunks=1
        )
    assert len(chunks) == 1
    answer = one(sink, "backend.llm.call.response")
    assert answer["outcome"] == "err"
    assert answer["metadata"]["error_class"] == "StreamCancelled"
    await asyncio.sleep(0.1)
    assert len(of(sink, "backend.llm.call.response")) == 1
    assert list(sink.envelopes)[-1] is answer


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
async def test_a_stream_closed_by_its_task_being_cancelled_ends_cancelled(
    cvdiag_events: CvdiagEvents, base: str, provider: FakeProvider, library: str
) -> None:
    # Pinned on every Python: 3.10 has no Task.cancelling(), and a backported task's counter
    # there is never lowered again, so the error in flight is what tells the two closes apart.
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    provider.chunk_delay = 0.05
    reading = asyncio.Event()
    client = Client(library, True)

    async def consume() -> None:
        async with client.raw.stream(
            "POST", f"{base}/v1/chat/completions", json={**CHAT, "stream": True}
        ) as r:
            async for _chunk in r.aiter_raw():
                reading.set()
                await asyncio.sleep(30)  # cancelled here, between two chunks

    try:
        with in_request():
            task = asyncio.create_task(consume())
            await asyncio.wait_for(reading.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        await client.close()
    answer = one(sink, "backend.llm.call.response")
    assert answer["outcome"] == "err"
    assert answer["metadata"]["error_class"] == "CancelledError"


@pytest.mark.parametrize("chunks", [0, 1], ids=["unread", "read-one"])
async def test_a_stream_dropped_unclosed_still_ends_its_call_once(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
    chunks: int,
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    provider.chunk_delay = 0.01
    with in_request():
        await make_client().drop_unclosed(
            f"{base}/v1/chat/completions", {**CHAT, "stream": True}, chunks=chunks
        )
    gc.collect()
    answer = (await wait_for(sink, "backend.llm.call.response"))[0]
    assert answer["outcome"] == "err"
    assert answer["metadata"]["error_class"] in ("StreamCancelledUnclosed", "StreamCancelled")
    await asyncio.sleep(0.1)
    assert len(of(sink, "backend.llm.call.response")) == 1
    assert list(sink.envelopes)[-1] is answer


async def test_an_error_status_is_a_failed_call(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("verbose")
    provider.fail_status = 429
    response = await make_client().request("POST", f"{base}/v1/chat/completions", json=CHAT)
    assert response.status_code == 429
    answer = one(sink, "backend.llm.call.response")
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("err", "HTTP429")


async def test_a_connection_error_propagates_and_ends_the_call(
    cvdiag_events: CvdiagEvents, make_client: Callable[..., Client]
) -> None:
    sink = cvdiag_events("verbose")
    client = make_client()
    with pytest.raises(client.library.ConnectError):
        await client.request("POST", f"http://127.0.0.1:{free_port()}/v1/messages", json=MESSAGES)
    answer = one(sink, "backend.llm.call.response")
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("err", "ConnectError")


async def test_a_read_timeout_is_outcome_timeout(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("verbose")
    provider.first_byte_delay = 1.0
    client = make_client(timeout=0.1)
    with pytest.raises(client.library.ReadTimeout):
        await client.request("POST", f"{base}/v1/chat/completions", json=CHAT)
    answer = one(sink, "backend.llm.call.response")
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("timeout", "ReadTimeout")


async def test_other_requests_are_not_llm_calls(
    cvdiag_events: CvdiagEvents, make_client: Callable[..., Client], base: str, echo_url: str
) -> None:
    sink = cvdiag_events("verbose")
    client = make_client()
    await client.request("GET", f"{base}/v1/chat/completions")  # not a POST
    await client.request("POST", f"{echo_url}/echo", json=CHAT)  # not an LLM path
    assert list(sink.envelopes) == []


async def test_inside_a_hand_written_llm_call_the_client_fills_it_in(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("verbose")
    with in_request(), llm_call("openai", "gpt-4o-mini") as call:
        await make_client().stream(f"{base}/v1/messages", {**MESSAGES, "stream": True})
        assert call.first_chunk_at is not None
        assert call.time_to_first_chunk_ms is not None
    one(sink, "backend.llm.call.start")  # no second call for the same request
    answer = one(sink, "backend.llm.call.response")
    assert answer["metadata"]["response_token_count"] == provider.completion_tokens


async def test_host_and_path_maps_are_configurable(
    cvdiag_events: CvdiagEvents, make_client: Callable[..., Client], base: str, echo_url: str
) -> None:
    sink = cvdiag_events("verbose")
    port = base.rsplit(":", 1)[1]
    await make_client(llm_hosts={f"127.0.0.1:{port}": "openai"}).request(
        "POST", f"{base}/v1/chat/completions", json=CHAT
    )
    assert one(sink, "backend.llm.call.start")["metadata"]["provider"] == "openai"
    sink.clear()
    custom = make_client(llm_paths={"/echo": "acme"})
    await custom.request("POST", f"{echo_url}/echo", json={"model": "acme-1"})
    await custom.request("POST", f"{base}/v1/chat/completions", json=CHAT)  # default paths off
    # The body was JSON, so the call carries its fingerprint (issue 39), whatever its value.
    starts = [dict(env["metadata"]) for env in of(sink, "backend.llm.call.start")]
    assert [len(start.pop("request_fingerprint")) for start in starts] == [12]
    assert starts == [{"provider": "acme", "model": "acme-1", "prompt_token_count_estimate": 0}]
    sink.clear()
    await make_client(detect_llm=False).request("POST", f"{base}/v1/chat/completions", json=CHAT)
    assert list(sink.envelopes) == []


async def test_a_streaming_upload_is_not_read_for_its_model(
    cvdiag_events: CvdiagEvents, make_client: Callable[..., Client], base: str
) -> None:
    sink = cvdiag_events("verbose")
    client = make_client()
    body = b'{"model": "hidden", "messages": []}'
    if client.is_async:

        async def upload() -> AsyncIterator[bytes]:
            yield body

        content: Any = upload()
    else:
        content = iter([body])
    await client.request(
        "POST",
        f"{base}/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json"},
    )
    assert one(sink, "backend.llm.call.start")["metadata"]["model"] == "unknown"
    assert one(sink, "backend.llm.call.response")["outcome"] == "ok"


async def test_nothing_of_the_prompt_or_the_answer_is_recorded(
    cvdiag_events: CvdiagEvents,
    make_client: Callable[..., Client],
    base: str,
    provider: FakeProvider,
) -> None:
    sink = cvdiag_events("debug")
    provider.reply = "zebracompletion " * 5
    client = make_client()
    prompt = [{"role": "user", "content": "quokkaprompt"}]
    with in_request(), agent_scope("a"):
        await client.request(
            "POST", f"{base}/v1/chat/completions", json={"model": "m", "messages": prompt}
        )
        await client.stream(
            f"{base}/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": prompt, "stream": True},
        )
    lines = b"\n".join(sink.lines)
    assert len(of(sink, "backend.llm.call.response")) == 2
    assert b"quokkaprompt" not in lines
    assert b"zebracompletion" not in lines


# --- wiring ------------------------------------------------------------------------------------


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
def test_instrumenting_is_idempotent_and_covers_mounts(library: str) -> None:
    lib = importlib.import_module(library)
    mounted = lib.HTTPTransport()
    client = lib.Client(mounts={"http://example.invalid": mounted, "all://skipped": None})
    assert instrument_httpx(client) is client
    instrument_httpx(client)
    transport = client._transport
    assert isinstance(transport, CvdiagTransport)
    assert not isinstance(transport.transport, CvdiagTransport)
    mounts = list(client._mounts.values())
    wrapped = [m for m in mounts if m is not None]
    assert [m.transport for m in wrapped] == [mounted]
    assert None in mounts
    client.close()
    async_client = lib.AsyncClient()
    instrument_httpx(instrument_httpx(async_client))
    assert isinstance(async_client._transport, AsyncCvdiagTransport)
    assert not isinstance(async_client._transport.transport, AsyncCvdiagTransport)


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
async def test_transport_classes_for_hand_built_clients(
    cvdiag_events: CvdiagEvents, library: str, base: str, provider: FakeProvider
) -> None:
    sink = cvdiag_events("verbose")
    lib = importlib.import_module(library)
    with in_request():
        with lib.Client(transport=CvdiagTransport(lib.HTTPTransport())) as client:
            client.post(f"{base}/v1/chat/completions", json=CHAT)
        async with lib.AsyncClient(
            transport=AsyncCvdiagTransport(lib.AsyncHTTPTransport())
        ) as async_client:
            await async_client.post(f"{base}/v1/messages", json=MESSAGES)
    assert [env["metadata"]["provider"] for env in of(sink, "backend.llm.call.response")] == [
        "openai-compatible",
        "anthropic",
    ]
    assert [seen.test_id for seen in provider.requests] == ["req-7", "req-7"]


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
async def test_a_compressed_json_answer_is_decoded_for_its_usage(
    cvdiag_events: CvdiagEvents, library: str
) -> None:
    sink = cvdiag_events("verbose")
    fake = FakeProvider(reply="word " * 300)  # large enough to be compressed
    app = GZipMiddleware(fake.app, minimum_size=10)
    lib = importlib.import_module(library)
    with serve_uvicorn(app) as url:
        async with instrument_httpx(lib.AsyncClient()) as client:
            response = await client.post(f"{url}/v1/chat/completions", json=CHAT)
    assert response.headers["content-encoding"] == "gzip"
    answer = one(sink, "backend.llm.call.response")
    assert answer["metadata"]["response_token_count"] == 300


def test_instrument_httpx_refuses_other_objects() -> None:
    with pytest.raises(TypeError, match="httpx or httpx2"):
        instrument_httpx(object())


def test_cvdiag_imports_and_runs_without_httpx() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('httpx', 'httpx2'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import cvdiag\n"
        "cvdiag.configure(cvdiag.Settings(enabled=True, tier='verbose'),"
        " sinks=[cvdiag.MemorySink()])\n"
        "with cvdiag.agent_scope('a'), cvdiag.llm_call('openai', 'm'):\n"
        "    pass\n"
        "assert 'httpx' not in sys.modules and 'httpx2' not in sys.modules\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
