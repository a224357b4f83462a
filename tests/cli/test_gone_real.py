"""Two stalls a client only sees as silence, end to end: a real uvicorn server, the real
``openai`` SDK (instrumented) against a provider, a real client that gives up, and
``cvdiag classify`` run as a subprocess on the log.

- A provider that goes quiet after its first tokens: the stream's heartbeats say how long it
  waited on the network (``chunk_wait_ms``), so the verdict is a stall, not the client's doing.
- A WebSocket app waiting on its model does not receive, so a client that closed is found gone
  only at the app's next send (``send_failed``): the wait that preceded it is named.
- A plain JSON endpoint likewise reads nothing while it waits, and the server drops its late
  answer silently: the middleware looks once as a late response starts
  (``left_before_response``), without changing what the app receives.
- A proxy is seen at the default tier, which writes no ingress: the response's ``via`` on a cut
  stream, and the request's ``via`` and ``cf-ray`` on every terminal (uvicorn and hypercorn).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")
httpx2 = pytest.importorskip("httpx2")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response, StreamingResponse  # noqa: E402
from starlette.routing import Route, WebSocketRoute  # noqa: E402
from starlette.websockets import WebSocket, WebSocketDisconnect  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

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
from cvdiag.pytest_plugin import CvdiagEvents  # noqa: E402
from examples.fake_provider import FakeProvider, serve_fake_provider  # noqa: E402
from tests.support.cli import cvdiag  # noqa: E402
from tests.support.servers import serve_hypercorn, serve_uvicorn  # noqa: E402

#: Heartbeats every 200 ms: the stalls below (two seconds) span many. The classifier finds a
#: client gone "just after" a wait when the app's next send came within one heartbeat interval
#: of the answer (10 s by default); at 50 ms, a machine running three suites at once (load 21 on
#: two cores) once took longer than that between the answer and the send.
BEAT_S = 0.2
#: How long the provider holds its answer (the WebSocket) or goes quiet (the stream), and how
#: long the clients wait before giving up: well inside it, and over two heartbeats.
STALL_S = 2.0
PATIENCE_S = 0.5


async def _quiet_provider(request: Request) -> StreamingResponse:
    """A chat-completions stream that goes quiet after two words."""

    async def frames() -> AsyncIterator[bytes]:
        for word in ("Hel", "lo"):
            chunk = {"id": "c1", "model": "m", "choices": [{"delta": {"content": word}}]}
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        await asyncio.sleep(STALL_S)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream")


def build_app(fake_url: str, quiet_url: str) -> Starlette:
    def client(url: str) -> Any:
        return openai.AsyncOpenAI(
            base_url=f"{url}/v1",
            api_key="sk-test",
            max_retries=0,
            http_client=instrument_httpx(
                httpx2.AsyncClient(), llm_hosts={url.removeprefix("http://"): "openai"}
            ),
        )

    fake, quiet = client(fake_url), client(quiet_url)

    async def relay(request: Request) -> Response:
        async def words() -> AsyncIterator[str]:
            stream = await quiet.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            async with stream:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        yield f"data: {chunk.choices[0].delta.content}\n\n"

        return StreamingResponse(words(), media_type="text/event-stream")

    async def chat(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                ask = await websocket.receive_text()
                # Waiting on the model: nothing receives, so a close is not seen here.
                reply = await fake.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": ask}]
                )
                await websocket.send_text(reply.choices[0].message.content or "")
        except WebSocketDisconnect:
            pass

    app = Starlette(routes=[Route("/relay", relay, methods=["POST"]), WebSocketRoute("/ws", chat)])
    app.add_middleware(CvdiagMiddleware, slug="gone")
    return app


def _wait_for(memory: MemorySink, test_id: str, boundary: str) -> None:
    # Not a threshold: a bound on waiting for the app to notice a client that left.
    deadline = time.monotonic() + 20
    while not any(e["test_id"] == test_id and e["boundary"] == boundary for e in memory.envelopes):
        assert time.monotonic() < deadline, f"{boundary} of {test_id} never came"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def gone_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gone") / "backend.log"
    memory = MemorySink()
    settings = Settings(enabled=True, tier=Tier.VERBOSE, heartbeat_interval=BEAT_S)
    configure(settings, sinks=[FileSink(path), memory])
    quiet = Starlette(routes=[Route("/v1/chat/completions", _quiet_provider, methods=["POST"])])
    try:
        with (
            serve_fake_provider(FakeProvider(reply="hello", stall_limit=5)) as fake_url,
            serve_uvicorn(quiet) as quiet_url,
            serve_uvicorn(build_app(fake_url, quiet_url)) as base,
        ):
            # The stream goes quiet after two words; the client, once it has them, gives up on
            # the silence. It waits for the words themselves however long a busy machine takes
            # to relay them: a read timeout of PATIENCE_S from the start once fired before the
            # first word, and the story was another one.
            with (
                httpx.Client(base_url=base, timeout=10) as client,
                client.stream("POST", "/relay", headers={"x-test-id": "gone-quiet"}) as reply,
            ):
                words, lines = [], reply.iter_lines()  # held: a dropped one hangs up at once
                for line in lines:
                    words += [line.removeprefix("data: ")] if line.startswith("data: ") else []
                    if len(words) == 2:
                        break
                assert words == ["Hel", "lo"]
                time.sleep(PATIENCE_S)  # then leaving the block hangs up mid-stream
            _wait_for(memory, "gone-quiet", "backend.sse.aborted")
            # The WebSocket client asks, waits a while for the answer, and closes.
            ws_url = base.replace("http://", "ws://") + "/ws"
            with connect(ws_url, additional_headers={"x-test-id": "gone-ws"}) as ws:
                ws.send(f"hi [fake:stall={STALL_S}]")
                time.sleep(PATIENCE_S)
                ws.close()
            _wait_for(memory, "gone-ws", "backend.sse.aborted")
        flush()
    finally:
        configure(Settings(), sinks=[MemorySink()])
    return path


def _classify(log: Path, test_id: str) -> dict[str, Any]:
    result = cvdiag("classify", test_id, str(log), "--json")
    assert result.returncode == 0, result.stderr
    verdict: dict[str, Any] = json.loads(result.stdout)
    return verdict


def _aborted(log: Path, test_id: str) -> dict[str, Any]:
    for line in log.read_text().splitlines():
        envelope = json.loads(line.removeprefix("CVDIAG "))
        if envelope["test_id"] == test_id and envelope["boundary"] == "backend.sse.aborted":
            return dict(envelope["metadata"])
    raise AssertionError(f"no abort for {test_id}")


def test_a_provider_gone_quiet_mid_stream_is_a_stall(gone_log: Path) -> None:
    verdict = _classify(gone_log, "gone-quiet")
    assert verdict["flap_class"] == "stalled-backend", verdict["reason"]
    assert "streamed its first tokens, then waited" in verdict["reason"]


def test_a_websocket_client_found_gone_after_a_wait_is_a_stall(gone_log: Path) -> None:
    meta = _aborted(gone_log, "gone-ws")
    assert (meta["termination_kind"], meta["termination_cause"]) == ("rst", "send_failed")
    verdict = _classify(gone_log, "gone-ws")
    assert verdict["flap_class"] == "stalled-backend", verdict["reason"]
    assert "found gone at the next send" in verdict["reason"]


def test_a_proxy_on_a_cut_stream_shows_at_the_default_tier(
    cvdiag_events: CvdiagEvents, tmp_path: Path
) -> None:
    """The abort keeps the response's edge headers (here the ``via`` a caching proxy adds), so
    the default tier, which has no ingress, can still name the proxy in the path."""
    events = cvdiag_events("default")

    async def stream(request: Request) -> Response:
        async def words() -> AsyncIterator[str]:
            for word in ("one", "two"):
                yield f"data: {word}\n\n"
            await asyncio.sleep(STALL_S)
            yield "data: three\n\n"

        via = {"via": "1.1 varnish (Varnish/7.1)"}
        return StreamingResponse(words(), media_type="text/event-stream", headers=via)

    app = Starlette(routes=[Route("/s", stream)])
    app.add_middleware(CvdiagMiddleware)
    with serve_uvicorn(app) as base:
        with (
            httpx.Client(timeout=httpx.Timeout(10, read=PATIENCE_S)) as client,
            pytest.raises(httpx.ReadTimeout),
            client.stream("GET", f"{base}/s", headers={"x-test-id": "cut-via"}) as reply,
        ):
            for _ in reply.iter_lines():
                pass
        # Not a threshold: the server notices the hang-up.
        events.wait_for("backend.sse.aborted", timeout=20)
    (aborted,) = events.of("backend.sse.aborted")
    assert aborted["edge_headers"]["via"] == "1.1 varnish (Varnish/7.1)"
    log = tmp_path / "backend.log"
    log.write_bytes(b"".join(b"CVDIAG " + line + b"\n" for line in events.lines))
    verdict = _classify(log, "cut-via")
    # The client gave up after 0.3 s of silence: no idle timeout. The proxy is context, named.
    assert verdict["flap_class"] == "client-abort", verdict["reason"]
    assert verdict["evidence"]["via"] == "1.1 varnish (Varnish/7.1)"


SERVERS = {"uvicorn": serve_uvicorn, "hypercorn": serve_hypercorn}


def _json_app(fake_url: str) -> Starlette:
    llm = openai.AsyncOpenAI(
        base_url=f"{fake_url}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=instrument_httpx(
            httpx2.AsyncClient(), llm_hosts={fake_url.removeprefix("http://"): "openai"}
        ),
    )

    async def ask(request: Request) -> Response:
        question = (await request.json())["q"]
        reply = await llm.chat.completions.create(
            model="m", messages=[{"role": "user", "content": question}]
        )
        return Response(reply.choices[0].message.content or "", media_type="text/plain")

    app = Starlette(routes=[Route("/ask", ask, methods=["POST"])])
    app.add_middleware(CvdiagMiddleware)
    return app


@pytest.mark.parametrize("server", list(SERVERS))
def test_a_json_client_that_gave_up_on_a_waiting_call_is_found_gone(
    cvdiag_events: CvdiagEvents, server: str, tmp_path: Path
) -> None:
    events = cvdiag_events("verbose", heartbeat_interval=BEAT_S)
    with (
        serve_fake_provider(FakeProvider(reply="hello", stall_limit=5)) as fake_url,
        SERVERS[server](_json_app(fake_url)) as base,
    ):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{base}/ask",
                json={"q": f"hi [fake:stall={STALL_S}]"},
                headers={"x-test-id": "json-gone"},
                timeout=httpx.Timeout(10, read=PATIENCE_S),
            )
        # Patient this time: the same slow answer reaches a client that waits for it.
        answer = httpx.post(
            f"{base}/ask",
            json={"q": f"hi [fake:stall={STALL_S}]"},
            headers={"x-test-id": "json-waited"},
            timeout=10,
        )
        assert (answer.status_code, answer.text) == (200, "hello")
        deadline = time.monotonic() + 20  # not a threshold: the app finishes its late answer
        while (
            len(events.of("backend.sse.aborted")) + len(events.of("backend.response.complete")) < 2
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    (aborted,) = events.of("backend.sse.aborted")
    assert aborted["test_id"] == "json-gone"
    meta = aborted["metadata"]
    assert (meta["termination_kind"], meta["termination_cause"]) == ("rst", "left_before_response")
    (complete,) = events.of("backend.response.complete")
    assert (complete["test_id"], complete["metadata"]["http_status"]) == ("json-waited", 200)
    log = tmp_path / "backend.log"
    log.write_bytes(b"".join(b"CVDIAG " + line + b"\n" for line in events.lines))
    verdict = _classify(log, "json-gone")
    assert verdict["flap_class"] == "stalled-backend", verdict["reason"]
    assert "found gone" in verdict["reason"]
    # Said as what it means for a JSON answer: no stream was cut after some of its bytes.
    replayed = cvdiag("replay", "json-gone", str(log), "--color", "never").stdout
    assert "rst/left_before_response: the client left before the answer began (" in replayed
    assert "left_before_response after" not in replayed


async def _late_reader(scope: Any, receive: Any, send: Any) -> None:
    """Starts its answer late, and only then reads the request body: the probe's look at
    ``receive`` must hand the body on untouched."""
    await asyncio.sleep(PROBE_LATE_S)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.body", "body": b"got " + body})


#: Past the middleware's probe threshold (cvdiag/asgi/http_exchange.py PROBE_AFTER_S).
PROBE_LATE_S = 0.6


@pytest.mark.parametrize("server", list(SERVERS))
def test_the_probe_hands_an_unread_body_on_to_the_app(
    cvdiag_events: CvdiagEvents, server: str
) -> None:
    events = cvdiag_events("verbose")
    with SERVERS[server](CvdiagMiddleware(_late_reader)) as base:
        answer = httpx.post(f"{base}/", content=b"payload", timeout=10)
    assert (answer.status_code, answer.text) == (200, "got payload")
    (complete,) = events.of("backend.response.complete")
    assert complete["outcome"] == "ok"


#: What a client behind Cloudflare and a caching proxy sends: the proxies add these to the
#: request, not to the response.
THROUGH_A_PROXY = {"via": "1.1 varnish (Varnish/7.1)", "cf-ray": "8f00000000000000-LHR"}


@pytest.mark.parametrize("server", list(SERVERS))
def test_a_proxy_on_the_request_shows_on_the_terminal_at_the_default_tier(
    cvdiag_events: CvdiagEvents, tmp_path: Path, server: str
) -> None:
    """Issue 25, point 6: the request's edge headers ride on the terminal at the default tier,
    which writes no ingress: on a complete answer and on a stream the client cut, where
    ``cvdiag classify`` names the proxy in the path (as context: the client left)."""
    events = cvdiag_events("default")

    async def answer(request: Request) -> Response:
        return Response(b'{"ok": true}', media_type="application/json")

    async def stream(request: Request) -> Response:
        async def words() -> AsyncIterator[str]:
            yield "data: one\n\n"
            await asyncio.sleep(STALL_S)
            yield "data: two\n\n"

        return StreamingResponse(words(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/j", answer), Route("/s", stream)])
    app.add_middleware(CvdiagMiddleware)
    with SERVERS[server](app) as base:
        with httpx.Client(timeout=httpx.Timeout(10, read=PATIENCE_S)) as client:
            reply = client.get(f"{base}/j", headers={"x-test-id": "via-ok", **THROUGH_A_PROXY})
            assert reply.status_code == 200
            with (
                pytest.raises(httpx.ReadTimeout),
                client.stream(
                    "GET", f"{base}/s", headers={"x-test-id": "via-cut", **THROUGH_A_PROXY}
                ) as cut,
            ):
                for _ in cut.iter_lines():
                    pass
        # Not a threshold: the server notices the hang-up.
        events.wait_for("backend.sse.aborted", timeout=20)
    assert not events.of("backend.request.ingress")  # the default tier: the terminal alone
    (complete,) = events.of("backend.response.complete")
    (aborted,) = events.of("backend.sse.aborted")
    for terminal in (complete, aborted):
        assert terminal["edge_headers"]["via"] == THROUGH_A_PROXY["via"]
        assert terminal["edge_headers"]["cf-ray"] == THROUGH_A_PROXY["cf-ray"]
    log = tmp_path / "backend.log"
    log.write_bytes(b"".join(b"CVDIAG " + line + b"\n" for line in events.lines))
    verdict = _classify(log, "via-cut")
    assert verdict["flap_class"] == "client-abort", verdict["reason"]  # the proxy is context
    assert verdict["evidence"]["via"] == THROUGH_A_PROXY["via"]
