"""What an LLM response body says, read as it passes: decoding, SSE lines, a bounded JSON body.

``Tracker`` (cvdiag/outbound/tracking.py) is this reader plus the call's side: the first chunk,
who reads, and the call's one end. The reading lives here, apart from that lifecycle, because it
is the per-chunk work whose bounds (what is held, what is parsed) carry the promise below; it is
a base class rather than an object the tracker holds, so a chunk costs no extra lookup or call.
``cvdiag.providers.usage`` says what a parsed line or body holds (tokens, model, id, finish
reasons, errors).

Nothing of the completion is kept: at most one SSE line or one bounded body is held, and only
until it is parsed.
"""

from __future__ import annotations

import zlib
from typing import Any, Final

import orjson

from cvdiag.providers.usage import (
    ERROR_MARK,
    FINISH_IN_LINE,
    TOKENS_IN_TAIL,
    USAGE_MARK,
    ResponseFacts,
)

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
_STREAM_END_EVENTS: Final = frozenset(name.encode() for name in _STREAM_END_TYPES)


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


class BodyReader:
    """The reading half of a ``Tracker``: fills ``facts``, and notes the provider's own end."""

    __slots__ = (
        "_body",
        "_decoder",
        "_line",
        "_overflow",
        "_seen_data",
        "_skipping",
        "_sse",
        "_tracking",
        "facts",
        "provider_done",
    )

    def __init__(self, headers: Any) -> None:
        self.facts = ResponseFacts()
        self._sse = "text/event-stream" in str(headers.get("content-type", "")).lower()
        #: The provider's own end-of-stream event was seen: a close after it is no cut.
        self.provider_done = False
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
