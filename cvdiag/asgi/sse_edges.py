"""An SSE body's first and last events, named once as it ends (``first_event_type``,
``last_event_type`` on the terminal), from the bytes kept of its start and end.

They are named as ``SSEParser`` names them (the ``event:`` field, else the data's JSON ``type``,
else ``message``). The common edge is one ``data:`` line closed by a blank line, with LF or
CRLF endings (sse-starlette writes CRLF): that one is read where it lies, without normalizing
or splitting the window; any other shape takes the general path, the same answer either way
(tests/asgi/test_sse_edges.py holds them equal).
"""

from __future__ import annotations

from typing import Final

from cvdiag.asgi.sse import CR, DATA_KEEP, LF, TYPE_MAX, json_type

#: Bytes of an SSE body's end (start) its last (first) event is looked for in first: an AG-UI
#: or Responses event is rarely longer, and normalizing and splitting 4 KiB at each end was a
#: fifth of what the default tier costs a 24-event AG-UI stream.
_EDGE_FIRST: Final = 512
#: A blank line as LF and as CRLF endings write it: what closes an event.
_TERMINATORS: Final = (b"\n\n", b"\r\n\r\n")


def edge_event_type(data: bytes, *, last: bool) -> str | None:
    """The type of the first (or ``last``) whole event at the start (end) of an SSE body, named
    as ``SSEParser`` names it, or None. Once per stream, at its end: the edge block of the
    body's first (last) ``_EDGE_FIRST`` bytes, where it is whole there; else ``edge_scan``."""
    window = data[-_EDGE_FIRST:] if last else data[:_EDGE_FIRST]
    line = edge_line(window, last=last)
    if line is not None and line.startswith(b"data:"):
        # One data line and nothing else: its value is the event's whole data.
        return _data_type(line[6:] if line.startswith(b"data: ") else line[5:])
    window = _lf(window)
    # A part of the body normalized is that part of the normalized body (a CRLF cut in two
    # becomes one LF either way), so a block that a terminator closes and one opens (or the
    # body's start) within it is the block ``edge_scan`` finds in its larger window.
    pieces = window.rsplit(b"\n\n", 2) if last else window.split(b"\n\n", 1)
    if len(pieces) == (3 if last else 2):
        found = _event_type(pieces[1] if last else pieces[0])
        if found is not None:
            return found
    return edge_scan(data, last=last)


def edge_line(window: bytes, *, last: bool) -> bytes | None:
    """The window's first (``last``: last) whole block when it is a single line, closed by a
    blank line and (``last``) opened by one, all in LF or all in CRLF; else None.

    Such a line is the block the normalized window's split finds: it holds no CR or LF, so no
    ending around it can be read another way (a lone CR before a CRLF blank line is one more
    line break, which only ends the block before it)."""
    if last:
        for end in _TERMINATORS:
            if window.endswith(end):
                stop = len(window) - len(end)
                start = window.rfind(end, 0, stop)
                if start < 0:
                    return None
                line = window[start + len(end) : stop]
                break
        else:
            return None
    else:
        cut = window.find(b"\n")
        if cut < 0:
            return None
        # Sliced and compared, not ``startswith`` from an offset: compiled, that is a method
        # call, several times the cost.
        if window[cut + 1 : cut + 2] == b"\n":
            line = window[:cut]
        elif cut > 0 and window[cut - 1 : cut + 3] == b"\r\n\r\n":
            line = window[: cut - 1]
        else:
            return None
    return line if CR not in line and LF not in line else None


def edge_scan(data: bytes, *, last: bool) -> str | None:
    """``edge_event_type`` over the whole window: the edge block first, else every block of
    4 KiB, then (a long event) of ``DATA_KEEP`` bytes."""
    for size in (4096, DATA_KEEP):
        window = data[-size:] if last else data[:size]
        window = _lf(window)
        edge = window.rsplit(b"\n\n", 2)[-2:-1] if last else window.split(b"\n\n", 1)[:-1]
        found = _event_type(edge[0]) if edge else None
        if found is not None:
            return found
        blocks = window.split(b"\n\n")[:-1]  # the last piece is unfinished
        for block in reversed(blocks) if last else blocks:
            found = _event_type(block)
            if found is not None:
                return found
        if len(data) <= size:
            return None
    return None


def _event_type(block: bytes) -> str | None:
    fields = [line.partition(b":") for line in block.strip(b"\n").split(b"\n")]
    values = [v[1:] if v[:1] == b" " else v for n, _, v in fields if n == b"data"]
    if not values:
        return None
    kind = next((v.strip()[:TYPE_MAX] for n, _, v in fields if n == b"event"), b"")
    if kind:
        return kind.decode("utf-8", "replace")
    return _data_type(b"\n".join(values))


def _data_type(data: bytes) -> str:
    # Parsed whole, as the parser parses a whole event's data: a leading ``{"type": "X"`` read
    # without a parse would name data that is not JSON (a second data line after the object).
    return json_type(data) or "message"


def _lf(window: bytes) -> bytes:
    """The window with CRLF and CR line endings as LF (as ``SSEParser`` reads them)."""
    if CR in window:
        return window.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return window
