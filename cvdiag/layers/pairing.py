"""The probe's lines as requests, and each paired with the backend's request it became.

A probe writes a request's lines under its ``message_index``; a line without one (a v1-only
writer, a browser's view of a page's own fetch) is given to the request seen last before it,
or is a request of its own when it names another path. Each request the client sent is then
paired with the backend's request of the same method and path, in order, and each pair bounds
the clock offset (``offset.bound``): the send before the ingress from above, the head after the
ingress and the first event after the first byte from below.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from cvdiag.layers.client import CLIENT_TIMEOUT, COMPLETE, ENDS, NETWORK_ERROR, Request
from cvdiag.layers.split import path_of
from cvdiag.logs.reading import key_millis

#: Requests kept per test id and writer: a test sends a handful.
MAX_REQUESTS: Final = 64
#: A line of the probe's with no index: (when, boundary, metadata, outcome).
Loose = tuple[float, str, dict[str, Any], str]


def as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_str(value: Any, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


Key = tuple[str, int]


@dataclasses.dataclass(slots=True)
class Backend:
    """One backend request: when it started, its first byte, its second event, its end. Kept
    as the records' merge keys (a backend's are its own ``ts``), read as milliseconds only
    when a probe's lines ask (``_requests``): most logs have none, and the classifier reads
    every envelope of a large log (``ls``)."""

    start: Key
    method: str | None = None
    path: str | None = None
    span: str | None = None
    first_byte: Key | None = None
    events: int = 0
    second_event: Key | None = None
    end: Key | None = None
    #: Inferred from a terminal's ``duration_ms`` (no ingress in the log): ms before ``start``.
    lead_ms: float = 0.0
    start_ms: float = 0.0
    first_byte_ms: float | None = None
    second_event_ms: float | None = None
    end_ms: float | None = None

    def timed(self) -> Backend:
        """The keys read as milliseconds since the epoch."""
        self.start_ms = key_millis(self.start[0]) - self.lead_ms
        self.first_byte_ms = _ms(self.first_byte)
        self.second_event_ms = _ms(self.second_event)
        self.end_ms = _ms(self.end)
        return self


def _ms(key: Key | None) -> float | None:
    return None if key is None else key_millis(key[0])


def request_line(
    requests: dict[int, Request], index: int, at: float, boundary: str, meta: dict[str, Any]
) -> None:
    request = requests.get(index)
    if request is None:
        if len(requests) >= MAX_REQUESTS:
            return
        request = requests[index] = Request(index)
    if boundary == "probe.message.send":
        request.sent_ms = at
        request.method = as_str(meta.get("method"), 16)
        request.url = as_str(meta.get("url"))
        request.timeout_ms = as_num(meta.get("timeout_ms")) or request.timeout_ms
    elif boundary == "probe.network.response":
        request.head_ms = at if request.head_ms is None else min(request.head_ms, at)
        request.status = as_num(meta.get("status"))
    elif boundary == "probe.sse.event":
        request.events += 1
        if request.first_event_ms is None or at < request.first_event_ms:
            request.first_event_ms = at
    else:  # probe.sse.aborted, probe.network.error: the client's side ended it
        if request.end is None or request.end_ms is None or at < request.end_ms:
            request.end, request.end_ms = _end(boundary, meta), at
        request.timeout_ms = as_num(meta.get("timeout_ms")) or request.timeout_ms
        request.error_class = as_str(meta.get("error_class"), 80) or request.error_class


def _end(boundary: str, meta: dict[str, Any]) -> str:
    cause = meta.get("cause")
    if cause in ENDS and cause != COMPLETE:
        return str(cause)
    if boundary == "probe.sse.aborted":
        return CLIENT_TIMEOUT if meta.get("termination_kind") == "timeout" else NETWORK_ERROR
    error = meta.get("error_class")
    return (
        CLIENT_TIMEOUT if isinstance(error, str) and "timeout" in error.lower() else NETWORK_ERROR
    )


def resolved(indexed: dict[int, Request], loose: list[Loose], *, exited: bool) -> list[Request]:
    """The writer's requests in order, and each with an end: its own, else ``complete`` when
    its head came and the probe exited (nothing cut it). A line without an index (a page's own
    fetch, as a browser's probe sees it) belongs to the request seen last before it, unless it
    names another path: then it is a request of its own (seen from its head, not its send)."""
    requests = [dataclasses.replace(r) for _, r in sorted(indexed.items())]
    next_index = max((r.index for r in requests), default=-1) + 1
    for at, boundary, meta, _ in sorted(loose, key=lambda item: item[0]):
        path = path_of(meta.get("url"))
        seen = [(t, r.index, r) for r in requests if (t := _seen_at(r)) is not None and t <= at]
        target = max(seen, key=lambda item: item[:2])[2] if seen else None
        if boundary == "probe.message.send" or (
            path is not None and (target is None or path_of(target.url) not in (None, path))
        ):
            if len(requests) >= MAX_REQUESTS:
                continue
            target = Request(next_index, url=as_str(meta.get("url")))
            next_index += 1
            requests.append(target)
        elif target is None:
            if not requests:
                requests.append(Request(next_index))
                next_index += 1
            target = requests[0]
        request_line({target.index: target}, target.index, at, boundary, meta)
    for request in requests:
        if request.end is None and request.head_ms is not None and exited:
            request.end = COMPLETE
    return requests


def _seen_at(request: Request) -> float | None:
    return request.sent_ms if request.sent_ms is not None else request.head_ms


def pairs(requests: list[Request], backend: list[Backend]) -> tuple[list[float], list[float]]:
    """Each sent request paired with the backend's request of the same method and path, in
    order (any, when either side does not name them); the bounds each pair gives."""
    uppers: list[float] = []
    lowers: list[float] = []
    free = list(backend)
    for request in requests:
        if request.sent_ms is None and request.head_ms is None:
            continue
        match = next((b for b in free if _same(request, b)), None)
        if match is None:
            continue
        free.remove(match)
        request.ingress_ms = match.start_ms
        request.backend_first_byte_ms = match.first_byte_ms
        request.backend_second_event_ms = match.second_event_ms
        request.backend_end_ms = match.end_ms
        request.backend_events = match.events
        if request.sent_ms is not None:
            uppers.append(match.start_ms - request.sent_ms)
        if request.head_ms is not None:
            lowers.append(match.start_ms - request.head_ms)
        if request.first_event_ms is not None and match.first_byte_ms is not None:
            lowers.append(match.first_byte_ms - request.first_event_ms)
        elif request.first_event_ms is not None:
            lowers.append(match.start_ms - request.first_event_ms)
    return uppers, lowers


def _same(request: Request, backend: Backend) -> bool:
    if request.method and backend.method and request.method.upper() != backend.method.upper():
        return False
    path = path_of(request.url)
    return not (path and backend.path and path != backend.path)
