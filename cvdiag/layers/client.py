"""The client's view of one test id, on the backend's clock: what each request it sent saw
(sent, its head, its first event, how it ended), the probe's start and exit, a page's first
token and console errors, and whether the runner lived to write its exit.

Times are milliseconds since the epoch on the *backend's* clock (the probe's own plus the
offset ``join`` bounded), so a rule compares them with the backend's envelopes directly.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from cvdiag.layers.offset import Offset

#: How a request ended on the client's side.
COMPLETE: Final = "complete"
CLIENT_TIMEOUT: Final = "client-timeout"
NETWORK_ERROR: Final = "network-error"
LEFT_EARLY: Final = "left-early"
ENDS: Final = (COMPLETE, CLIENT_TIMEOUT, NETWORK_ERROR, LEFT_EARLY)


@dataclasses.dataclass(slots=True)
class Request:
    """One request the client sent, as it saw it."""

    index: int
    method: str | None = None
    url: str | None = None
    sent_ms: float | None = None
    #: The client's own timeout for this request (ms), when it had one.
    timeout_ms: float | None = None
    head_ms: float | None = None
    status: float | None = None
    first_event_ms: float | None = None
    events: int = 0
    #: ``complete``, ``client-timeout``, ``network-error``, ``left-early``; None: no end seen.
    end: str | None = None
    end_ms: float | None = None
    error_class: str | None = None
    #: The backend's request it was matched to (backend clock): its start (ingress), first
    #: byte, second SSE event (the debug tier), end, and the events it wrote.
    ingress_ms: float | None = None
    backend_first_byte_ms: float | None = None
    backend_second_event_ms: float | None = None
    backend_end_ms: float | None = None
    backend_events: int = 0

    @property
    def waited_ms(self) -> float | None:
        """How long the client waited from sending to its end."""
        if self.end_ms is None or self.sent_ms is None:
            return None
        return self.end_ms - self.sent_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "method": self.method,
            "url": self.url,
            "sent_ms": _r(self.sent_ms),
            "timeout_ms": self.timeout_ms,
            "head_ms": _r(self.head_ms),
            "status": self.status,
            "first_event_ms": _r(self.first_event_ms),
            "events": self.events,
            "end": self.end,
            "end_ms": _r(self.end_ms),
            "error_class": self.error_class,
        }


@dataclasses.dataclass(slots=True)
class ConsoleError:
    at_ms: float
    message: str


@dataclasses.dataclass(slots=True)
class ClientView:
    """What the client saw of one test id (one writer: a probe file, or a runner's words)."""

    #: ``probe`` (a probe's lines) or ``junit`` (a runner's failure text, no probe lines).
    source: str
    offset: Offset
    requests: list[Request] = dataclasses.field(default_factory=list)
    start_ms: float | None = None
    exit_ms: float | None = None
    #: ``probe.exit``'s ``terminal_outcome`` (ok, err, timeout) and ``test_outcome``.
    exit_outcome: str | None = None
    test_outcome: str | None = None
    runner: str | None = None
    test: str | None = None
    first_token_ms: float | None = None
    container_mount_ms: float | None = None
    alternate_content: bool = False
    console_errors: list[ConsoleError] = dataclasses.field(default_factory=list)
    console_error_count: int = 0
    #: How the runner's words were read (``junit``): the text's own words and how precise.
    words: str | None = None
    #: Other writers of probe lines under the same test id, not read.
    other_writers: int = 0

    @property
    def started(self) -> bool:
        return self.start_ms is not None

    @property
    def exited(self) -> bool:
        return self.exit_ms is not None or self.exit_outcome is not None

    @property
    def passed(self) -> bool:
        """The test passed by the probe's exit (``test_outcome``, else its ``ok``)."""
        if self.test_outcome is not None:
            return self.test_outcome == "passed"
        return self.exit_outcome == "ok"

    @property
    def failed(self) -> bool:
        if self.test_outcome is not None:
            return self.test_outcome == "failed"
        return self.exit_outcome in ("err", "timeout")

    def ended(self, how: str) -> list[Request]:
        return [r for r in self.requests if r.end == how]

    @property
    def first_event_ms(self) -> float | None:
        seen = [r.first_event_ms for r in self.requests if r.first_event_ms is not None]
        return min(seen) if seen else None

    @property
    def left_ms(self) -> float | None:
        """When the client left early or gave up (its first such end)."""
        ends = [
            r.end_ms
            for r in self.requests
            if r.end in (CLIENT_TIMEOUT, LEFT_EARLY, NETWORK_ERROR) and r.end_ms is not None
        ]
        return min(ends) if ends else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "alignment": self.offset.to_json(),
            "aligned": self.offset.said(),
            "started": self.started,
            "exited": self.exited,
            "exit_outcome": self.exit_outcome,
            "test_outcome": self.test_outcome,
            "first_token_ms": _r(self.first_token_ms),
            "console_errors": self.console_error_count,
            "requests": [r.to_json() for r in self.requests],
        }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
