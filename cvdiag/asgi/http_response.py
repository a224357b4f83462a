"""An HTTP request's response side as cvdiag counts it: the start, the body, its events.

The base class of ``HTTPExchange`` (``http_exchange.py``), which wraps ``receive`` and ``send``
and chooses the terminal: there is when the client is heard from and what the end means; here is
what a response message says once it is looked at, the status and what the headers make of the
body (SSE, NDJSON-like lines, compressed), then each chunk's bytes and events. A compressed body
is inflated so that sizes and events are the app's own. Below the debug tier the send path only
holds mid-stream chunks, and ``settle`` counts them here in one pass. The receive side's few
fields are set here too: one ``setup`` call per request, not a chain of them.
"""

from __future__ import annotations

import os
import time
import zlib
from typing import Any, Final

from starlette.types import Message

from cvdiag.asgi.exchange import Exchange
from cvdiag.asgi.headers import content_length, merged_edge, response_facts
from cvdiag.asgi.look import Look
from cvdiag.asgi.sse import SSECounter
from cvdiag.asgi.sse_edges import edge_event_type
from cvdiag.asgi.sse_parser import SSEParser

#: zlib window bits per content coding: gzip, and zlib-wrapped deflate. Other codings (br,
#: zstd) are counted as sent: the standard library cannot read them.
_INFLATE_BITS: Final = {b"gzip": 16 + zlib.MAX_WBITS, b"deflate": zlib.MAX_WBITS}
#: A compressed body is inflated this much at a time, so memory stays bounded.
_INFLATE_STEP: Final = 256 * 1024
_SSE_TYPE: Final = b"text/event-stream"
#: Bytes of an SSE body's start, and at least of its end, kept for its terminal's
#: ``first_event_type`` and ``last_event_type``.
_TAIL: Final = 4096
#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round).
_perf_counter: Final = time.perf_counter
#: Streams of newline-delimited records: each record is an event, however the bytes are
#: chunked on the way (a compressor re-chunks them).
_LINE_TYPES: Final = (b"application/x-ndjson", b"application/jsonl", b"application/json-seq")


class HTTPResponseSide(Exchange):
    """What the app sent, counted: bytes, events, and whether (and when) the body ended; and
    every field of an HTTP exchange, so that ``HTTPExchange`` adds methods only."""

    __slots__ = (
        "answered",
        "body_done",
        "counter",
        "declared",
        "gone_at_start",
        "head",
        "held",
        "inflate",
        "lines",
        "opening",
        "parser",
        "request_read",
        "sent_at_disconnect",
        "sent_before_failure",
        "stashed",
        "streaming",
        "tail",
    )

    def setup(self) -> None:
        self.body_done = False
        #: A 5xx's final body message went out; its terminal waits for the app's exit.
        self.answered = False
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
        # What the receive side (``HTTPExchange``) learns of the client, kept here with the rest
        # so that an exchange's fields are set in one call.
        self.sent_at_disconnect = 0
        #: Body bytes that had gone to the server before the send that failed (read only once
        #: ``send_error`` is set): the failed message's own did not.
        self.sent_before_failure = 0
        #: The app read the request body to its end: only now may the probe look (``look.py``).
        self.request_read = False
        #: What the probe took off ``receive``, for the app's next call of it.
        self.stashed: Look | None = None
        #: The probe found the client gone as the response started.
        self.gone_at_start = False
        #: The start and the end of an SSE body as looked at (a chunk, or a held batch): the
        #: terminal names its first and last events from them, once (``edge_events``).
        self.opening = b""
        self.tail = b""

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
        self.sent_at = _perf_counter()
        self.status = int(message.get("status", 0))
        headers = message.get("headers") or ()
        content_type, encoding, length, edge = response_facts(headers)
        if edge is not None:
            self.edge = merged_edge(self.edge, edge)
        self.declared = content_length(length)
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

    def _body(self, raw: Any, more: bool) -> bool:
        # ``Any``, not ``bytes``: an app may hand a bytearray or a memoryview, which the
        # compiled build (docs/production.md) would refuse at a ``bytes`` parameter.
        body: bytes = raw if type(raw) is bytes else bytes(raw)
        if self.held:
            self.settle()  # what is held was sent before this chunk
        if body and not self.head:
            self.sent_at = _perf_counter()
            streaming = more or self.streaming
            if streaming and not self.first_byte_seen:
                self.first_byte(keepalive=self.allow_first_byte and self._keepalive(body))
                if not self.allow_events:
                    self.held = []  # the first byte is timed: batch the chunks that follow
            if self.inflate is not None:
                body = self._inflated(body)
            self.bytes_sent += len(body)
            if self.parser is not None or self.counter is not None:
                self._keep_tail(body)
            if self.parser is not None:
                if streaming:
                    for event_type, size in self.parser.feed(body):
                        self.event(event_type, size)
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

    def _keep_tail(self, data: bytes) -> None:
        if len(self.opening) < _TAIL:
            self.opening += data[: _TAIL - len(self.opening)]
        # A short piece (the end of an event, a ``\n\n``) keeps what came before it.
        self.tail = data if len(data) >= _TAIL else self.tail[-_TAIL:] + data

    def edge_events(self) -> tuple[str | None, str | None]:
        """The types of the SSE body's first and last whole events, read once as it ends."""
        self.settle()
        tail = self.tail
        if not tail:
            return None, None  # no SSE body (a JSON answer): nothing to look for
        if tail.find(b'"type"') < 0 and tail.find(b"event:") < 0:
            return None, None  # plain ``data:`` events name no protocol: no parse
        last = edge_event_type(tail, last=True)
        if last is None or last == "message":
            return None, last
        return edge_event_type(self.opening, last=False), last

    def _keepalive(self, body: bytes) -> bool:
        """Whether this (first) chunk of an SSE body holds only comments and blank lines."""
        if (self.parser is None and self.counter is None) or self.inflate is not None:
            return False
        if body.lstrip()[:1] not in (b":", b""):
            return False  # the usual first chunk, an event: no line split
        return all(not line or line[:1] == b":" for line in body.splitlines())

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
        if self.head:
            held.clear()
            return
        data = b"".join(held)
        inflate = self.inflate
        if inflate is not None:
            data = self._inflated(data)
        self.bytes_sent += len(data)
        if self.counter is not None:
            self._keep_tail(data)
            # The chunks as the app sent them, where they are what is counted (not inflated).
            self.event_count += self.counter.feed_batch(held if inflate is None else None, data)
        elif self.lines:
            self.event_count += data.count(b"\n")
        else:  # held chunks are all mid-stream: each non-empty one is an event
            self.event_count += len(held) - held.count(b"")
        held.clear()
