"""The debug tier's SSE reader: each dispatched event named and sized as it is sent.

It shares its framing (line endings, the BOM) with the counter every tier uses
(``sse.py``, which says how events are dispatched), and holds a bounded amount of memory
however large an event grows.
"""

from __future__ import annotations

from typing import NamedTuple

from cvdiag.asgi.sse import BUFFER_LIMIT, CR, DATA_KEEP, LF, TYPE_MAX, Framing, json_type


class SSEEvent(NamedTuple):
    """One dispatched event: its type and the UTF-8 size of its data."""

    event_type: str
    size: int


class SSEParser(Framing):
    """Names and sizes each dispatched event; line by line, bounded.

    ``event_type`` is the ``event:`` field, else the JSON ``type`` of the data, else
    ``"message"``; ``size`` is the UTF-8 byte length of the event's data (data lines joined by
    LF), however large. Only the first ``DATA_KEEP`` bytes of the data are held.
    """

    __slots__ = ("_data", "_data_len", "_event", "_has_data", "_line", "_line_dropped", "_lossy")

    def __init__(self) -> None:
        super().__init__()
        self._line = bytearray()  # the unfinished last line (at most BUFFER_LIMIT bytes of it)
        self._line_dropped = 0  # bytes of that line not held
        self._event = b""
        self._data = bytearray()
        self._data_len = 0
        self._has_data = False
        self._lossy = False  # some data was not held: only the leading-type regex may be used

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Take the next chunk; return the events it completed, in order."""
        # The common chunk is one single-line data event at an event boundary.
        if (
            self._clean
            and chunk.startswith(b"data:")
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk.endswith(b"\n\n")
            and CR not in chunk
        ):
            value = chunk[6:-2] if chunk.startswith(b"data: ") else chunk[5:-2]
            return [SSEEvent(json_type(value) or "message", len(value))]
        events = self._feed(chunk)
        self._clean = (
            self._started
            and not self._cr
            and not self._line
            and not self._line_dropped
            and not self._has_data
            and not self._event
        )
        return events

    def _feed(self, chunk: bytes) -> list[SSEEvent]:
        chunk = self._normalize(chunk)
        if LF not in chunk:
            self._hold(chunk)
            return []
        if self._line:
            chunk = bytes(self._line) + chunk
            self._line.clear()
        lines = chunk.split(b"\n")
        rest = lines.pop()
        events: list[SSEEvent] = []
        for line in lines:
            dropped, self._line_dropped = self._line_dropped, 0
            if line or dropped:
                self._field(line, dropped)
            elif self._has_data:
                events.append(self._dispatch())
            else:
                self._event = b""
        self._hold(rest)
        return events

    def _hold(self, part: bytes) -> None:
        """Append to the unfinished line, holding at most ``BUFFER_LIMIT`` bytes of it."""
        room = BUFFER_LIMIT - len(self._line)
        if len(part) > room:
            self._line_dropped += len(part) - room
            part = part[:room]
        self._line += part

    def _field(self, line: bytes, dropped: int) -> None:
        if line.startswith(b":"):
            return  # a comment
        name, colon, value = line.partition(b":")
        if name == b"data" and (colon or not dropped):
            if value.startswith(b" "):
                value = value[1:]
            data = self._data
            if self._has_data:
                self._data_len += 1
                if len(data) < DATA_KEEP:
                    data += b"\n"
            self._has_data = True
            self._data_len += len(value) + dropped
            room = DATA_KEEP - len(data)
            if len(value) > room or dropped:
                self._lossy = True
            data += value[: max(room, 0)]
        elif name == b"event":
            self._event = (value[1:] if value.startswith(b" ") else value)[:TYPE_MAX]

    def _dispatch(self) -> SSEEvent:
        kind: str | None = None
        if self._event:
            kind = self._event.decode("utf-8", "replace")
        else:
            kind = json_type(bytes(self._data), complete=not self._lossy)
        event = SSEEvent(kind or "message", self._data_len)
        self._event = b""
        self._data = bytearray()
        self._data_len = 0
        self._has_data = False
        self._lossy = False
        return event
