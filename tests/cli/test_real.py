"""The commands on logs written by a real instrumented backend: uvicorn on loopback, real httpx
and websockets clients, and one scenario per flap class, each classified by ``cvdiag classify``
run as a subprocess.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.sync.client import connect

from cvdiag import (
    CvdiagMiddleware,
    FileSink,
    MemorySink,
    Settings,
    Tier,
    agent_scope,
    configure,
    flush,
    llm_call,
)
from tests.conftest import V1_TERMINATION_KINDS
from tests.support.cli import cvdiag
from tests.support.servers import serve_uvicorn

FAKE_KEY = "sk-test-12345"
TOKENS = ["Hello", ",", " world", "!"]
SLOW_S = 1.2


async def _answer(mode: str) -> list[str]:
    """A fake LLM: how long it takes and what it says depends on ``mode``."""
    async with llm_call(
        "fake", "fake-1", prompt_token_count_estimate=7, heartbeat_interval=0.1
    ) as call:
        if mode == "hang":
            await asyncio.sleep(30)
        elif mode == "slow":
            await asyncio.sleep(SLOW_S)
        elif mode == "error":
            raise RuntimeError(f"provider rejected api_key={FAKE_KEY}")
        tokens = [] if mode == "empty" else TOKENS * (50 if mode == "long" else 1)
        call.record_response(len(tokens))
        return tokens


async def chat(request: Request) -> Response:
    mode = request.query_params.get("mode", "ok")

    async def stream() -> AsyncIterator[str]:
        async with agent_scope("chat-agent", model_id="fake-1"):
            for token in await _answer(mode):
                yield f"event: TEXT_MESSAGE_CONTENT\ndata: {json.dumps({'delta': token})}\n\n"
                if mode == "long":
                    await asyncio.sleep(0.02)

    if mode == "error":
        async with agent_scope("chat-agent", model_id="fake-1"):
            await _answer(mode)  # raises: the middleware sees the app fail
    return StreamingResponse(stream(), media_type="text/event-stream")


async def limited(request: Request) -> Response:
    return JSONResponse({"error": "slow down"}, status_code=429, headers={"retry-after": "5"})


async def ws_chat(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.receive_text()
    async with agent_scope("ws-agent", model_id="fake-1"):
        for token in await _answer("ok"):
            await websocket.send_text(json.dumps({"type": "TEXT_MESSAGE_CONTENT", "delta": token}))
    await websocket.close(1000)


def build_app() -> Starlette:
    app = Starlette(
        routes=[
            Route("/chat", chat, methods=["POST"]),
            Route("/limited", limited, methods=["POST"]),
            WebSocketRoute("/ws", ws_chat),
        ]
    )
    app.add_middleware(CvdiagMiddleware, slug="chat")
    return app


# --- the scenarios ---------------------------------------------------------------------------

EXPECTED = {
    "real-healthy": "healthy",
    "real-ws": "healthy",
    "real-edge-rays": "edge-interference",
    "real-edge-retry": "edge-interference",
    "real-error": "backend-error",
    "real-stalled": "stalled-backend",
    "real-slow": "slow-first-token",
    "real-empty": "provider-empty",
    "real-abort": "client-abort",
    "real-missing": "unclassified",
}


def _post(client: httpx.Client, test_id: str, path: str = "/chat", **headers: str) -> int:
    response = client.post(path, headers={"x-test-id": test_id, **headers}, json={"q": "hi"})
    return response.status_code


def _drive(base: str) -> None:
    with httpx.Client(base_url=base, timeout=10) as client:
        assert _post(client, "real-healthy") == 200
        assert _post(client, "real-edge-rays", **{"cf-ray": "8f1a00-AMS"}) == 200
        assert _post(client, "real-edge-rays", **{"cf-ray": "8f1b00-AMS"}) == 200
        assert _post(client, "real-edge-retry", "/limited") == 429
        assert _post(client, "real-slow", "/chat?mode=slow") == 200
        assert _post(client, "real-empty", "/chat?mode=empty") == 200
        assert _post(client, "real-missing", "/nowhere") == 404
        with client.stream(
            "POST", "/chat?mode=long", headers={"x-test-id": "real-abort"}, json={}
        ) as response:
            events = 0
            for line in response.iter_lines():
                events += line.startswith("data:")
                if events == 2:
                    break  # leaving the block closes the connection mid-stream
    # uvicorn closes the connection after an app error: a client of its own, so no request
    # races that close on a reused connection.
    with httpx.Client(base_url=base, timeout=10) as client:
        assert _post(client, "real-error", "/chat?mode=error") == 500
    timeout = httpx.Timeout(10, read=0.5)
    with httpx.Client(base_url=base, timeout=timeout) as client, pytest.raises(httpx.ReadTimeout):
        client.post("/chat?mode=hang", headers={"x-test-id": "real-stalled"}, json={})
    ws_url = base.replace("http://", "ws://") + "/ws"
    with connect(ws_url, additional_headers={"x-test-id": "real-ws"}) as ws:
        ws.send("hi")
        while True:
            try:
                ws.recv(timeout=5)
            except Exception:
                break


def _wait_for_terminals(sink: MemorySink, timeout: float = 10.0) -> None:
    """The server finishes a request after the client is gone: wait for every terminal."""
    wanted = {"real-stalled": "backend.agent.exit", "real-abort": "backend.agent.exit"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {(e["test_id"], e["boundary"]) for e in list(sink.envelopes)}
        if all((tid, b) in seen for tid, b in wanted.items()):
            return
        time.sleep(0.05)
    raise AssertionError(f"terminal envelopes missing: {wanted}")


def write_backend_log(path: Path) -> Path:
    """``path`` written by the instrumented app behind a real uvicorn server, every scenario
    driven and ended (the log docs/cli.md describes; the report's tests read it too)."""
    memory = MemorySink()
    configure(Settings(enabled=True, tier=Tier.DEBUG), sinks=[FileSink(path), memory])
    try:
        with serve_uvicorn(build_app()) as base:
            _drive(base)
            _wait_for_terminals(memory)
        flush()
    finally:
        configure(Settings(), sinks=[MemorySink()])
    return path


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_backend_log(tmp_path_factory.mktemp("real") / "backend.log")


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(("test_id", "expected"), sorted(EXPECTED.items()))
def test_each_real_scenario_is_classified_right(
    real_log: Path, test_id: str, expected: str
) -> None:
    timeout = ["--first-token-timeout", "1"] if test_id == "real-slow" else []
    verdict = _json(cvdiag("classify", test_id, str(real_log), "--json", *timeout))
    assert verdict["flap_class"] == expected, verdict
    assert verdict["test_id"] == test_id
    assert verdict["reason"]
    assert verdict["evidence"]["envelope_count"] > 0


def test_the_slow_call_is_healthy_under_the_default_timeout(real_log: Path) -> None:
    verdict = _json(cvdiag("classify", "real-slow", str(real_log), "--json"))
    assert verdict["flap_class"] == "healthy"


def test_the_real_log_validates(real_log: Path) -> None:
    result = cvdiag("validate", str(real_log))
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 invalid" in result.stdout


def test_the_fake_key_is_nowhere_in_the_log(real_log: Path) -> None:
    text = real_log.read_text()
    assert "backend.error.caught" in text
    assert FAKE_KEY not in text


def test_replay_of_a_real_stalled_call_nests_heartbeats_under_the_call(real_log: Path) -> None:
    data = _json(cvdiag("replay", "real-stalled", str(real_log), "--json"))
    events = data["events"]
    by_span = {e["span_id"]: e for e in events}
    start = next(e for e in events if e["boundary"] == "backend.llm.call.start")
    beats = [e for e in events if e["boundary"] == "backend.llm.call.heartbeat"]
    assert beats, "the hanging call sent heartbeats"
    assert all(e["parent_span_id"] == start["span_id"] for e in beats)
    assert all(e["depth"] == start["depth"] + 1 for e in beats)
    agent = by_span[start["parent_span_id"]]
    assert agent["boundary"] == "backend.agent.enter"
    assert by_span[agent["parent_span_id"]]["boundary"] == "backend.request.ingress"
    offsets = [e["offset_ms"] for e in events]
    assert offsets == sorted(offsets)
    text = cvdiag("replay", "real-stalled", str(real_log)).stdout
    assert "backend.llm.call.heartbeat" in text
    assert "█" in text


def test_gzip_and_stdin_read_the_same_envelopes(real_log: Path, tmp_path: Path) -> None:
    packed = tmp_path / "backend.log.gz"
    packed.write_bytes(gzip.compress(real_log.read_bytes()))
    plain = cvdiag("grep", "--test-id", "real-healthy", str(real_log)).stdout
    assert plain.count("\n") >= 5
    assert cvdiag("grep", "--test-id", "real-healthy", str(packed)).stdout == plain
    piped = cvdiag("grep", "--test-id", "real-healthy", "-", stdin=packed.read_bytes())
    assert piped.stdout == plain


def test_every_termination_kind_a_real_server_wrote_is_v1(real_log: Path) -> None:
    kinds = set()
    for line in real_log.read_text().splitlines():
        if line.startswith("CVDIAG {"):
            kind = json.loads(line[7:])["metadata"].get("termination_kind")
            if kind is not None:
                kinds.add(kind)
    assert kinds  # the scenarios include aborts
    assert kinds <= V1_TERMINATION_KINDS


def test_stats_by_class_counts_every_scenario(real_log: Path) -> None:
    report = _json(cvdiag("stats", str(real_log), "--json", "--by-class"))
    classes = report["classes"]["overall"]
    expected: dict[str, int] = {}
    for verdict in EXPECTED.values():
        expected[verdict] = expected.get(verdict, 0) + 1
    # Under the default 60 s timeout the slow call is healthy.
    expected["slow-first-token"] -= 1
    expected["healthy"] += 1
    assert classes == {k: v for k, v in expected.items() if v}
    chat = report["slugs"]["chat"]
    assert chat["requests"] == 11
    assert chat["aborted"]["by_kind"]["rst"]["count"] == 2
    assert chat["heartbeats"] > 0
    assert chat["time_to_first_byte_ms"]["count"] >= 5
