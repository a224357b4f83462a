"""Why a call failed, end to end: a real uvicorn server whose routes use the real ``openai`` and
``anthropic`` SDKs against the fake provider, each failure caught the ways agent backends catch
them, and ``cvdiag classify`` run as a subprocess on the log.

The causes 27b995b taught the classifier: a provider's in-band error after a 200
(``[fake:fail-mid]``), an SDK timeout against a stalled provider whether the app reports it
in-band or lets it escape, a provider's 401 however the app answers, and a ``: ping`` keep-alive
that is no sign of tokens. Every scenario runs once per tier (verbose, debug): the verdict must
not depend on how much the log tells.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from cvdiag import (  # noqa: E402
    CvdiagMiddleware,
    FileSink,
    MemorySink,
    Settings,
    Tier,
    configure,
    flush,
    instrument_httpx,
)
from examples.fake_provider import FakeProvider, serve_fake_provider  # noqa: E402
from tests.support.cli import cvdiag  # noqa: E402
from tests.support.servers import serve_uvicorn  # noqa: E402

#: How long the fake provider holds a ``[fake:stall]`` when nobody hangs up: every stalled call
#: here is abandoned by its caller first, so this only bounds a server's shutdown if one is not.
STALL_LIMIT = 5.0


#: Set while a route waits to learn that its LLM call has begun (see ``Announcing``).
SENDING: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "SENDING", default=None
)


class Announcing(httpx2.AsyncBaseTransport):
    """The real transport, announcing each request as it goes out. cvdiag's transport wraps
    this one and writes ``backend.llm.call.start`` before handing the request on, so a route
    told here knows its call is open: no sleep decides the order."""

    def __init__(self) -> None:
        self.transport = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: Any) -> Any:
        sending = SENDING.get()
        if sending is not None:
            sending.set()
        return await self.transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self.transport.aclose()


def _frame(kind: str, **data: Any) -> str:
    return f"data: {json.dumps({'type': kind, **data})}\n\n"


def _prompt(request: Request) -> list[dict[str, str]]:
    # The directive rides in the user's message, as it would through any app.
    return [{"role": "user", "content": f"Say hello {request.query_params.get('ask', '')}"}]


def build_app(provider_url: str) -> Starlette:
    host = provider_url.removeprefix("http://")

    def transport(kind: str) -> Any:
        client = httpx2.AsyncClient(transport=Announcing())
        return instrument_httpx(client, llm_hosts={host: kind})

    plain = openai.AsyncOpenAI(
        base_url=f"{provider_url}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=transport("openai"),
    )
    # The SDK gives up on a silent provider: two calls (one retry), each cut after 0.3 s.
    impatient = openai.AsyncOpenAI(
        base_url=f"{provider_url}/v1",
        api_key="sk-test",
        timeout=0.3,
        max_retries=1,
        http_client=transport("openai"),
    )
    claude = anthropic.AsyncAnthropic(
        base_url=provider_url,
        api_key="sk-ant-test",
        max_retries=0,
        http_client=transport("anthropic"),
    )

    def client_for(request: Request) -> Any:
        return impatient if request.query_params.get("sdk") == "impatient" else plain

    async def openai_words(request: Request) -> AsyncIterator[str]:
        stream = await client_for(request).chat.completions.create(
            model="gpt-4o-mini", messages=_prompt(request), stream=True
        )
        async with stream:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content

    async def anthropic_words(request: Request) -> AsyncIterator[str]:
        async with claude.messages.stream(
            model="claude-test", max_tokens=64, messages=_prompt(request)
        ) as stream:
            async for text in stream.text_stream:
                yield text

    def agui(words: Any, error: type[BaseException]) -> Any:
        """An AG-UI-shaped route: a failure of the SDK's is reported in-band as RUN_ERROR and the
        stream completes with 200, as agent frameworks do."""

        async def route(request: Request) -> Response:
            async def events() -> AsyncIterator[str]:
                yield _frame("RUN_STARTED", runId="r1")
                try:
                    async for word in words(request):
                        yield _frame("TEXT_MESSAGE_CONTENT", delta=word)
                except error as exc:
                    yield _frame("RUN_ERROR", message=f"{type(exc).__name__}: {exc}")
                    return
                yield _frame("RUN_FINISHED", runId="r1")

            return StreamingResponse(events(), media_type="text/event-stream")

        return route

    async def escape(request: Request) -> Response:
        # Nothing caught: the SDK's error leaves the app, and the server answers 500.
        reply = await client_for(request).chat.completions.create(
            model="gpt-4o-mini", messages=_prompt(request)
        )
        return JSONResponse({"text": reply.choices[0].message.content})

    async def refused(request: Request) -> Response:
        try:
            reply = await plain.chat.completions.create(
                model="gpt-4o-mini", messages=_prompt(request)
            )
        except openai.AuthenticationError as exc:
            return JSONResponse({"error": f"provider refused: {exc.status_code}"}, status_code=500)
        return JSONResponse({"text": reply.choices[0].message.content})

    async def pinged(request: Request) -> Response:
        async def events() -> AsyncIterator[str]:
            # The call goes out first; once it is open, a keep-alive, as servers send while the
            # model thinks: bytes that say nothing of its tokens. (Sent before the call began,
            # the ping would not overlap it, and older cvdiag read that right already.)
            sending = asyncio.Event()
            SENDING.set(sending)  # the task below copies this context
            call = asyncio.ensure_future(
                plain.chat.completions.create(model="gpt-4o-mini", messages=_prompt(request))
            )
            try:
                await sending.wait()
                yield ": ping\n\n"
                reply = await call
            finally:
                call.cancel()  # the client left: the call goes with it
            yield _frame("TEXT_MESSAGE_CONTENT", delta=reply.choices[0].message.content)

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(
        routes=[
            Route("/openai", agui(openai_words, openai.APIError), methods=["POST"]),
            Route("/anthropic", agui(anthropic_words, anthropic.APIError), methods=["POST"]),
            Route("/escape", escape, methods=["POST"]),
            Route("/refused", refused, methods=["POST"]),
            Route("/pinged", pinged, methods=["POST"]),
        ]
    )
    app.add_middleware(CvdiagMiddleware, slug="causes")
    return app


#: test id → (path and query, the status the client gets, the class ``classify`` must name).
SCENARIOS: dict[str, tuple[str, int, str]] = {
    "cause-fail-mid-openai": ("/openai?ask=[fake:fail-mid]", 200, "provider-error"),
    "cause-fail-mid-anthropic": ("/anthropic?ask=[fake:fail-mid]", 200, "provider-error"),
    "cause-timeout-inband": ("/openai?sdk=impatient&ask=[fake:stall]", 200, "stalled-backend"),
    "cause-timeout-raised": ("/escape?sdk=impatient&ask=[fake:stall]", 500, "stalled-backend"),
    "cause-refused-500": ("/refused?ask=[fake:401]", 500, "backend-error"),
    "cause-refused-inband": ("/openai?ask=[fake:401]", 200, "backend-error"),
    "cause-sse-normal": ("/openai", 200, "healthy"),
}
#: The keep-alive scenario: the client gives up reading, so it has no status.
KEEPALIVE = "cause-keepalive"
EXPECTED = {**{t: c for t, (_, _, c) in SCENARIOS.items()}, KEEPALIVE: "stalled-backend"}


def _wait_for(memory: MemorySink, test_id: str, boundary: str, timeout: float = 20.0) -> None:
    # Not a threshold: a bound on waiting for the app to finish a request the client left.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e["test_id"] == test_id and e["boundary"] == boundary for e in memory.envelopes):
            return
        time.sleep(0.05)
    raise AssertionError(f"{boundary} of {test_id} never came")


def _drive(base: str, memory: MemorySink) -> None:
    for test_id, (path, status, _) in SCENARIOS.items():
        # A connection each: uvicorn closes one an exception escaped on, and a pooled
        # connection reused after it is reset.
        answer = httpx.post(f"{base}{path}", headers={"x-test-id": test_id}, timeout=10)
        assert answer.status_code == status, (test_id, answer.text)
    # The provider stalls behind a ping; the client waits 1 s for more and gives up.
    patience = httpx.Timeout(10, read=1.0)
    with (
        httpx.Client(base_url=base, timeout=patience) as client,
        pytest.raises(httpx.ReadTimeout),
        client.stream(
            "POST", "/pinged?ask=[fake:stall]", headers={"x-test-id": KEEPALIVE}
        ) as response,
    ):
        for _ in response.iter_lines():
            pass
    # The app is cancelled as the client leaves; its call's end is written as it unwinds.
    _wait_for(memory, KEEPALIVE, "backend.llm.call.response")


@pytest.fixture(scope="module", params=[Tier.VERBOSE, Tier.DEBUG], ids=lambda t: t.label)
def causes_log(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tier: Tier = request.param
    path = tmp_path_factory.mktemp(f"causes-{tier.label}") / "backend.log"
    memory = MemorySink()
    configure(Settings(enabled=True, tier=tier), sinks=[FileSink(path), memory])
    provider = FakeProvider(reply="hello there friend", stall_limit=STALL_LIMIT)
    try:
        with (
            serve_fake_provider(provider) as provider_url,
            serve_uvicorn(build_app(provider_url)) as base,
        ):
            _drive(base, memory)
        flush()
    finally:
        configure(Settings(), sinks=[MemorySink()])
    return path


def _classify(log: Path, test_id: str) -> dict[str, Any]:
    result = cvdiag("classify", test_id, str(log), "--json")
    assert result.returncode == 0, result.stderr
    verdict: dict[str, Any] = json.loads(result.stdout)
    return verdict


@pytest.mark.parametrize(("test_id", "expected"), sorted(EXPECTED.items()))
def test_each_cause_is_classified_right(causes_log: Path, test_id: str, expected: str) -> None:
    verdict = _classify(causes_log, test_id)
    assert verdict["flap_class"] == expected, verdict["reason"]
    assert verdict["caveat"] is None, verdict["caveat"]


@pytest.mark.parametrize(
    ("test_id", "named"),
    [
        # The provider's own error, read from the stream it answered 200: named as the SDKs do.
        ("cause-fail-mid-openai", "ServerError"),
        ("cause-fail-mid-anthropic", "OverloadedError"),
        # The refused call, not the 500 the app made of it.
        ("cause-refused-500", "refused with HTTP401"),
        ("cause-refused-inband", "refused with HTTP401"),
    ],
)
def test_the_reason_names_the_providers_failure(causes_log: Path, test_id: str, named: str) -> None:
    verdict = _classify(causes_log, test_id)
    assert named in verdict["reason"]


def _first_bytes(log: Path, test_id: str) -> list[dict[str, Any]]:
    envelopes = (
        json.loads(line.removeprefix("CVDIAG "))
        for line in log.read_text().splitlines()
        if line.startswith("CVDIAG ")
    )
    return [
        e
        for e in envelopes
        if e["test_id"] == test_id and e["boundary"] == "backend.sse.first_byte"
    ]


def test_a_ping_first_is_marked_keepalive(causes_log: Path) -> None:
    [pinged] = _first_bytes(causes_log, KEEPALIVE)
    assert pinged["metadata"]["keepalive"] is True


def test_a_first_event_is_not_marked_keepalive(causes_log: Path) -> None:
    # Additive: present only on a ping, so a normal stream's first byte reads as before.
    [normal] = _first_bytes(causes_log, "cause-sse-normal")
    assert "keepalive" not in normal["metadata"]
