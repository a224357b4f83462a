"""The client learns its test id: the response carries it in the header it is sent in."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from cvdiag import CvdiagMiddleware, MemorySink, Settings, configure
from cvdiag.pytest_plugin import CvdiagEvents
from tests.support.asgi_apps import CLIENTS, check_all, make_app, serve, wait_terminal

clients = pytest.mark.parametrize("client", ["httpx", "httpx2"])


@clients
def test_a_minted_and_an_adopted_test_id_come_back(
    cvdiag_events: CvdiagEvents, client: str
) -> None:
    sink = cvdiag_events("default")
    lib = CLIENTS[client]
    with serve("uvicorn", make_app()) as url, lib.Client(timeout=10) as http:
        minted = http.get(f"{url}/chat/sse?n=2")
        wait_terminal(sink)
        adopted = http.get(f"{url}/chat/sse?n=2", headers={"x-test-id": "D4-Task-Agent-7"})
        envelopes = wait_terminal(sink, count=2)
    first, second = (e["test_id"] for e in check_all(sink, "default"))
    assert minted.headers["x-test-id"] == first  # minted by cvdiag: the client can look it up
    assert adopted.headers["x-test-id"] == second == "d4-task-agent-7"  # as the envelopes say
    assert len(minted.headers.get_list("x-test-id")) == 1
    assert envelopes


def test_the_header_follows_test_id_headers_and_can_be_turned_off(
    cvdiag_events: CvdiagEvents,
) -> None:
    cvdiag_events("default")

    async def hello(request: Request) -> Response:
        return PlainTextResponse("hi")

    def app(**options: object) -> Starlette:
        built = Starlette(routes=[Route("/", hello)])
        built.add_middleware(CvdiagMiddleware, **options)
        return built

    with (
        serve("uvicorn", app(test_id_headers=("x-run-id",))) as url,
        CLIENTS["httpx"].Client() as http,
    ):
        response = http.get(url + "/", headers={"x-run-id": "run-42"})
        assert response.headers["x-run-id"] == "run-42"
        assert "x-test-id" not in response.headers
    with serve("uvicorn", app(echo_test_id=False)) as url, CLIENTS["httpx"].Client() as http:
        assert "x-test-id" not in http.get(url + "/").headers


def test_an_app_that_sets_the_header_keeps_its_own(cvdiag_events: CvdiagEvents) -> None:
    cvdiag_events("default")

    async def own(request: Request) -> Response:
        return PlainTextResponse("hi", headers={"X-Test-Id": "app-chosen"})

    app = Starlette(routes=[Route("/", own)])
    app.add_middleware(CvdiagMiddleware)
    with serve("uvicorn", app) as url, CLIENTS["httpx"].Client() as http:
        response = http.get(url + "/", headers={"x-test-id": "client-sent"})
    assert response.headers.get_list("x-test-id") == ["app-chosen"]


def test_disabled_adds_nothing() -> None:
    configure(Settings(enabled=False), sinks=[MemorySink()])
    with serve("uvicorn", make_app()) as url, CLIENTS["httpx"].Client() as http:
        assert "x-test-id" not in http.get(f"{url}/chat/sse?n=1").headers


def test_a_websocket_handshake_carries_it(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    async def chat(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("hello")
        await websocket.close()

    app = Starlette(routes=[WebSocketRoute("/ws", chat)])
    app.add_middleware(CvdiagMiddleware)
    websockets = pytest.importorskip("websockets.sync.client")
    with serve("uvicorn", app) as url:
        with websockets.connect(url.replace("http", "ws") + "/ws") as ws:
            assert ws.recv() == "hello"
            echoed = ws.response.headers["x-test-id"]
        (envelope,) = wait_terminal(sink)[-1:]
    assert echoed == envelope["test_id"]
