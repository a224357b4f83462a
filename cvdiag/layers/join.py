"""One test id's layers joined: the probe's records and the backend's anchors, gathered one
envelope at a time in any order, then read as the client's view on the backend's clock.

``Join.add`` keeps little: per probe writer (a probe file, or a writer in the backend's own log)
its requests' sends, heads, first events and ends, its start and exit; of the backend, each
request's start (ingress, or at the default tier a terminal less its ``duration_ms``), first
byte, second event and end. A probe's times are read from each envelope's own ``ts`` (never
its merge key, which ``align`` may have shifted already), the backend's from its merge key
(which ``align`` never moves), so a log read twice, or read aligned and not, joins the same.

Requests are paired in order: a probe's sends with the backend's ingresses of the same method
and path, in the order of each (the browser's own requests, an icon, left out). The pairs
bound the clock offset (``offset.bound``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from cvdiag.layers.client import (
    CLIENT_TIMEOUT,
    LEFT_EARLY,
    NETWORK_ERROR,
    ClientView,
    ConsoleError,
    Request,
)
from cvdiag.layers.mock import MockJoin
from cvdiag.layers.offset import Offset, bound
from cvdiag.layers.pairing import (
    MAX_REQUESTS,
    Backend,
    Key,
    Loose,
    as_int,
    as_num,
    as_str,
    pairs,
    request_line,
    resolved,
)
from cvdiag.layers.split import browser_own, layer_of, path_of
from cvdiag.logs.reading import Record, key_millis, ts_key

#: Console errors kept per writer (all are counted).
MAX_CONSOLE: Final = 4
_NONE: Final[frozenset[str]] = frozenset()
JUNIT: Final = "junit"
#: The mock layer of a test id with none (read only: ``Join.mock``).
_NO_MOCK: Final = MockJoin()


def wall_ms(record: Record) -> float:
    """The envelope's own ``ts`` in ms since the epoch, on its writer's clock."""
    key = ts_key(record.envelope["ts"]) if isinstance(record.envelope.get("ts"), str) else None
    return key_millis(key if key is not None else record.key[0])


@dataclasses.dataclass(slots=True)
class _Writer:
    """One writer's probe lines: the raw pieces, read on its own clock."""

    requests: dict[int, Request] = dataclasses.field(default_factory=dict)
    #: Lines that name no request (a v1-only writer): resolved by time at the end.
    loose: list[Loose] = dataclasses.field(default_factory=list)
    count: int = 0
    view: ClientView = dataclasses.field(default_factory=lambda: ClientView("probe", Offset()))

    def resolved(self) -> list[Request]:
        """Its requests, each line given to its request, each with an end."""
        return resolved(self.requests, self.loose, exited=self.view.exit_outcome is not None)


class Join:
    """One test id's layers, gathered one envelope at a time, in any order."""

    __slots__ = ("_by_span", "_ends", "_mock", "_writers", "browser_own_requests")

    def __init__(self) -> None:
        # Made when first needed: a ``Facts`` holds a join for every test id of a large log
        # (``ls``), and each container is one more object for the garbage collector to walk.
        #: The backend's requests by their ingress's span, in the order they came.
        self._by_span: dict[str, Backend] | None = None
        #: Terminals with a duration, for requests whose ingress the tier does not write.
        self._ends: list[tuple[Key, float, str | None]] | None = None
        self._writers: dict[str, _Writer] | None = None
        #: Ingress spans of the browser's own requests (an icon, robots.txt).
        self.browser_own_requests: set[str] | frozenset[str] = _NONE
        #: The mock provider's layer (``aimock.*``) and the backend's LLM calls it pairs with,
        #: made when first needed.
        self._mock: MockJoin | None = None

    @property
    def has_probe(self) -> bool:
        return bool(self._writers)

    @property
    def mock(self) -> MockJoin:
        """The mock provider's layer: an empty one, never added to, until a line needs it."""
        return self._mock if self._mock is not None else _NO_MOCK

    def add(self, record: Record) -> None:
        env = record.envelope
        boundary = env["boundary"]
        layer = layer_of(env)
        if layer == "probe":
            self._add_probe(record, boundary, env["metadata"])
        elif layer == "aimock" or boundary.startswith("backend.llm.call."):
            if self._mock is None:
                self._mock = MockJoin()
            self._mock.add(record)
        elif boundary.startswith("backend."):
            self._add_backend(record, boundary, env)

    # -- the backend's anchors -------------------------------------------------------------

    def _add_backend(self, record: Record, boundary: str, env: dict[str, Any]) -> None:
        meta = env["metadata"]
        if boundary == "backend.request.ingress":
            if browser_own(meta.get("path")):
                if not isinstance(self.browser_own_requests, set):
                    self.browser_own_requests = set()
                if len(self.browser_own_requests) < MAX_REQUESTS:
                    self.browser_own_requests.add(env["span_id"])
                return
            if self._by_span is None:
                self._by_span = {}
            if len(self._by_span) < MAX_REQUESTS:
                request = Backend(
                    record.key, as_str(meta.get("method"), 16), path_of(meta.get("path"))
                )
                request.span = env["span_id"]
                self._by_span.setdefault(env["span_id"], request)
            return
        parent = env.get("parent_span_id")
        spans = self._by_span
        owner = spans.get(parent) if spans is not None and isinstance(parent, str) else None
        if boundary == "backend.sse.first_byte" and owner is not None:
            if owner.first_byte is None or record.key < owner.first_byte:
                owner.first_byte = record.key
        elif boundary == "backend.sse.event" and owner is not None:
            owner.events += 1
            if owner.events == 2:
                owner.second_event = record.key
        elif boundary in ("backend.response.complete", "backend.sse.aborted"):
            if isinstance(parent, str) and parent in self.browser_own_requests:
                return
            if owner is not None:
                owner.end = record.key
            duration = as_num(env.get("duration_ms"))
            if self._ends is None:
                self._ends = []
            if duration is not None and len(self._ends) < MAX_REQUESTS:
                span = parent if isinstance(parent, str) else None
                self._ends.append((record.key, duration, span))

    # -- the probe's lines -------------------------------------------------------------------

    def _add_probe(self, record: Record, boundary: str, meta: dict[str, Any]) -> None:
        if self._writers is None:
            self._writers = {}
        writer = self._writers.get(record.source)
        if writer is None:
            writer = self._writers[record.source] = _Writer()
        writer.count += 1
        at = wall_ms(record)
        view = writer.view
        if boundary == "probe.start":
            view.start_ms = at if view.start_ms is None else min(view.start_ms, at)
            view.runner = view.runner or as_str(meta.get("runner"), 40)
            view.test = view.test or as_str(meta.get("test"))
        elif boundary == "probe.exit":
            view.exit_ms = at
            view.exit_outcome = as_str(meta.get("terminal_outcome"), 20) or "ok"
            view.test_outcome = as_str(meta.get("test_outcome"), 20)
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
                message = as_str(meta.get("message_scrubbed"), 512) or ""
                view.console_errors.append(ConsoleError(at, message))
        elif boundary in _PER_REQUEST:
            if boundary != "probe.message.send" and browser_own(meta.get("url")):
                return  # the browser's own request: not the test's
            index = as_int(meta.get("message_index"))
            if index is None:
                if len(writer.loose) < MAX_REQUESTS:
                    writer.loose.append((at, boundary, meta, record.envelope["outcome"]))
                return
            request_line(writer.requests, index, at, boundary, meta)

    def runner_said(self, timeout_ms: float | None, words: str) -> None:
        """A runner's failure text says the client timed out after ``timeout_ms`` (no probe
        lines): its first request is taken to have been sent as it reached the backend."""
        if self._writers is None:
            self._writers = {}
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
        requests = resolved(
            writer.requests, writer.loose, exited=writer.view.exit_outcome is not None
        )
        uppers, lowers = pairs(requests, backend)
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
        for name, writer in (self._writers or {}).items():
            if name != JUNIT:
                found[name] = bound(
                    *pairs(
                        resolved(
                            writer.requests,
                            writer.loose,
                            exited=writer.view.exit_outcome is not None,
                        ),
                        backend,
                    )
                )
        return found

    def _requests(self) -> list[Backend]:
        if self._by_span:
            return sorted((b.timed() for b in self._by_span.values()), key=lambda b: b.start_ms)
        # No ingress (the default tier): each terminal less its duration is when its request
        # began, to the millisecond the duration is written in.
        return sorted(
            (
                Backend(end, span=span, end=end, lead_ms=duration).timed()
                for end, duration, span in self._ends or ()
            ),
            key=lambda b: b.start_ms,
        )

    def _from_runner(self, writer: _Writer, backend: list[Backend]) -> ClientView:
        view = writer.view
        request = writer.requests[0]
        first = backend[0] if backend else None
        if first is not None:
            request.method, request.url = first.method, first.path
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
