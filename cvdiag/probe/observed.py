"""One request as its client saw it: sent (``probe.message.send``), its head
(``probe.network.response``), its SSE events (``probe.sse.event``), and how it ended: whole
(no line: ``probe.exit`` counts it), the client's own timeout or a network error before the
head (``probe.network.error``) or after it (``probe.sse.aborted``), or the test closing the
body before its end (``probe.sse.aborted``, ``cause: left-early``).

Every method is called from a client hook and never raises: the guard counts a failure.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Final

from cvdiag.core.guard import record_failure
from cvdiag.probe.events import EventCounter

if TYPE_CHECKING:
    from cvdiag.probe.writer import ProbeWriter, TestIdState

#: v1's ``termination_kind`` for an error that cut a body, by the exception's class name (httpx
#: and httpx2 name them alike); any other error is a ``chunk_error``.
_KINDS: Final = {
    "ReadTimeout": "timeout",
    "RemoteProtocolError": "fin_premature",
    "ReadError": "rst",
}
#: The phase of ``request.extensions["timeout"]`` each timeout error ran out of.
_PHASES: Final = {
    "ConnectTimeout": "connect",
    "ReadTimeout": "read",
    "WriteTimeout": "write",
    "PoolTimeout": "pool",
}
#: The largest timeout written, in ms (a year): beyond it a timeout is as good as none.
_MAX_MS: Final = 365 * 24 * 3600 * 1000
#: Errors that mean the test itself gave up on the request (a cancelled task, Ctrl-C).
_LEFT: Final = frozenset({"CancelledError", "KeyboardInterrupt", "GeneratorExit", "Cancelled"})


class Observed:
    """One request carrying a test id, from its send to its one end."""

    __slots__ = (
        "_counter",
        "_ended",
        "_events",
        "_sent_at",
        "bytes",
        "index",
        "state",
        "timeouts",
        "url",
        "writer",
    )

    def __init__(self, writer: ProbeWriter, state: TestIdState, request: Any) -> None:
        self.writer = writer
        self.state = state
        self.index = writer.next_index(state)
        self.url = url_text(request.url)
        self.timeouts: dict[str, Any] = _timeouts(request)
        self.bytes = 0
        self._ended = False
        self._events = 0
        self._counter: EventCounter | None = None
        writer.emit(
            state,
            "probe.message.send",
            "info",
            {
                "message_index": self.index,
                "char_count": _body_size(request),
                "demo": None,
                "method": str(request.method),
                "url": self.url,
                "timeout_ms": self.timeout_ms("read"),
            },
        )
        self._sent_at = time.perf_counter()

    def timeout_ms(self, phase: str) -> int | None:
        seconds = self.timeouts.get(phase)
        if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):  # None, NaN, inf
            return None
        return max(0, min(round(seconds * 1000), _MAX_MS))

    def head(self, response: Any) -> None:
        """The response head arrived."""
        try:
            headers = response.headers
            kind = str(headers.get("content-type", "")).lower()
            if kind.startswith("text/event-stream"):
                self._counter = EventCounter(headers.get("content-encoding"))
            status = int(response.status_code)
            waited = _ms(self._sent_at)
            self.writer.emit(
                self.state,
                "probe.network.response",
                "ok" if status < 400 else "err",
                {
                    "url": self.url,
                    "status": status,
                    "content_length": _length(headers.get("content-length")),
                    "duration_ms": waited,
                    "message_index": self.index,
                },
                waited,
            )
            self.state.open[self.index] = self
        except Exception as exc:
            record_failure("probe", exc)

    def chunk(self, data: bytes) -> None:
        """A chunk of the body arrived (raw, as the network carried it)."""
        try:
            if not data:
                return
            if self.bytes == 0 and self.state.first_byte is None:
                self.state.first_byte = time.perf_counter()
            self.bytes += len(data)
            if self._counter is None:
                return
            for event_type, size in self._counter.feed(data):
                sequence = self._events
                self._events += 1
                self.state.events += 1
                if sequence > 0 and not self.writer.debug:
                    continue
                self.writer.emit(
                    self.state,
                    "probe.sse.event",
                    "info",
                    {
                        "event_type": event_type,
                        "payload_size_bytes": size,
                        "sequence_num": sequence,
                        "message_index": self.index,
                    },
                )
        except Exception as exc:
            record_failure("probe", exc)

    def complete(self) -> None:
        """The body ended whole."""
        self._end()

    def failed(self, exc: BaseException, *, head: bool) -> None:
        """An error ended the request: before its head (``head=False``) or in its body."""
        if self._ended:
            return
        self._end()
        try:
            name = type(exc).__name__
            if name in _LEFT:
                cause, outcome = "left-early", "info"
            elif name in _PHASES:
                cause, outcome = "client-timeout", "timeout"
            else:
                cause, outcome = "network-error", "err"
            timeout = self.timeout_ms(_PHASES.get(name, "read"))
            if not head:
                metadata = {
                    "url": self.url,
                    "error_class": name,
                    "response_status": None,
                    "message_index": self.index,
                    "timeout_ms": timeout,
                    "cause": cause,
                }
                self.writer.emit(self.state, "probe.network.error", outcome, metadata)
                return
            kind = "fin_premature" if cause == "left-early" else _KINDS.get(name, "chunk_error")
            if cause == "client-timeout":
                kind = "timeout"
            self._aborted(kind, cause, outcome, timeout)
        except Exception as error:
            record_failure("probe", error)

    def left_early(self) -> None:
        """The test closed the body before its end (or the test ended with it open)."""
        if self._ended:
            return
        self._end()
        try:
            self._aborted("fin_premature", "left-early", "info", self.timeout_ms("read"))
        except Exception as exc:
            record_failure("probe", exc)

    def _aborted(self, kind: str, cause: str, outcome: str, timeout: int | None) -> None:
        metadata = {
            "termination_kind": kind,
            "bytes_before_abort": self.bytes,
            "message_index": self.index,
            "timeout_ms": timeout,
            "cause": cause,
        }
        self.writer.emit(self.state, "probe.sse.aborted", outcome, metadata, _ms(self._sent_at))

    def _end(self) -> None:
        self._ended = True
        self.state.open.pop(self.index, None)


def url_text(url: Any) -> str:
    """A request's URL as probe lines carry it: its path and its query's keys, never a query
    value (a token in a query string stays out of the log; the path is scrubbed as any text)."""
    try:
        path = str(url.path)
        keys = list(dict.fromkeys(str(key) for key in url.params))
    except Exception:
        return ""
    return f"{path}?{'&'.join(keys)}" if keys else path


def _timeouts(request: Any) -> dict[str, Any]:
    found = request.extensions.get("timeout") if hasattr(request, "extensions") else None
    return dict(found) if isinstance(found, dict) else {}


def _body_size(request: Any) -> int:
    """The request body's bytes: its content when it was given whole, else its
    ``content-length``, else 0 (a streamed upload is not read by the probe)."""
    try:
        return len(request.content)
    except Exception:
        return _length(request.headers.get("content-length")) or 0


def _length(value: Any) -> int | None:
    """A ``content-length`` header's value, or None for anything but a plain decimal number."""
    text = str(value) if value is not None else ""
    return int(text) if 0 < len(text) <= 18 and text.isascii() and text.isdigit() else None


def _ms(start: float) -> int:
    return max(0, round((time.perf_counter() - start) * 1000))
