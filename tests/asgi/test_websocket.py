"""WebSocket: ingress at connect, an event per message sent, one terminal per connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from typing import Any

import pytest
from websockets.sync.client import connect

from cvdiag import CvdiagMiddleware
from cvdiag.asgi import boundaries as boundaries_module
from cvdiag.asgi import websocket_exchange
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from tests.support.asgi_apps import (
    FAKE_KEY,
    boundaries,
    check_all,
    make_app,
    only,
    serve,
    terminals,
    wait_terminal,
)

servers = pytest.mark.parametrize("server", ["uvicorn", "hypercorn", "hypercorn-trio"])


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws/chat"


@servers
@pytest.mark.parametrize("closer", ["server", "client"])
def test_chat_of_three_messages(cvdiag_events: CvdiagEvents, server: str, closer: str) -> None:
    sink = cvdiag_events("debug")
    test_id = new_uuid7()
    with serve(server, make_app()) as url:
        with connect(ws_url(url), additional_headers={"x-test-id": test_id}) as ws:
            for text in ("one", "two", "three"):
                ws.send(text)
                assert json.loads(ws.recv(timeout=5))["echo"] == text
            if closer == "server":
                ws.send("bye")
                with contextlib.suppress(Exception):
                    ws.recv(timeout=5)  # the server's close frame ends the conversation
        envelopes = wait_terminal(sink)
    envelopes = check_all(sink)
    assert {e["test_id"] for e in envelopes} == {test_id}
    if server.startswith("hypercorn") and closer == "client":
        # Hypercorn (either worker) hands the app code 1006 for a client's close frame, whatever
        # its code, so at the ASGI level a clean client close cannot be told from a dropped
        # connection.
        terminal = ["backend.sse.aborted"]
        assert envelopes[-1]["metadata"]["termination_kind"] == "rst"
    else:
        terminal = ["backend.response.complete"]
    assert boundaries(envelopes) == [
        "backend.request.ingress",
        "backend.sse.first_byte",
        *["backend.sse.event"] * 3,
        *terminal,
    ]
    ingress = envelopes[0]["metadata"]
    assert ingress == {"method": "WEBSOCKET", "path": "/ws/chat", "content_length": None}
    events = [e["metadata"] for e in envelopes if e["boundary"] == "backend.sse.event"]
    assert [(e["event_type"], e["sequence_num"]) for e in events] == [
        ("TEXT_MESSAGE_CONTENT", 0),
        ("TEXT_MESSAGE_CONTENT", 1),
        ("TEXT_MESSAGE_CONTENT", 2),
    ]
    if terminal != ["backend.response.complete"]:
        return
    complete = envelopes[-1]
    assert complete["outcome"] == "ok"
    assert complete["metadata"]["http_status"] == 101
    assert complete["metadata"]["sse_event_count"] == 3
    assert complete["metadata"]["content_length"] == sum(e["payload_size_bytes"] for e in events)


@servers
def test_client_vanishes_mid_conversation(cvdiag_events: CvdiagEvents, server: str) -> None:
    sink = cvdiag_events("default")
    # The context-manager form: websockets 16 (the last for 3.10) has no ``legacy=``.
    with serve(server, make_app()) as url, connect(ws_url(url)) as ws:
        ws.send("one")
        ws.recv(timeout=5)
        # No close frame: the TCP connection just goes away.
        ws.socket.shutdown(socket.SHUT_RDWR)
        ws.socket.close()
        envelopes = wait_terminal(sink)
    (aborted,) = terminals(check_all(sink, "default"))
    assert aborted["boundary"] == "backend.sse.aborted"
    assert aborted["metadata"]["termination_kind"] == "rst"
    assert aborted["metadata"]["bytes_before_abort"] > 0
    assert "backend.error.caught" not in boundaries(envelopes)


# --- in-process: the corners a real client cannot easily reach ----------------------------------


def ws_scope(path: str = "/ws/chat") -> dict[str, Any]:
    return {
        "type": "websocket",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "scheme": "ws",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "subprotocols": [],
    }


async def run_ws(
    app: Any, incoming: list[dict[str, Any]], send_error: type[BaseException] | None = None
) -> list[Any]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if send_error is not None and message["type"] == "websocket.send" and sent:
            raise send_error("broken pipe")
        sent.append(message)

    await app(ws_scope(), receive, send)
    return sent


@pytest.mark.parametrize(
    ("code", "boundary", "kind"),
    [
        (1000, "backend.response.complete", None),
        (1005, "backend.sse.aborted", "rst"),  # uvicorn's code for a dropped connection
        (1001, "backend.response.complete", None),  # between turns: going away is an end
        (1006, "backend.sse.aborted", "rst"),
    ],
)
async def test_client_close_codes(
    cvdiag_events: CvdiagEvents, code: int, boundary: str, kind: str | None
) -> None:
    sink = cvdiag_events("default")
    incoming: list[dict[str, Any]] = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": "hi"},
        {"type": "websocket.disconnect", "code": code},
    ]
    await run_ws(make_app(), incoming)
    (terminal,) = terminals(list(sink.envelopes))
    assert terminal["boundary"] == boundary
    if kind is not None:
        assert terminal["metadata"]["termination_kind"] == kind


async def test_broken_socket_on_send_is_rst_not_an_error(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    incoming = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": "one"},
        {"type": "websocket.receive", "text": "two"},
    ]
    await run_ws(make_app(), incoming, send_error=OSError)  # Starlette: WebSocketDisconnect(1006)
    (aborted,) = terminals(list(sink.envelopes))
    assert aborted["metadata"]["termination_kind"] == "rst"
    assert "backend.error.caught" not in boundaries(list(sink.envelopes))


async def test_error_after_accept(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "bytes": b"\x00\x01"})
        raise RuntimeError(f"agent crashed token={FAKE_KEY}")

    with pytest.raises(RuntimeError):
        await run_ws(CvdiagMiddleware(app), [{"type": "websocket.connect"}])
    envelopes = list(sink.envelopes)
    assert boundaries(envelopes) == ["backend.error.caught", "backend.sse.aborted"]
    assert 0 <= envelopes[-1]["metadata"].pop("silence_ms") <= envelopes[-1]["duration_ms"]
    assert envelopes[-1]["metadata"] == {
        "termination_kind": "chunk_error",
        "bytes_before_abort": 2,
        "termination_cause": "app_error",
    }
    assert FAKE_KEY not in str(envelopes)


async def test_silence_and_duration_share_one_clock_reading(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause while the terminal is built (GC, a starved CI machine) must not make the
    silence longer than the whole stream: both figures come from one reading. The clock
    stands still until the app fails, then jumps 50 ms at every reading."""
    sink = cvdiag_events("default")
    readings = {"now": 1000.0, "step": 0.0}

    def clock() -> float:
        readings["now"] += readings["step"]
        return readings["now"]

    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(websocket_exchange, "perf_counter", clock)
    monkeypatch.setattr(boundaries_module, "perf_counter", clock)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "bytes": b"\x00"})
        readings["step"] = 0.05
        raise RuntimeError("agent crashed")

    with pytest.raises(RuntimeError):
        await run_ws(CvdiagMiddleware(app), [{"type": "websocket.connect"}])
    (aborted,) = terminals(list(sink.envelopes))
    assert aborted["duration_ms"] >= 50
    assert aborted["metadata"]["silence_ms"] == aborted["duration_ms"]


async def test_error_before_accept_is_reported_then_completes_500(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("no handshake")

    with pytest.raises(RuntimeError):
        await run_ws(CvdiagMiddleware(app), [{"type": "websocket.connect"}])
    envelopes = list(sink.envelopes)
    assert boundaries(envelopes) == ["backend.error.caught", "backend.response.complete"]
    assert (envelopes[-1]["outcome"], envelopes[-1]["metadata"]["http_status"]) == ("err", 500)


async def test_refused_handshake_is_a_complete_with_403(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.close", "code": 1008})

    await run_ws(CvdiagMiddleware(app), [{"type": "websocket.connect"}])
    complete = only(list(sink.envelopes), "backend.response.complete")
    assert (complete["outcome"], complete["metadata"]["http_status"]) == ("err", 403)


async def test_binary_and_plain_text_event_types(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("debug")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "bytes": b"\xff" * 10})
        await send({"type": "websocket.send", "text": "plain ünïcode"})
        await send({"type": "websocket.send", "text": '{"type": "RUN_FINISHED"}'})

    await run_ws(CvdiagMiddleware(app), [{"type": "websocket.connect"}])
    events = [e["metadata"] for e in sink.envelopes if e["boundary"] == "backend.sse.event"]
    assert [(e["event_type"], e["payload_size_bytes"]) for e in events] == [
        ("bytes", 10),
        ("text", len("plain ünïcode".encode())),
        ("RUN_FINISHED", 24),
    ]
    assert only(list(sink.envelopes), "backend.response.complete")["metadata"]["http_status"] == 101
