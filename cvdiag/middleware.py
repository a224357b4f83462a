"""``CvdiagMiddleware``: pure ASGI; tells each HTTP request's and WebSocket's story.

The middleware class is thin: it decides once per request whether cvdiag is on, builds a
per-request exchange object holding all the state, sets the request context and runs the app
with the exchange's wrapped ``receive`` and ``send``. Everything cvdiag does inside a request
runs under one guard: a failure there is counted (``record_failure("middleware", …)``), the
exchange goes quiet, and the request proceeds as if cvdiag were absent. The app's own exceptions
pass through unchanged.

See docs/streaming.md for every boundary emitted, when, and the ``termination_kind`` values.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import re
import time
import zlib
from collections.abc import Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cvdiag import emitter as _emitters
from cvdiag.context import _STATE, RequestContext, RequestState, reset_context, set_context
from cvdiag.emitter import Emitter, get_emitter
from cvdiag.errors import (
    claim_report,
    describe_exception,
    is_client_gone,
    mark_client_gone,
)
from cvdiag.guard import record_failure, say
from cvdiag.ids import adopt_test_id, new_span_id, new_uuid7, sanitize_slug
from cvdiag.schema import DEMO_MAX, EDGE_HEADER_KEYS, EDGE_VALUE_MAX, Tier
from cvdiag.scopes import end_outstanding_calls, is_timeout
from cvdiag.scrub import placeholder, scrub, scrub_identifier, scrub_text
from cvdiag.settings import Settings
from cvdiag.sse import SSECounter, SSEParser, json_type

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from cvdiag.template import RequestLines


def annotate_request(span: Span, ctx: RequestContext) -> None:
    from cvdiag.otel import annotate_request as annotate

    annotate(span, ctx)


def finish_request(span: Span, scope: Scope, status: int, failure: BaseException | None) -> None:
    from cvdiag.otel import finish_request as finish

    finish(span, scope, status, failure)


__all__ = ["CvdiagMiddleware"]

_EDGE: Final = {key.encode("latin-1"): key for key in EDGE_HEADER_KEYS}
#: Raw bytes of an edge header read before scrubbing; a 1 MB value costs no more than this.
_EDGE_RAW_MAX: Final = EDGE_VALUE_MAX * 4
_PATH_MAX: Final = 2048
#: Demo names of recent short paths: the same few routes are requested over and over.
_DEMOS: dict[str, str] = {}
_DEMO_CACHE_SIZE: Final = 1024
_DEMO_CACHE_PATH: Final = 128
_CONTENT_LENGTH: Final = b"content-length"
_CONTENT_TYPE: Final = b"content-type"
_CONTENT_ENCODING: Final = b"content-encoding"
#: zlib window bits per content coding: gzip, and zlib-wrapped deflate. Other codings (br,
#: zstd) are counted as sent: the standard library cannot read them.
_INFLATE_BITS: Final = {b"gzip": 16 + zlib.MAX_WBITS, b"deflate": zlib.MAX_WBITS}
#: A compressed body is inflated this much at a time, so memory stays bounded.
_INFLATE_STEP: Final = 256 * 1024
_SSE_TYPE: Final = b"text/event-stream"
#: Streams of newline-delimited records: each record is an event, however the bytes are
#: chunked on the way (a compressor re-chunks them).
_LINE_TYPES: Final = (b"application/x-ndjson", b"application/jsonl", b"application/json-seq")
#: Below the debug tier, mid-stream chunks up to this size are held by reference, this many at
#: most, and counted in one pass: at most 64 KiB held per request.
_HOLD_CHUNK: Final = 2048
_HOLD_CHUNKS: Final = 32
#: WebSocket close codes that mean "no status": the client dropped the connection (1006) or
#: closed without a code (1005), which uvicorn also reports for a dropped connection.
_WS_NO_STATUS: Final = frozenset({1005, 1006})
_BaseExceptionGroup: Any = getattr(builtins, "BaseExceptionGroup", None)
#: How long lifespan shutdown may wait for queued envelopes to be written.
_SHUTDOWN_FLUSH_SECONDS: Final = 5.0
#: Scope types that get an OpenTelemetry server span.
_TRACED: Final = frozenset({"http", "websocket"})


def _ms_since(start: float) -> int:
    # Whole milliseconds, like every duration on the wire (v1's duration_ms is an integer);
    # never negative, even if the clock is stepped back (or patched) under a request.
    return max(0, round((time.perf_counter() - start) * 1000))


def _text(raw: bytes | str, limit: int) -> str:
    """A header value as text: latin-1 (never fails), cut to ``limit`` before any other work."""
    if isinstance(raw, str):
        return raw[:limit]
    return raw[:limit].decode("latin-1")


def _edge_value(raw: bytes | str) -> str:
    # Scrubbed, then cut. One character past the bound tells the scrubber the value goes on, so
    # it drops a token the bound split rather than pass on the tail of a credential.
    return scrub_text(_text(raw, _EDGE_RAW_MAX + 1), _EDGE_RAW_MAX, length=len(raw))[
        :EDGE_VALUE_MAX
    ]


def _content_length(raw: bytes | str | None) -> int | None:
    if raw is None:
        return None
    text = _text(raw, 32).strip()
    return int(text) if text.isdigit() and text.isascii() and len(text) <= 19 else None


def _demo(path: str) -> str:
    """The first path segment ("default" for "/"), scrubbed and bounded like any field."""
    demo = _DEMOS.get(path)
    if demo is None:
        # An identifier: kept whole or replaced by its digest placeholder, never edited. A
        # credential holding "/" spans segments, so the whole path is scrubbed too: a first
        # segment the scrubber touched there is a fragment of one.
        segment = path.lstrip("/").partition("/")[0][: DEMO_MAX * 2]
        if not segment:
            demo = "default"
        elif scrub_text(path, _PATH_MAX).lstrip("/").partition("/")[0] != segment:
            demo = placeholder(segment)
        else:
            demo = scrub_identifier(segment)[:DEMO_MAX]
        if len(path) <= _DEMO_CACHE_PATH:
            if len(_DEMOS) >= _DEMO_CACHE_SIZE:
                _DEMOS.clear()
            _DEMOS[path] = demo
    return demo


def _classify(exc: BaseException | None) -> str | None:
    """How the app ended: None (returned), "disconnect", "cancel", "timeout" or "error".

    A client going away is never an application error: Starlette's ``ClientDisconnect`` and
    ``WebSocketDisconnect``, or what our wrapped ``send`` saw fail, are "disconnect".
    Cancellation and other non-``Exception`` exits (KeyboardInterrupt, SystemExit) are "cancel".
    """
    if exc is None:
        return None
    if is_client_gone(exc):
        return "disconnect"
    if _BaseExceptionGroup is not None and isinstance(exc, _BaseExceptionGroup):
        kinds = {_classify(inner) for inner in exc.exceptions}
        for kind in ("error", "timeout", "disconnect", "cancel"):
            if kind in kinds:
                return kind
    if not isinstance(exc, Exception):
        return "cancel"
    return "timeout" if is_timeout(exc) else "error"


class _Exchange:
    """State and boundaries shared by HTTP and WebSocket exchanges.

    Every message the app sends is looked at *before* it is passed on: an outer middleware
    (GZip) may rewrite it in place, and cvdiag tells what the app sent. The one terminal is
    emitted when the body ends (so a background task's envelopes follow it) or when the app
    exits; a client that left is recorded as it is seen and told at the app's exit, once every
    scope the request opened has exited.
    """

    __slots__ = (
        "_receive",
        "_send",
        "active",
        "allow_events",
        "allow_first_byte",
        "bytes_sent",
        "ctx",
        "disconnected",
        "emitter",
        "event_count",
        "first_byte_seen",
        "request_lines",
        "response_edge",
        "send_error",
        "start",
        "started",
        "state",
        "status",
        "terminal",
    )

    def __init__(
        self,
        emitter: Emitter,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        start: float,
        allow_first_byte: bool,
        allow_events: bool,
    ) -> None:
        self.emitter = emitter
        self.ctx = ctx
        self._receive = receive
        self._send = send
        self.start = start
        # Decided once per request: skip building what the tier would drop.
        self.allow_first_byte = allow_first_byte
        self.allow_events = allow_events
        #: False once cvdiag itself failed in this request: from then on it only passes through.
        self.active = True
        self.started = False  # the response (or WebSocket accept / denial) has started
        self.status = 0
        self.response_edge: dict[str, str | None] | None = None
        self.bytes_sent = 0
        self.event_count = 0
        self.first_byte_seen = False
        self.disconnected = False  # the client's disconnect was seen on receive
        self.send_error: BaseException | None = None  # what the server's send raised
        self.terminal = False  # the one terminal boundary has been emitted
        #: What the request's own code reports while it runs (streams it opened, a cut turn).
        self.state = RequestState()
        #: The request's envelopes from templates (False: not made yet; None: use ``emit``).
        self.request_lines: RequestLines | Literal[False] | None = False

    # -- boundaries ------------------------------------------------------------------------

    def _emit(self, boundary: str, outcome: str, metadata: Mapping[str, Any]) -> None:
        self.emitter.emit(boundary, outcome=outcome, metadata=metadata, context=self.ctx)

    def _lines(self) -> RequestLines | None:
        lines = self.request_lines
        if lines is False:  # made at the first envelope after ingress
            lines = self.request_lines = self.emitter.lines_for(self.ctx)
        return lines

    def first_byte(self) -> None:
        self.first_byte_seen = True
        if self.allow_first_byte:
            delta = _ms_since(self.start)
            lines = self._lines()
            if lines is None or not lines.first_byte(delta):
                self._emit("backend.sse.first_byte", "info", {"delta_ms_from_ingress": delta})

    def event(self, event_type: str, size: int) -> None:
        """Emit one stream event (debug tier) and count it."""
        sequence = self.event_count
        self.event_count = sequence + 1
        lines = self._lines()
        if lines is not None and lines.event(event_type, size, sequence):
            return
        self.emitter.emit(
            "backend.sse.event",
            metadata={
                "event_type": event_type,
                "payload_size_bytes": size,
                "sequence_num": sequence,
            },
            context=self.ctx,
        )

    def settle(self) -> None:
        """Account for anything sent but not yet looked at, before a terminal reads the totals."""

    def settle_streams(self, *, body_end: bool) -> None:
        """End the LLM streams this request opened and left unread, before its terminal."""
        state = self.state
        streams = state.streams
        if streams:
            state.streams = [s for s in streams if not s.request_ending(body_end=body_end)]

    def complete(self, status: int | None = None) -> None:
        if self.terminal:
            return
        self.terminal = True
        self.settle()
        total = _ms_since(self.start)
        status = self.status if status is None else status
        lines = self._lines()
        if lines is not None and lines.complete(
            status, self.bytes_sent, total, self.event_count, self.response_edge
        ):
            return
        self.emitter.emit(
            "backend.response.complete",
            outcome="ok" if 100 <= status < 400 else "err",
            metadata={
                "http_status": status,
                "content_length": self.bytes_sent,
                "total_duration_ms": total,
                "sse_event_count": self.event_count,
            },
            duration_ms=total,
            context=self.ctx,
            edge_headers=self.response_edge,
        )

    def abort(self, termination_kind: str, cause: str) -> None:
        """``termination_kind`` is CVDIAG v1's (rst, timeout, chunk_error, fin_premature);
        ``termination_cause`` (additive) says which of cvdiag's finer causes it was."""
        if self.terminal:
            return
        self.terminal = True
        self.settle()
        if self.emitter.otel is not None:
            self.emitter.otel.record_abort(termination_kind)
        duration = _ms_since(self.start)
        lines = self._lines()
        if lines is not None and lines.aborted(termination_kind, self.bytes_sent, cause, duration):
            return
        self.emitter.emit(
            "backend.sse.aborted",
            outcome="err",
            metadata={
                "termination_kind": termination_kind,
                "bytes_before_abort": self.bytes_sent,
                "termination_cause": cause,
            },
            duration_ms=duration,
            context=self.ctx,
        )

    def error(self, exc: BaseException) -> None:
        self._emit("backend.error.caught", "err", describe_exception(exc))

    def broken(self, exc: BaseException) -> None:
        """cvdiag failed inside this request: count it and get out of the way."""
        self.active = False
        record_failure("middleware", exc)

    def response_headers(
        self, headers: Iterable[tuple[bytes, bytes]]
    ) -> tuple[bytes | None, bytes | None, bytes | None]:
        """Edge headers of the response (kept for ``complete``); returns its content type,
        content coding and declared length."""
        content_type = encoding = length = None
        edge: dict[str, str | None] | None = None
        for name, value in headers:
            lower = name.lower()
            if lower == _CONTENT_TYPE:
                content_type = value
            elif lower == _CONTENT_ENCODING:
                encoding = value
            elif lower == _CONTENT_LENGTH:
                length = value
            else:
                key = _EDGE.get(lower)
                if key is not None and (edge is None or edge[key] is None):
                    if edge is None:
                        edge = dict.fromkeys(EDGE_HEADER_KEYS)
                    edge[key] = _edge_value(value)
        self.response_edge = edge
        return content_type, encoding, length

    # -- sending -----------------------------------------------------------------------------

    def _seen(self, message: Message) -> bool:
        """Look at one message before it is passed on; True when it ends the exchange."""
        raise NotImplementedError

    def _ended(self) -> None:
        """The message that ends the exchange went out."""
        raise NotImplementedError

    async def _send_seen(self, message: Message) -> None:
        ended = False
        if self.active:
            try:
                ended = self._seen(message)
            except Exception as exc:
                self.broken(exc)
        try:
            await self._send(message)
        except BaseException as exc:
            self._send_failed(exc)
            raise
        if ended and self.active:
            try:
                self._ended()
            except Exception as exc:
                self.broken(exc)

    def _send_failed(self, exc: BaseException) -> None:
        # OSError (uvicorn's ClientDisconnected is one) means the client is gone: marked, so
        # that no scope it passes through calls it an error, and told at the app's exit.
        # Anything else is an app or protocol error and is judged when it escapes the app.
        if self.active and (isinstance(exc, OSError) or is_client_gone(exc)):
            mark_client_gone(exc)
            if self.send_error is None:
                self.send_error = exc

    # -- the app's exit --------------------------------------------------------------------

    def finish(self, exc: BaseException | None) -> None:
        """Emit what the app's return or exception means; exactly one terminal overall."""
        if not self.active:
            return
        try:
            kind = _classify(exc)
            if kind in ("error", "timeout") and exc is not None and claim_report(exc):
                self.error(exc)  # unless a scope inside the request already reported it
            self.settle_streams(body_end=False)
            if not self.terminal:
                self.end(kind)
        except Exception as failure:
            self.broken(failure)

    def end(self, kind: str | None) -> None:
        """Choose the terminal for an app that ended without one (``kind`` from ``_classify``)."""
        raise NotImplementedError

    def left(self) -> tuple[str, str] | None:
        """The v1 kind and the cause when the client is known to have gone, else None."""
        if self.send_error is not None:
            return "rst", "send_failed"
        if self.disconnected:
            return "rst", "client_disconnect"
        return None


class _HTTPExchange(_Exchange):
    """One HTTP request: ingress → [first_byte → event…] → complete | aborted (+ error.caught).

    Body chunks are looked at one by one only where the tier needs it: the debug tier names each
    event as it is sent, the verbose tier times the first byte. Otherwise a mid-stream chunk is
    only held, by reference, and the held chunks are counted in one pass when a batch is full,
    when a chunk is large, and when the body ends: a stream's bookkeeping is one list append per
    chunk, because per-chunk Python is what a streaming middleware pays for most.
    """

    __slots__ = (
        "body_done",
        "counter",
        "declared",
        "head",
        "held",
        "inflate",
        "lines",
        "parser",
        "sent_at_disconnect",
        "streaming",
    )

    def __init__(
        self,
        emitter: Emitter,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        start: float,
        allow_first_byte: bool,
        allow_events: bool,
    ) -> None:
        super().__init__(emitter, ctx, receive, send, start, allow_first_byte, allow_events)
        self.body_done = False
        self.streaming = False  # some body message said more_body=True
        #: Mid-stream chunks not looked at yet (immutable ``bytes`` only: an app could reuse a
        #: bytearray); None while every chunk must be looked at as it is sent.
        self.held: list[bytes] | None = None
        self.counter: SSECounter | None = None  # an SSE body's event count, below debug
        self.parser: SSEParser | None = None  # an SSE body's named events, at debug
        #: A compressed body's inflater: events and sizes are the app's own bytes.
        self.inflate: Any = None
        self.lines = False  # an NDJSON-like body: its events are its lines
        self.head = False  # a HEAD request: the server sends no body, whatever the app does
        self.declared: int | None = None  # the response's Content-Length
        self.sent_at_disconnect = 0

    async def receive(self) -> Message:
        message = await self._receive()
        # After the body is done, uvicorn answers every receive with http.disconnect: not an abort.
        if message.get("type") == "http.disconnect" and not self.body_done and self.active:
            self.disconnected = True
            try:
                self.settle()
                self.sent_at_disconnect = self.bytes_sent
            except Exception as exc:
                self.broken(exc)
        return message

    def send(self, message: Message) -> Awaitable[None]:
        held = self.held
        if held is not None:
            # The hot path, a plain call: a small mid-stream chunk is held by reference and
            # the server's own ``send`` awaited directly, with no coroutine of ours around it.
            # A send failing here is known by its class (uvicorn's ``ClientDisconnected``,
            # Starlette's ``ClientDisconnect``) when it escapes the app.
            body = message.get("body")
            if (
                body.__class__ is bytes
                and message.get("more_body")
                and len(body) <= _HOLD_CHUNK
                and len(held) < _HOLD_CHUNKS
            ):
                held.append(body)
                return self._send(message)
        return self._send_seen(message)

    def broken(self, exc: BaseException) -> None:
        self.held = None
        super().broken(exc)

    def _seen(self, message: Message) -> bool:
        """Look at one message before it is passed on; True when it ends the body."""
        kind = message["type"]
        if kind == "http.response.body":
            return self._body(message.get("body", b""), bool(message.get("more_body", False)))
        if kind == "http.response.start":
            self._start(message)
        elif kind == "http.response.pathsend" and not self.body_done:
            self.body_done = True
            if not self.head:
                self.bytes_sent += os.stat(message["path"]).st_size
            return True
        return False

    def _start(self, message: Message) -> None:
        self.started = True
        self.status = int(message.get("status", 0))
        content_type, encoding, length = self.response_headers(message.get("headers") or ())
        self.declared = _content_length(length)
        if encoding is not None:
            bits = _INFLATE_BITS.get(encoding.strip().lower())
            if bits is not None:
                self.inflate = zlib.decompressobj(bits)
        sse = content_type is not None and content_type[:17].lower() == _SSE_TYPE
        if content_type is not None and not sse:
            self.lines = content_type.lower().startswith(_LINE_TYPES)
        if self.allow_events:
            if sse:
                self.parser = SSEParser()
            return
        if sse:
            self.counter = SSECounter()
        if not self.allow_first_byte:
            self.held = []  # nothing to see chunk by chunk: batch from the first one

    def _body(self, body: bytes, more: bool) -> bool:
        if body.__class__ is not bytes:
            body = bytes(body)
        if self.held:
            self.settle()  # what is held was sent before this chunk
        if body and not self.head:
            streaming = more or self.streaming
            if streaming and not self.first_byte_seen:
                self.first_byte()
                if not self.allow_events:
                    self.held = []  # the first byte is timed: batch the chunks that follow
            if self.inflate is not None:
                body = self._inflated(body)
            self.bytes_sent += len(body)
            if self.parser is not None:
                if streaming:
                    for event in self.parser.feed(body):
                        self.event(event.event_type, event.size)
                else:  # the whole SSE body in one message: not a stream, but its events count
                    self.event_count += len(self.parser.feed(body))
            elif self.counter is not None:
                self.event_count += self.counter.feed(body)
            elif self.lines:
                if self.allow_events:
                    start = 0
                    while (end := body.find(b"\n", start)) >= 0:
                        self.event("line", end + 1 - start)  # what this chunk held of it
                        start = end + 1
                else:
                    self.event_count += body.count(b"\n")
            elif streaming and body:  # a stream that is not SSE: each chunk is an event
                if self.allow_events:
                    self.event("chunk", len(body))
                else:
                    self.event_count += 1
        if more:
            self.streaming = True
            return False
        if self.body_done:
            return False
        self.body_done = True
        return True

    def _inflated(self, data: bytes) -> bytes:
        """The app's bytes behind a compressed chunk, inflated a bounded step at a time."""
        inflate = self.inflate
        parts = []
        while data:
            parts.append(inflate.decompress(data, _INFLATE_STEP))
            data = inflate.unconsumed_tail
        return b"".join(parts)

    def settle(self) -> None:
        """Count the held chunks in one pass: far cheaper than chunk by chunk."""
        held = self.held
        if not held:
            return
        data = b"".join(held)
        chunks = len(held) - held.count(b"")
        held.clear()
        if self.head:
            return
        if self.inflate is not None:
            data = self._inflated(data)
        self.bytes_sent += len(data)
        if self.counter is not None:
            self.event_count += self.counter.feed(data)
        elif self.lines:
            self.event_count += data.count(b"\n")
        else:  # held chunks are all mid-stream: each non-empty one is an event
            self.event_count += chunks

    def _ended(self) -> None:
        """The app's last body message went out: complete, unless the client left first."""
        self.settle_streams(body_end=True)
        if self.left() is None or (
            self.send_error is None
            and self.declared is not None
            and self.sent_at_disconnect >= self.declared
        ):
            self.complete()  # every promised byte had gone out before the client closed

    def end(self, kind: str | None) -> None:
        left = self.left()
        if kind in ("error", "timeout"):
            if not self.started:
                self.complete(500)  # what the server (or ServerErrorMiddleware) answers
            elif kind == "timeout":
                self.abort("timeout", "timeout")
            else:
                self.abort("chunk_error", "app_error")
        elif left is not None:
            self.abort(*left)
        elif kind == "disconnect":
            self.abort("rst", "client_disconnect")
        elif kind == "cancel":
            self.abort("fin_premature", "cancelled")
        else:
            self.abort("fin_premature", "incomplete" if self.started else "no_response")


class _WebSocketExchange(_Exchange):
    """One WebSocket: ingress → [first_byte → event per message…] → complete | aborted."""

    __slots__ = ("close_code",)

    def __init__(
        self,
        emitter: Emitter,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        start: float,
        allow_first_byte: bool,
        allow_events: bool,
    ) -> None:
        super().__init__(emitter, ctx, receive, send, start, allow_first_byte, allow_events)
        self.close_code: int | None = None

    async def receive(self) -> Message:
        message = await self._receive()
        if message.get("type") == "websocket.disconnect" and not self.terminal:
            self.disconnected = True
            code = message.get("code", 1005)
            self.close_code = code if isinstance(code, int) else 1005
        return message

    def send(self, message: Message) -> Awaitable[None]:
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
            if not self.first_byte_seen:
                self.first_byte()
            if self.allow_events:
                self.event("bytes" if text is None else (json_type(text) or "text"), size)
            else:
                self.event_count += 1
        elif kind == "websocket.accept":
            self.started = True
            self.status = 101
            self.response_headers(message.get("headers") or ())
        elif kind == "websocket.close":
            if not self.started:
                self.started = True
                self.status = 403  # a close before accept is the server's refusal
            return True
        elif kind == "websocket.http.response.start":
            self.started = True
            self.status = int(message.get("status", 0))
            self.response_headers(message.get("headers") or ())
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
            if code is None or code in _WS_NO_STATUS or self.send_error is not None:
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


def _flushing_at_shutdown(send: Send, emitter: Emitter) -> Send:
    """The lifespan's ``send``, unchanged, except that the envelopes still queued are written
    before the server is told shutdown is complete.

    Servers stop on SIGTERM by running lifespan shutdown; uvicorn then restores the signal
    handlers it found and raises SIGTERM again, which ends the process before any atexit
    handler runs. This is the last moment cvdiag is sure to have.
    """

    async def send_after_flush(message: Message) -> None:
        if message.get("type") in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            try:
                end_outstanding_calls()  # each ends with one response saying so
                await asyncio.to_thread(emitter.flush, _SHUTDOWN_FLUSH_SECONDS)
            except Exception as exc:
                record_failure("middleware", exc)
        await send(message)

    return send_after_flush


class CvdiagMiddleware:
    """Pure-ASGI middleware emitting the request, stream and error boundaries of each request.

    ``settings=None`` follows the process-wide emitter (``configure()`` may be called after the
    app is built); given settings, the middleware owns an emitter built from them once.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        slug: str | None = None,
        settings: Settings | None = None,
        exclude_paths: Iterable[str | re.Pattern[str]] = (),
        slug_headers: Iterable[str] = ("x-aimock-context",),
        test_id_headers: Iterable[str] = ("x-test-id",),
    ) -> None:
        self.app = app
        self._emitter = Emitter(settings) if settings is not None else None
        self._slug = sanitize_slug(slug) if slug is not None else None
        if slug is not None and self._slug is None:
            say(f"CvdiagMiddleware: slug {scrub(slug)[:64]!r} is not a valid slug; ignored")
        exact: set[str] = set()
        patterns: list[re.Pattern[str]] = []
        for item in (
            (exclude_paths,) if isinstance(exclude_paths, (str, re.Pattern)) else exclude_paths
        ):
            if isinstance(item, re.Pattern):
                patterns.append(item)
            else:
                exact.add(item)
        self._exclude_exact = frozenset(exact)
        self._exclude_patterns = tuple(patterns)
        self._slug_headers = tuple(h.strip().lower().encode("latin-1") for h in slug_headers)
        self._test_id_headers = tuple(h.strip().lower().encode("latin-1") for h in test_id_headers)
        # Not request state: the tier's answers, recomputed whenever the emitter or tier changes.
        self._allowed: tuple[Emitter, Tier, tuple[bool, bool, bool]] | None = None
        self._wanted = frozenset(
            (*self._slug_headers, *self._test_id_headers, *_EDGE, _CONTENT_LENGTH)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        emitter = self._emitter or _emitters._emitter or get_emitter()
        if not emitter.enabled:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "lifespan":
            await self.app(scope, receive, _flushing_at_shutdown(send, emitter))
            return
        bridge = emitter.otel
        if bridge is not None and scope["type"] in _TRACED and bridge.tracing():
            with bridge.server_span(scope) as (span, owned):
                await self._observe(scope, receive, send, emitter, span, owned=owned)
            return
        await self._observe(scope, receive, send, emitter, None)

    async def _observe(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        emitter: Emitter,
        span: Span | None,
        *,
        owned: bool = False,
    ) -> None:
        exchange: _HTTPExchange | _WebSocketExchange | None = None
        try:
            exchange = self._begin(scope, emitter, receive, send)
            if span is not None and exchange is not None:
                annotate_request(span, exchange.ctx)
        except Exception as exc:
            record_failure("middleware", exc)
        if exchange is None:
            await self.app(scope, receive, send)
            return
        token = set_context(exchange.ctx)
        state_token = _STATE.set(exchange.state)
        own = _emitters._REQUEST_EMITTER.set(emitter) if self._emitter is not None else None
        failure: BaseException | None = None
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except BaseException as exc:
            failure = exc
            exchange.finish(exc)
            raise
        else:
            exchange.finish(None)
        finally:
            _STATE.reset(state_token)
            reset_context(token)
            if own is not None:
                _emitters._REQUEST_EMITTER.reset(own)
            if span is not None and owned:
                finish_request(span, scope, exchange.status, failure)

    def _allows(self, emitter: Emitter) -> tuple[bool, bool, bool]:
        """What the emitter's tier keeps of ingress, first_byte and event; cached per tier."""
        cached = self._allowed
        tier = emitter.tier
        if cached is not None and cached[0] is emitter and cached[1] is tier:
            return cached[2]
        answers = (
            emitter.allows("backend.request.ingress"),
            emitter.allows("backend.sse.first_byte"),
            emitter.allows("backend.sse.event"),
        )
        self._allowed = (emitter, tier, answers)
        return answers

    def _excluded(self, path: str) -> bool:
        if path in self._exclude_exact:
            return True
        return any(pattern.fullmatch(path) for pattern in self._exclude_patterns)

    def _begin(
        self, scope: Scope, emitter: Emitter, receive: Receive, send: Send
    ) -> _HTTPExchange | _WebSocketExchange | None:
        """The request's exchange, its context and its ingress; None to pass through."""
        kind = scope["type"]
        if kind == "http":
            cls: type[_HTTPExchange | _WebSocketExchange] = _HTTPExchange
        elif kind == "websocket":
            cls = _WebSocketExchange
        else:
            return None  # lifespan and unknown scope types are not ours
        path = scope.get("path") or "/"
        # Under a root path (uvicorn --root-path, a mount) scope["path"] includes it; routes,
        # exclusions and the demo name are the app's own path.
        root = scope.get("root_path")
        local = path[len(root) :] or "/" if root and path.startswith(root) else path
        if (self._exclude_exact or self._exclude_patterns) and self._excluded(local):
            return None
        start = time.perf_counter()
        wanted = self._wanted
        found: dict[bytes, bytes] = {}
        for name, value in scope.get("headers") or ():
            if name in wanted and name not in found:
                found[name] = value
        test_id: str | None = None
        for name in self._test_id_headers:
            if name in found:
                test_id = adopt_test_id(found[name])
                break
        slug = self._slug
        if slug is None:
            for name in self._slug_headers:
                if name in found:
                    slug = sanitize_slug(found[name])
                    if slug is not None:
                        break
        span_id = new_span_id()
        ctx = RequestContext(
            test_id=test_id or new_uuid7(),
            trace_id=emitter.new_trace_id(),
            slug=slug or "unknown",
            demo=_demo(local),
            span_id=span_id,
        )
        allow_ingress, allow_first_byte, allow_events = self._allows(emitter)
        if allow_ingress:
            edge: dict[str, str | None] | None = None
            for raw, key in _EDGE.items():
                if raw in found:
                    if edge is None:
                        edge = dict.fromkeys(EDGE_HEADER_KEYS)
                    edge[key] = _edge_value(found[raw])
            method = "WEBSOCKET" if kind == "websocket" else str(scope.get("method", ""))[:32]
            emitter.emit(
                "backend.request.ingress",
                outcome="info",
                metadata={
                    "method": method,
                    "path": scrub_text(path, _PATH_MAX),  # scrubbed, then cut
                    "content_length": _content_length(found.get(_CONTENT_LENGTH)),
                },
                context=ctx,
                span_id=span_id,
                parent_span_id=None,
                edge_headers=edge,
            )
        exchange = cls(emitter, ctx, receive, send, start, allow_first_byte, allow_events)
        if isinstance(exchange, _HTTPExchange) and scope.get("method") == "HEAD":
            exchange.head = True
        return exchange
