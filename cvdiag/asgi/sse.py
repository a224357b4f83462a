"""Incremental Server-Sent Events framing, read off the bytes the middleware sends.

Two readers share one framing (``Framing``): ``SSECounter``, here, only counts dispatched
events (what every tier needs for ``sse_event_count``) and ``SSEParser`` (``sse_parser.py``)
also names and sizes each event (what the debug tier's ``backend.sse.event`` needs). Both accept
chunks cut anywhere — an event split across chunks, several events in one chunk, LF, CRLF or CR
line endings, a CRLF split between two chunks — and both hold a bounded amount of memory however
large an event grows.

An event is dispatched, as in the WHATWG EventSource algorithm, at a blank line that closes a
block holding at least one ``data`` field; comment-only blocks (keep-alive pings) and blocks
without data dispatch nothing. An unterminated block at the end of the stream is discarded.
"""

from __future__ import annotations

import re
from importlib.machinery import EXTENSION_SUFFIXES
from itertools import repeat
from typing import Final

import orjson

#: Bytes of one unfinished block (counter) or line (parser) held before it is condensed.
BUFFER_LIMIT: Final = 64 * 1024
#: Bytes of an event's data kept to read its JSON ``type``; the rest is only counted.
DATA_KEEP: Final = 64 * 1024
#: Characters of an event type read. The emitter scrubs the type as an identifier (kept whole or
#: replaced by a digest placeholder) before keeping 256 characters: reading well past what is
#: kept lets it see a credential that straddles the cut whole.
TYPE_MAX: Final = 1024
#: Bytes of a condensed line's start the counter keeps: enough to recognise a ``data`` field.
_FIELD_KEEP: Final = 16
_BOM: Final = b"\xef\xbb\xbf"
#: A line ending's bytes as values. ``bytes.__contains__`` tries its operand as a byte value
#: first: a ``bytes`` needle costs a TypeError raised and cleared (about 2,000 instructions under
#: CPython 3.11, far more than the scan), a byte value one ``memchr``. So single bytes are looked
#: for by value (``CR in chunk``), longer needles with ``find``.
CR: Final = 13
LF: Final = 10
#: Whether this module runs compiled (docs/production.md): then a held batch's chunks are
#: looked at one by one where that counts it (``SSECounter.feed_batch``).
CHUNKWISE: Final = __file__.endswith(tuple(EXTENSION_SUFFIXES))

#: A bare ``data`` line (no colon) also makes a block an event; ``data:`` is looked for by ``find``.
_BARE_DATA: Final = re.compile(rb"(?:^|\n)data(?:\n|$)")
#: The common shape, ``{"type": "X", ...}``: the type of a head too large or cut to parse.
_LEADING_TYPE: Final = re.compile(rb'\s*\{\s*"type"\s*:\s*"([^"\\]{1,128})"')


def _has_data(block: bytes) -> bool:
    """Whether a block (LF-normalized, without its terminator) holds a ``data`` field."""
    return (
        block.startswith(b"data:")
        or block.find(b"\ndata:") >= 0
        or _BARE_DATA.search(block) is not None
    )


def json_type(data: bytes | str, *, complete: bool = True) -> str | None:
    """The top-level string ``type`` of a JSON object, as AG-UI and OpenAI Responses send it.

    Complete data up to ``DATA_KEEP`` bytes is parsed. A truncated head cannot be, so there
    only a leading ``{"type": "X"`` is read (the outermost object's first key, never a nested one).
    """
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
    if not complete or len(raw) > DATA_KEEP:
        match = _LEADING_TYPE.match(raw)
        return match.group(1).decode("utf-8", "replace") if match is not None else None
    if raw[:1] != b"{" and raw.lstrip()[:1] != b"{":  # most data starts with its brace
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    return kind[:TYPE_MAX] if isinstance(kind, str) and kind else None


class Framing:
    """Line-ending normalization shared by both readers: CRLF and CR become LF."""

    __slots__ = ("_clean", "_cr", "_started")

    def __init__(self) -> None:
        self._cr = False  # the previous chunk ended in CR: a leading LF now belongs to it
        self._started = False
        #: At an event boundary with nothing held: a whole-event chunk may take the fast path.
        self._clean = False

    def _normalize(self, chunk: bytes) -> bytes:
        if not self._started and chunk:
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        if not chunk:
            return chunk
        if self._cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._cr = chunk.endswith(b"\r")
        if CR in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return chunk


class SSECounter(Framing):
    """Counts dispatched events with a few ``bytes`` scans per chunk.

    Chunks that hold whole events are split on the blank-line terminator directly; only an
    unfinished block is buffered. Past ``BUFFER_LIMIT`` that block is condensed to what decides
    whether it is an event (has it a ``data`` field?) and the start of its last line.
    """

    __slots__ = ("_pending_data", "_tail")

    def __init__(self) -> None:
        super().__init__()
        self._tail = bytearray()
        self._pending_data = False  # a condensed-away part of the unfinished block had data

    def feed(self, chunk: bytes) -> int:
        """Take the next chunk; return how many events it completed."""
        # The common chunk is one whole event ("data: {...}\n\n", maybe after "event: x\n")
        # arriving at an event boundary: a few C-level scans, no copies.
        if (
            self._clean
            and chunk.find(b"\n\n") == len(chunk) - 2
            and (chunk.startswith(b"data:") or chunk.find(b"\ndata:") >= 0)
            and CR not in chunk
        ):
            return 1
        count = self._feed(chunk)
        self._clean = self._started and not self._cr and not self._tail and not self._pending_data
        return count

    def feed_batch(self, chunks: list[bytes] | None, joined: bytes) -> int:
        """``feed(joined)``, where ``joined`` is ``chunks`` one after another (None: unknown).
        Compiled, a batch of whole single-line CRLF events is counted chunk by chunk instead
        (``whole_events``): the same count, for a few hundred instructions a chunk where
        normalizing its line endings costs about 12 a byte. Interpreted, each chunk's checks
        are method calls, dearer than the batch's scans, so the batch is fed whole."""
        if CHUNKWISE and chunks is not None:
            count = self.whole_events(chunks, joined)
            if count is not None:
                return count
        return self.feed(joined)

    def whole_events(self, chunks: list[bytes], joined: bytes) -> int | None:
        """The events of a batch in CRLF (sse-starlette writes it) whose chunks each hold one
        single-line ``data:`` event, arriving at an event boundary, counted (and the counter
        left as ``feed`` would leave it); None for any other batch, which is not taken."""
        # At an event boundary: nothing of an unfinished block held (a CR the last chunk ended
        # with is a whole line ending before a chunk that opens with ``data:``).
        if self._tail or self._pending_data or CR not in joined:
            return None
        for chunk in chunks:
            # Its one line holds no other line ending, so no reading splits it otherwise.
            if not (chunk.startswith(b"data:") and chunk.endswith(b"\r\n\r\n")):
                return None
            line = chunk[5:-4]
            if CR in line or LF in line:
                return None
        self._started = self._clean = True
        return len(chunks)

    def _feed(self, chunk: bytes) -> int:
        if self._cr or not self._started or CR in chunk:
            chunk = self._normalize(chunk)
        tail = self._tail
        if not tail and not self._pending_data and chunk.endswith(b"\n\n"):
            # A batch of held chunks is usually whole events that each open with their data
            # line: counted with C-level scans, no block objects. Each terminator ends a block,
            # and when each of those blocks opens with "data:" (the first, and the one after
            # each terminator but the last) each is an event; otherwise split below.
            ends = chunk.count(b"\n\n")
            if chunk.count(b"\n\ndata:") + chunk.startswith(b"data:") == ends:
                return ends
        if tail:
            if chunk.find(b"\n\n") < 0 and not (chunk.startswith(b"\n") and tail.endswith(b"\n")):
                tail += chunk
                if len(tail) > BUFFER_LIMIT:
                    self._condense()
                return 0
            chunk = bytes(tail) + chunk
            tail.clear()
        blocks = chunk.split(b"\n\n")
        rest = blocks.pop()
        count = 0
        if blocks:
            if self._pending_data:
                self._pending_data = False
                count = 1
                del blocks[0]
            # Most blocks open with their data line: count those in C; look closer only if not.
            starting = sum(map(bytes.startswith, blocks, repeat(b"data:")))
            if starting != len(blocks):
                starting = sum(1 for block in blocks if _has_data(block))
            count += starting
        if rest:
            tail += rest
            if len(tail) > BUFFER_LIMIT:
                self._condense()
        return count

    def _condense(self) -> None:
        tail = self._tail
        cut = tail.rfind(b"\n")
        if cut < 0:
            # One long line: keep its start (its field name); the rest cannot change the count.
            del tail[_FIELD_KEEP:]
            return
        if _has_data(bytes(tail[:cut])):
            self._pending_data = True
        # Keep the newline before the last line, so a following "\n" still ends the block.
        last = bytes(tail[cut : cut + 1 + _FIELD_KEEP])
        tail.clear()
        tail += last
