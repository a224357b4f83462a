"""One test id's layers joined: the probe's records and the backend's anchors, gathered one
envelope at a time in any order, then read as the client's view on the backend's clock.

``Join.add`` keeps little: per probe writer (a probe file, or a writer in the backend's own log)
its requests' sends, heads, first events and ends, its start and exit; of the backend, each
request's start (ingress, or at the default tier a terminal less its ``duration_ms``), first
byte, second event and end. Times are read from each envelope's own ``ts`` (never the record's
merge key, which ``align`` may have shifted already), so a log read twice, or read aligned and
not, joins the same.

Requests are paired in order: a probe's sends with the backend's ingresses of the same method
and path, in the order of each (the browser's own requests, an icon, left out). The pairs
bound the clock offset (``offset.bound``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from cvdiag.layers.client import (
    CLIENT_TIMEOUT,
    COMPLETE,
    ENDS,
    LEFT_EARLY,
    NETWORK_ERROR,
    ClientView,
    ConsoleError,
    Request,
)
from cvdiag.layers.mock import MockJoin
from cvdiag.layers.offset import Offset, bound
from cvdiag.layers.split import browser_own, layer_of, path_of
from cvdiag.logs.reading import Record, key_millis, ts_key

#: Requests kept per test id and writer: a test sends a handful.
MAX_REQUESTS: Final = 64
#: Console errors kept per writer (all are counted).
MAX_CONSOLE: Final = 4
JUNIT: Final = "junit"


def wall_ms(record: Record) -> float:
    """The envelope's own ``ts`` in ms since the epoch, on its writer's clock."""
    key = ts_key(record.envelope["ts"]) if isinstance(record.envelope.get("ts"), str) else None
    return key_millis(key if key is not None else record.key[0])


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: Any, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


@dataclasses.dataclass(slots=True)
class _Backend:
    """One backend request: when it started, its first byte, its second event, its end."""

    start_ms: float
    method: str | None = None
    path: str | None = None
    span: str | None = None
    first_byte_ms: float | None = None
    events: int = 0
    second_event_ms: float | None = None
    end_ms: float | None = None
    #: Inferred from a terminal's ``duration_ms`` (no ingress in the log).
    inferred: bool = False


@dataclasses.dataclass(slots=True)
class _Writer:
    """One writer's probe lines: the raw pieces, read on its own clock."""

    requests: dict[int, Request] = dataclasses.field(default_factory=dict)
    #: Lines that name no request (a v1-only writer): resolved by time at the end.
    loose: list[tuple[float, str, dict[str, Any], str]] = dataclasses.field(default_factory=list)
    count: int = 0
    view: ClientView = dataclasses.field(default_factory=lambda: ClientView("probe", Offset()))


class Join:
    """One test id's layers, gathered one envelope at a time, in any order."""

    __slots__ = ("_backend", "_by_span", "_ends", "_writers", "browser_own_requests", "mock")

    def __init__(self) -> None:
        self._backend: list[_Backend] = []
        self._by_span: dict[str, _Backend] = {}
        #: Terminals with a duration, for requests whose ingress the tier does not write.
        self._ends: list[tuple[float, float, str | None]] = []
        self._writers: dict[str, _Writer] = {}
        #: Ingress spans of the browser's own requests (an icon, robots.txt).
        self.browser_own_requests: set[str] = set()
        #: The mock provider's layer (``aimock.*``) and the backend's LLM calls it pairs with.
        self.mock = MockJoin()

    @property
    def has_probe(self) -> bool:
        return bool(self._writers)

    def add(self, record: Record) -> None:
        env = record.envelope
        boundary = env["boundary"]
        layer = layer_of(env)
        if layer == "probe":
            self._add_probe(record, boundary, env["metadata"])
        elif layer == "aimock" or boundary.startswith("backend.llm.call."):
            self.mock.add(record)
        elif boundary.startswith("backend."):
            self._add_backend(record, boundary, env)

    # -- the backend's anchors -------------------------------------------------------------

    def _add_backend(self, record: Record, boundary: str, env: dict[str, Any]) -> None:
        meta = env["metadata"]
        if boundary == "backend.request.ingress":
            if browser_own(meta.get("path")):
                if len(self.browser_own_requests) < MAX_REQUESTS:
                    self.browser_own_requests.add(env["span_id"])
                return
            if len(self._backend) < MAX_REQUESTS:
                request = _Backend(
                    wall_ms(record), _str(meta.get("method"), 16), path_of(meta.get("path"))
                )
                request.span = env["span_id"]
                self._backend.append(request)
                self._by_span[env["span_id"]] = request
            return
        parent = env.get("parent_span_id")
        owner = self._by_span.get(parent) if isinstance(parent, str) else None
        if boundary == "backend.sse.first_byte" and owner is not None:
            at = wall_ms(record)
            if owner.first_byte_ms is None or at < owner.first_byte_ms:
                owner.first_byte_ms = at
        elif boundary == "backend.sse.event" and owner is not None:
            owner.events += 1
            if owner.events == 2:
                owner.second_event_ms = wall_ms(record)
        elif boundary in ("backend.response.complete", "backend.sse.aborted"):
            if isinstance(parent, str) and parent in self.browser_own_requests:
                return
            at = wall_ms(record)
            if owner is not None:
                owner.end_ms = at
            duration = _num(env.get("duration_ms"))
            if duration is not None and len(self._ends) < MAX_REQUESTS:
                self._ends.append((at - duration, at, parent if isinstance(parent, str) else None))

    # -- the probe's lines -------------------------------------------------------------------

    def _add_probe(self, record: Record, boundary: str, meta: dict[str, Any]) -> None:
        writer = self._writers.get(record.source)
        if writer is None:
            writer = self._writers[record.source] = _Writer()
        writer.count += 1
        at = wall_ms(record)
        view = writer.view
        if boundary == "probe.start":
            view.start_ms = at if view.start_ms is None else min(view.start_ms, at)
            view.runner = view.runner or _str(meta.get("runner"), 40)
            view.test = view.test or _str(meta.get("test"))
        elif boundary == "probe.exit":
            view.exit_ms = at
            view.exit_outcome = _str(meta.get("terminal_outcome"), 20) or "ok"
            view.test_outcome = _str(meta.get("test_outcome"), 20)
        elif boundary == "probe.dom.firsttoken":
            if view.first_token_ms is None or at < view.first_token_ms:
                view.first_token_ms = at
        elif boundary == "probe.dom.container.mount":
            view.container_mount_ms = at
        elif boundary == "probe.dom.alternate_content":
            view.alternate_content = True
        elif boundary == "probe.console.error":
            view.console_error_count += 1
            if len(view.console_errors) < MAX_CONSOLE:
                message = _str(meta.get("message_scrubbed"), 512) or ""
                view.console_errors.append(ConsoleError(at, message))
        elif boundary in _PER_REQUEST:
            if boundary != "probe.message.send" and browser_own(meta.get("url")):
                return  # the browser's own request: not the test's
            index = _int(meta.get("message_index"))
            if index is None:
                if len(writer.loose) < MAX_REQUESTS:
                    writer.loose.append((at, boundary, meta, record.envelope["outcome"]))
                return
            _request_line(writer.requests, index, at, boundary, meta)

    def runner_said(self, timeout_ms: float, words: str) -> None:
        """A runner's failure text says the client timed out after ``timeout_ms`` (no probe
        lines): its first request is taken to have been sent as it reached the backend."""
        if any(name != JUNIT for name in self._writers):
            return  # the probe's own lines say more
        writer = self._writers.setdefault(JUNIT, _Writer())
        writer.view = ClientView(JUNIT, Offset(), words=words)
        writer.requests[0] = Request(0, timeout_ms=timeout_ms, end=CLIENT_TIMEOUT)

    # -- the view ----------------------------------------------------------------------------

    def view(self) -> ClientView | None:
        """The client's view on the backend's clock, from the writer with the most lines (a
        runner's words only when no probe wrote); None when no layer but the backend's."""
        if not self._writers:
            return None
        name, writer = max(self._writers.items(), key=lambda item: item[1].count)
        backend = self._requests()
        if name == JUNIT:
            return self._from_runner(writer, backend)
        requests = _resolved(writer)
        uppers, lowers = _pairs(requests, backend)
        offset = bound(uppers, lowers)
        theta = offset.theta_ms
        shifted = dataclasses.replace(
            writer.view,
            offset=offset,
            requests=requests,
            console_errors=[dataclasses.replace(e) for e in writer.view.console_errors],
        )
        shifted.other_writers = len(self._writers) - 1
        _shift(shifted, theta)
        return shifted

    def offsets(self) -> dict[str, Offset]:
        """Each probe writer's offset to the backend's clock, by its source."""
        backend = self._requests()
        found = {}
        for name, writer in self._writers.items():
            if name != JUNIT:
                found[name] = bound(*_pairs(_resolved(writer), backend))
        return found

    def _requests(self) -> list[_Backend]:
        if self._backend:
            return sorted(self._backend, key=lambda b: b.start_ms)
        # No ingress (the default tier): each terminal less its duration is when its request
        # began, to the millisecond the duration is written in.
        return sorted(
            (
                _Backend(start, span=span, end_ms=end, inferred=True)
                for start, end, span in self._ends
            ),
            key=lambda b: b.start_ms,
        )

    def _from_runner(self, writer: _Writer, backend: list[_Backend]) -> ClientView:
        view = writer.view
        request = writer.requests[0]
        first = backend[0] if backend else None
        if first is not None and request.timeout_ms is not None:
            request.sent_ms = first.start_ms
            request.ingress_ms = first.start_ms
            request.end_ms = first.start_ms + request.timeout_ms
        view.requests = [request]
        view.exit_outcome, view.test_outcome = "err", "failed"
        return view


_PER_REQUEST: Final = frozenset(
    {
        "probe.message.send",
        "probe.network.response",
        "probe.network.error",
        "probe.sse.event",
        "probe.sse.aborted",
    }
)


def _request_line(
    requests: dict[int, Request], index: int, at: float, boundary: str, meta: dict[str, Any]
) -> None:
    request = requests.get(index)
    if request is None:
        if len(requests) >= MAX_REQUESTS:
            return
        request = requests[index] = Request(index)
    if boundary == "probe.message.send":
        request.sent_ms = at
        request.method = _str(meta.get("method"), 16)
        request.url = _str(meta.get("url"))
        request.timeout_ms = _num(meta.get("timeout_ms")) or request.timeout_ms
    elif boundary == "probe.network.response":
        request.head_ms = at if request.head_ms is None else min(request.head_ms, at)
        request.status = _num(meta.get("status"))
    elif boundary == "probe.sse.event":
        request.events += 1
        if request.first_event_ms is None or at < request.first_event_ms:
            request.first_event_ms = at
    else:  # probe.sse.aborted, probe.network.error: the client's side ended it
        if request.end is None or request.end_ms is None or at < request.end_ms:
            request.end, request.end_ms = _end(boundary, meta), at
        request.timeout_ms = _num(meta.get("timeout_ms")) or request.timeout_ms
        request.error_class = _str(meta.get("error_class"), 80) or request.error_class


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


def _resolved(writer: _Writer) -> list[Request]:
    """The writer's requests in order, each line without an index given to the request sent
    last before it, and each with an end: its own, else ``complete`` when its head came and the
    probe exited (nothing cut it)."""
    requests = [dataclasses.replace(r) for _, r in sorted(writer.requests.items())]
    for at, boundary, meta, _ in sorted(writer.loose, key=lambda item: item[0]):
        if boundary == "probe.message.send":
            index = len(requests)
            if len(requests) < MAX_REQUESTS:
                requests.append(Request(index, sent_ms=at, url=_str(meta.get("url"))))
            continue
        sent = [r for r in requests if r.sent_ms is not None and r.sent_ms <= at]
        target = sent[-1] if sent else (requests[0] if requests else None)
        if target is None:
            target = Request(0)
            requests.append(target)
        _request_line({target.index: target}, target.index, at, boundary, meta)
    exited = writer.view.exit_outcome is not None
    for request in requests:
        if request.end is None and request.head_ms is not None and exited:
            request.end = COMPLETE
    return requests


def _pairs(requests: list[Request], backend: list[_Backend]) -> tuple[list[float], list[float]]:
    """Each sent request paired with the backend's request of the same method and path, in
    order (any, when either side does not name them); the bounds each pair gives."""
    uppers: list[float] = []
    lowers: list[float] = []
    free = list(backend)
    for request in requests:
        if request.sent_ms is None:
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
        uppers.append(match.start_ms - request.sent_ms)
        if request.head_ms is not None:
            lowers.append(match.start_ms - request.head_ms)
        if request.first_event_ms is not None and match.first_byte_ms is not None:
            lowers.append(match.first_byte_ms - request.first_event_ms)
        elif request.first_event_ms is not None:
            lowers.append(match.start_ms - request.first_event_ms)
    return uppers, lowers


def _same(request: Request, backend: _Backend) -> bool:
    if request.method and backend.method and request.method.upper() != backend.method.upper():
        return False
    path = path_of(request.url)
    return not (path and backend.path and path != backend.path)


def _shift(view: ClientView, theta: float) -> None:
    """Every time of ``view`` read on the backend's clock."""
    for name in ("start_ms", "exit_ms", "first_token_ms", "container_mount_ms"):
        value = getattr(view, name)
        if value is not None:
            setattr(view, name, value + theta)
    for error in view.console_errors:
        error.at_ms += theta
    for request in view.requests:
        for name in ("sent_ms", "head_ms", "first_event_ms", "end_ms"):
            value = getattr(request, name)
            if value is not None:
                setattr(request, name, value + theta)


__all__ = ["JUNIT", "LEFT_EARLY", "NETWORK_ERROR", "Join", "wall_ms"]
