"""The SSE events of a response body as the client receives them: each event's type and payload
size, read chunk by chunk in bounded memory (a gzip or deflate body inflated first, as a proxy
that compresses ``text/event-stream`` sends it).

The probe needs no more than the backend's counter says of the same stream: how many events,
their names, how big. An event longer than ``MAX_HELD`` is still counted, its size exact; only
its fields past that point are not read.
"""

from __future__ import annotations

import zlib
from typing import Final

#: Bytes of one unfinished event kept to read its ``event:`` field; the rest is only counted.
MAX_HELD: Final = 8192
#: Bytes inflated per chunk at most: a compression bomb costs the probe no more than this.
MAX_INFLATED: Final = 1 << 20
_NAME_MAX: Final = 128


class EventCounter:
    """Feeds on raw body chunks; ``feed`` returns the events each chunk completed as
    ``(event_type, payload_size_bytes)``."""

    __slots__ = ("_held", "_inflate", "_size", "_spilled", "count")

    def __init__(self, content_encoding: str | None = None) -> None:
        encoding = (content_encoding or "").strip().lower()
        #: zlib reads gzip and zlib headers alike with 32 + MAX_WBITS; None: identity.
        self._inflate = (
            zlib.decompressobj(32 + zlib.MAX_WBITS) if encoding in ("gzip", "deflate") else None
        )
        self._held = b""
        #: Bytes of the current event not held (past ``MAX_HELD``), counted all the same.
        self._spilled = 0
        self._size = 0
        self.count = 0

    def feed(self, chunk: bytes) -> list[tuple[str, int]]:
        if self._inflate is not None:
            try:
                chunk = self._inflate.decompress(chunk, MAX_INFLATED)
            except zlib.error:
                self._inflate = None  # not what its header said: read no more of it
                return []
        data = self._held + chunk
        found: list[tuple[str, int]] = []
        start = 0
        while True:
            end, gap = _event_end(data, start)
            if end < 0:
                break
            found.append(_read_event(data[start:end], self._spilled))
            self._spilled = 0
            start = end + gap
        rest = data[start:]
        if len(rest) > MAX_HELD:
            # Keep the event's head (its fields) and a tail long enough to see a separator
            # that straddles two chunks; the bytes between are counted, not kept.
            self._spilled += len(rest) - MAX_HELD
            rest = rest[: MAX_HELD - 4] + rest[-4:]
        self._held = rest
        self.count += len(found)
        return found


def _event_end(data: bytes, start: int) -> tuple[int, int]:
    """Where the first event at ``start`` ends (a blank line) and the separator's length."""
    best, gap = -1, 0
    for separator in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = data.find(separator, start)
        if at >= 0 and (best < 0 or at < best):
            best, gap = at, len(separator)
    return best, gap


def _read_event(block: bytes, spilled: int) -> tuple[str, int]:
    name = "message"
    size = 0
    for raw in block.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        field, _, value = raw.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            size += len(value)
        elif field == b"event" and value:
            name = value[:_NAME_MAX].decode("utf-8", "replace")
    return name, size + spilled
