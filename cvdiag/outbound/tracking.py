"""Following one LLM response's body as it passes: first chunk, usage, and the end of its call.

The httpx transports hand each response body chunk to a ``Tracker`` before the caller sees it.
It undoes gzip / deflate, reads SSE lines or buffers a bounded JSON body, and lets
``cvdiag.providers.usage`` say what the response holds (tokens, model, id, finish reasons). It
ends its call exactly once: at the end of the body, when it is closed early, or when the request
that opened it ends with the stream abandoned.

Nothing of the completion is kept: at most one SSE line or one bounded body is held, and only
until it is parsed.
"""

from __future__ import annotations

import asyncio
import zlib
from time import monotonic
from typing import Any, Final

import orjson

from cvdiag.core.guard import record_failure
from cvdiag.providers.usage import (
    ERROR_MARK,
    FINISH_IN_LINE,
    TOKENS_IN_TAIL,
    USAGE_MARK,
    ResponseFacts,
)
from cvdiag.scopes import LLMCall

#: JSON response bodies (decoded) are parsed only up to this size.
BODY_PARSE_MAX: Final = 1024 * 1024
#: An SSE line longer than this is skipped (a usage chunk is a few hundred bytes).
LINE_MAX: Final = 256 * 1024
#: Past BODY_PARSE_MAX, this much of a JSON body's end is kept to find its usage.
_TAIL_KEEP: Final = 8192
#: The event that ends a provider's stream: Anthropic Messages, the OpenAI Responses API
#: (``data: [DONE]`` ends Chat Completions). An SDK may close the response right after it,
#: before the transport reaches the end of the body: that is a complete call, not a cut one.
_STREAM_END_TYPES: Final = frozenset(
    {"message_stop", "response.completed", "response.incomplete", "response.failed"}
)
#: ``error_class`` of a call whose stream was left unread and unclosed.
ABANDONED_ERROR: Final = "StreamCancelledUnclosed"
_STREAM_END_EVENTS: Final = frozenset(name.encode() for name in _STREAM_END_TYPES)


def current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop, or not asyncio (trio under anyio)
        return None


class Undecodable(Exception):
    """A content encoding cvdiag does not decode (brotli, zstd): usage stays unknown."""


class Decoder:
    """Undo gzip / deflate content encoding; the transport sees the bytes before httpx does."""

    def __init__(self, encoding: str) -> None:
        wbits = zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._zlib = zlib.decompressobj(wbits)

    def decode(self, data: bytes) -> bytes:
        try:
            return self._zlib.decompress(data)
        except zlib.error as exc:
            raise Undecodable from exc

    def flush(self) -> bytes:
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise Undecodable from exc


def _decoder_for(headers: Any) -> Decoder | None:
    encoding = str(headers.get("content-encoding", "")).strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return Decoder(encoding)
    raise Undecodable(encoding)


class Tracker:
    """Follows one LLM response's body: first chunk, usage, and the single end of its call.

    ``owned`` is False when the request ran inside a hand-written ``llm_call``: then the tracker
    only fills in that call's token count and first-chunk time, and never ends it.
    """

    __slots__ = (
        "_body",
        "_decoder",
        "_line",
        "_overflow",
        "_seen_data",
        "_skipping",
        "_sse",
        "_tracking",
        "call",
        "done",
        "error_class",
        "facts",
        "owned",
        "provider_done",
        "reader",
        "reading",
    )

    def __init__(self, call: LLMCall, owned: bool, response: Any) -> None:
        self.call = call
        self.owned = owned
        self.done = False
        self.facts = ResponseFacts()
        status = int(response.status_code)
        #: An HTTP error status is a failed call even though nothing raised.
        self.error_class: str | None = f"HTTP{status}" if status >= 400 else None
        headers = response.headers
        self._sse = "text/event-stream" in str(headers.get("content-type", "")).lower()
        #: The provider's own end-of-stream event was seen: a close after it is no cut.
        self.provider_done = False
        #: Who reads the body (an asyncio task, or a thread's ident for a sync stream), and
        #: whether a read is in progress: how a request's end tells abandoned from still read.
        self.reader: asyncio.Task[Any] | int | None = None
        self.reading = False
        self._body = bytearray()
        self._line = bytearray()
        self._overflow = False
        self._seen_data = False
        self._skipping = False
        self._tracking = True
        try:
            self._decoder = _decoder_for(headers)
        except Undecodable:
            self._decoder = None
            self._tracking = False

    def waiting(self) -> None:
        """A read of the body begins: from now the stream waits on the network."""
        self.reading = True
        if self._sse:
            self.call.chunk_wait_since = monotonic()

    def got_chunk(self) -> None:
        """The read returned a chunk: the app holds it, nobody waits on the network."""
        self.reading = False
        self.call.chunk_wait_since = None

    def feed(self, chunk: bytes) -> None:
        """One chunk of the raw body. Never raises: a failure only stops the usage reading."""
        if not chunk:
            return
        call = self.call
        if call.first_chunk_at is None and self._sse:  # time to first token: streams only
            call.first_chunk_at = monotonic()
        if not self._tracking:
            return
        try:
            data = self._decoder.decode(chunk) if self._decoder is not None else chunk
            if self._sse:
                self._feed_lines(data)
            else:
                self._feed_body(data)
        except Undecodable:
            self._stop_tracking()
        except Exception as exc:
            record_failure("httpx", exc)
            self._stop_tracking()

    def _stop_tracking(self) -> None:
        self._tracking = False
        self._body = bytearray()
        self._line = bytearray()

    def _feed_body(self, data: bytes) -> None:
        body = self._body
        body += data
        if self._overflow:
            del body[:-_TAIL_KEEP]
        elif len(body) > BODY_PARSE_MAX:
            self._overflow = True
            del body[:-_TAIL_KEEP]

    def _feed_lines(self, data: bytes) -> None:
        line = self._line
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                if not self._skipping:
                    line += data[start:]
                    if len(line) > LINE_MAX:
                        line.clear()
                        self._skipping = True
                return
            if self._skipping:
                self._skipping = False
            elif line:
                line += data[start:end]
                self._read_line(bytes(line))
                line.clear()
            else:
                self._read_line(data[start:end])
            start = end + 1

    def _read_line(self, line: bytes) -> None:
        if line.startswith(b"event:"):
            if line[6:].strip() in _STREAM_END_EVENTS:
                self.provider_done = True
            return
        # Only the first ``data:`` line (the response's id and model) and those that mention
        # usage are parsed; content chunks are only searched for a finish reason.
        if not line.startswith(b"data:"):
            return
        if USAGE_MARK not in line and ERROR_MARK not in line and self._seen_data:
            if line[5:].strip() == b"[DONE]":
                self.provider_done = True
            elif b'eason"' in line and b'eason": null' not in line and b'eason":null' not in line:
                # Most content chunks say ``"finish_reason": null``: two substring checks
                # spare them the regular expression.
                for reason in FINISH_IN_LINE.findall(line):
                    self.facts.add_reason(reason.decode())
                    # The answer is whole: an app that stops reading here (a common ``break``
                    # on the finish reason) has not cut it short.
                    self.provider_done = True
            return
        if line[5:].strip() == b"[DONE]":
            self.provider_done = True
            return
        self._seen_data = True
        try:
            parsed = orjson.loads(line[5:].strip())
        except orjson.JSONDecodeError:
            return
        # Anthropic sends a provisional count in message_start and the final one in
        # message_delta: the last one seen wins.
        self.facts.absorb(parsed)
        if self.facts.finish_reasons:  # a finish reason beside usage: the answer is whole too
            self.provider_done = True
        if isinstance(parsed, dict) and parsed.get("type") in _STREAM_END_TYPES:
            self.provider_done = True  # a data-only stream of typed events

    def _read_body(self) -> None:
        if self._decoder is not None:
            self._feed_body(self._decoder.flush())
        body = bytes(self._body)
        if not body:
            return
        if not self._overflow:
            try:
                self.facts.absorb(orjson.loads(body))
            except orjson.JSONDecodeError:
                return
        else:
            found = TOKENS_IN_TAIL.findall(body)
            if found:
                self.facts.output_tokens = int(found[-1])

    def read_all(self, content: bytes) -> None:
        """A response whose body was already read (a mock transport, a cache): decoded bytes."""
        self._decoder = None
        self.feed(content)

    def finish(
        self,
        exc: BaseException | None = None,
        *,
        early: bool = False,
        cancelled: bool = False,
        abandoned: bool = False,
    ) -> None:
        """The body is exhausted (default), failed (``exc``), was closed ``early`` or was
        ``abandoned`` unread by the request that opened it: once."""
        if self.done:
            return
        self.done = True
        call = self.call
        call.chunk_wait_since = None  # a hand-written call may go on: this stream waits no more
        try:
            if self._tracking and not self._sse:
                self._read_body()
        except Undecodable:
            pass
        except Exception as failure:
            record_failure("httpx", failure)
        self._stop_tracking()
        try:
            facts = self.facts
            if facts.output_tokens is not None and (
                self.owned or call.response_token_count is None
            ):
                call.record_response(facts.output_tokens)
            if self.owned or call.response_facts is None:
                call.response_facts = facts
            if not self.owned:
                return
            if self.error_class is None:
                # A failure the provider reported after answering 200 (an error event, a
                # ``response.failed``): the call failed, however the stream then ended.
                self.error_class = facts.error
            if exc is not None:
                call.finish(exc)
            elif (early or abandoned) and not self.provider_done:
                if abandoned:
                    closed = ABANDONED_ERROR
                else:
                    closed = "CancelledError" if cancelled else "StreamCancelled"
                call.finish(error_class=self.error_class or closed)
            else:
                call.finish(error_class=self.error_class)
        except Exception as failure:
            record_failure("httpx", failure)

    def abandoned(self) -> None:
        """The stream was garbage-collected unclosed: let the heartbeat thread end the call."""
        if not self.done and self.owned:
            self.call.orphaned = True

    def request_ending(self, *, body_end: bool) -> bool:
        """The request that opened this stream is ending; True once nothing is left to watch.

        At the end of the response body, a stream read by the task that sent that body and
        left unfinished will not be read again. When the app returns, a stream nobody read, or
        whose reader (this task, or one that has finished) is gone, is abandoned likewise. A
        stream another live task reads goes on, truly (a graph run that outlives its client):
        it ends with that reading, at the latest when that task ends. A sync stream, read in a
        worker thread, counts as read on only while a read is in progress.
        """
        if self.done:
            return True
        reader = self.reader
        if isinstance(reader, int):  # a sync stream: its thread's handler has returned
            if self.reading:
                return not body_end  # a read in progress: it ends with its reading
            self.finish(abandoned=True)
            return True
        here = current_task()
        if body_end:
            if reader is None or reader is not here:
                return False
        elif reader is not None and reader is not here and not reader.done():
            reader.add_done_callback(lambda _task: self.finish(abandoned=True))
            return True
        self.finish(abandoned=True)
        return True
