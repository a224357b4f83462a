"""One WebSocket's exchange: accept (or denial), each message sent, the close, the terminal.

A close frame between turns is the conversation's normal end; one that reaches an open agent
scope or LLM call is a cut turn; a dropped connection (no close frame) is ``rst``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from time import perf_counter
from typing import Final

from starlette.types import Message

from cvdiag.asgi.exchange import Exchange
from cvdiag.asgi.headers import merged_edge, response_facts
from cvdiag.asgi.sse import json_type

#: WebSocket close codes that mean "no status": the client dropped the connection (1006) or
#: closed without a code (1005), which uvicorn also reports for a dropped connection.
#: The messages that answer the handshake: the test id goes back in their headers.
_HANDSHAKE: Final = ("websocket.accept", "websocket.http.response.start")
_WS_NO_STATUS: Final = frozenset({1005, 1006})


class WebSocketExchange(Exchange):
    """One WebSocket: ingress → [first_byte → event per message…] → complete | aborted."""

    __slots__ = ("close_code",)

    def setup(self) -> None:
        self.close_code: int | None = None

    async def receive(self) -> Message:
        message = await self._receive()
        try:
            if message.get("type") == "websocket.disconnect" and not self.terminal:
                self.disconnected = True
                code = message.get("code", 1005)
                self.close_code = code if isinstance(code, int) else 1005
        except Exception as exc:  # not a mapping (None …): the app gets it as it came
            self.broken(exc)
        return message

    def send(self, message: Message) -> Awaitable[None]:
        if self.echo is not None:
            try:
                handshake = message.get("type") in _HANDSHAKE
            except AttributeError:  # not a mapping: passed on as it came
                handshake = False
            if handshake:
                message = self.with_test_id(message)
        return self._send_seen(message)

    def _ended(self) -> None:
        self.complete()

    def _seen(self, message: Message) -> bool:
        """Look at one message before it is passed on; True when it ends the socket."""
        kind = message["type"]
        if kind == "websocket.send":
            text = message.get("text")
            if text is not None:
                size = len(text) if text.isascii() else len(text.encode("utf-8", "replace"))
            else:
                size = len(message.get("bytes") or b"")
            self.bytes_sent += size
            self.sent_at = perf_counter()
            if not self.first_byte_seen:
                self.first_byte()
            if self.allow_events:
                self.event("bytes" if text is None else (json_type(text) or "text"), size)
            else:
                self.event_count += 1
        elif kind == "websocket.accept":
            self.started = True
            self.status = 101
            self.edge = merged_edge(self.edge, response_facts(message.get("headers") or ())[3])
        elif kind == "websocket.close":
            if not self.started:
                self.started = True
                self.status = 403  # a close before accept is the server's refusal
            return True
        elif kind == "websocket.http.response.start":
            self.started = True
            self.status = int(message.get("status", 0))
            self.edge = merged_edge(self.edge, response_facts(message.get("headers") or ())[3])
        elif kind == "websocket.http.response.body":
            self.bytes_sent += len(message.get("body", b""))
            return not message.get("more_body", False)
        return False

    def end(self, kind: str | None) -> None:
        if kind in ("error", "timeout"):
            if not self.started:
                self.complete(500)  # the server refuses the handshake with a 500
            elif kind == "timeout":
                self.abort("timeout", "timeout")
            else:
                self.abort("chunk_error", "app_error")
        elif kind == "disconnect" or self.disconnected or self.send_error is not None:
            code = self.close_code
            if self.send_error is not None and code is None:
                # Found gone only when a send failed: an app busy (on its model) does not
                # receive, so when the client left is unknown, only that it was before this.
                self.abort("rst", "send_failed")
            elif code is None or code in _WS_NO_STATUS or self.send_error is not None:
                self.abort("rst", "client_disconnect")  # no close frame: the peer dropped
            elif self.state.turn_cut:
                self.abort("fin_premature", "client_close")  # closed cleanly, mid-turn
            else:
                self.complete()  # closed between turns: the conversation's normal end
        elif kind == "cancel":
            self.abort("fin_premature", "cancelled")
        elif self.started:
            self.complete()  # the app returned: the server closes the socket normally
        else:
            self.abort("fin_premature", "no_response")
