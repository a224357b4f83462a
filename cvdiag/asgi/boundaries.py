"""An exchange's state, and the boundaries it emits after ingress: first byte, events, terminal.

The base class of ``Exchange`` (``exchange.py``), where the send path and the app's exit decide
when a boundary is due; here is what each one says, and the state it is made from. A line comes
from the request's templates (cvdiag/pipeline/template.py) where they can make it, and from
``Emitter.emit`` where they cannot (a sink that needs the dict, a line over the byte cap). The
fields live on this base so that an exchange stays one object with one ``__slots__`` layout,
each field read at the cost of a slot.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final, Literal

from starlette.types import Receive, Send

from cvdiag.core.context import RequestContext, RequestState
from cvdiag.pipeline.emitter import Emitter
from cvdiag.pipeline.envelope import ms_between, ms_since
from cvdiag.pipeline.template import lines_for
from cvdiag.scopes.until_response import end_held, ended_short

if TYPE_CHECKING:
    from cvdiag.pipeline.template import RequestLines

#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round). The
#: terminal's own ``perf_counter`` stays a plain name: a test steps that clock.
_monotonic: Final = time.monotonic


class Boundaries:
    """What a request's exchange knows, and the boundaries it emits from that: the first byte,
    each stream event, and the one terminal (complete or aborted), which is emitted at most
    once however many paths reach it."""

    __slots__ = (
        "_receive",
        "_send",
        "active",
        "allow_events",
        "allow_first_byte",
        "bytes_sent",
        "ctx",
        "disconnected",
        "echo",
        "edge",
        "emitter",
        "event_count",
        "first_byte_seen",
        "request_lines",
        "send_error",
        "sent_at",
        "start",
        "started",
        "state",
        "status",
        "terminal",
    )

    def __init__(
        self,
        emitter: Emitter,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
        start: float,
        allow_first_byte: bool,
        allow_events: bool,
    ) -> None:
        self.emitter = emitter
        self.ctx = ctx
        self._receive = receive
        self._send = send
        self.start = start
        #: When the app last handed the server bytes (the head, a body chunk, a message), on
        #: ``start``'s clock: an aborted terminal's ``silence_ms`` is measured from it.
        self.sent_at = start
        # Decided once per request: skip building what the tier would drop.
        self.allow_first_byte = allow_first_byte
        self.allow_events = allow_events
        #: False once cvdiag itself failed in this request: from then on it only passes through.
        self.active = True
        self.started = False  # the response (or WebSocket accept / denial) has started
        self.status = 0
        #: The edge headers the terminal carries: the request's (set with the ingress), then
        #: merged with the response's as it starts (``headers.merged_edge``); None without any.
        self.edge: dict[str, str | None] | None = None
        self.bytes_sent = 0
        self.event_count = 0
        self.first_byte_seen = False
        self.disconnected = False  # the client's disconnect was seen on receive
        self.send_error: BaseException | None = None  # what the server's send raised
        self.terminal = False  # the one terminal boundary has been emitted
        self.echo: bytes | None = None  # the header the test id goes back in (once)
        #: What the request's own code reports while it runs (streams it opened, a cut turn).
        self.state = RequestState()
        #: The request's envelopes from templates (False: not made yet; None: use ``emit``).
        self.request_lines: RequestLines | Literal[False] | None = False
        self.setup()

    def setup(self) -> None:
        """The kind of exchange's own state: HTTP and WebSocket set theirs here, so neither
        repeats the constructor."""

    # -- boundaries ------------------------------------------------------------------------

    def _emit(self, boundary: str, outcome: str, metadata: Mapping[str, Any]) -> None:
        self.emitter.emit(boundary, outcome=outcome, metadata=metadata, context=self.ctx)

    def _lines(self) -> RequestLines | None:
        lines = self.request_lines
        if lines is False:  # made at the first envelope after ingress
            lines = self.request_lines = lines_for(self.emitter, self.ctx)
        return lines

    def first_byte(self, *, keepalive: bool = False) -> None:
        """The first body chunk left; ``keepalive`` when it held only SSE comments (a ``: ping``
        sent while the app waits), which say nothing of the model's tokens: marked so."""
        self.first_byte_seen = True
        if self.allow_first_byte:
            delta = ms_since(self.start)
            if keepalive:
                meta: dict[str, object] = {"delta_ms_from_ingress": delta, "keepalive": True}
                self._emit("backend.sse.first_byte", "info", meta)
                return
            lines = self._lines()
            if lines is None or not lines.first_byte(delta):
                self._emit("backend.sse.first_byte", "info", {"delta_ms_from_ingress": delta})

    def event(self, event_type: str, size: int) -> None:
        """Emit one stream event (debug tier) and count it."""
        sequence = self.event_count
        self.event_count = sequence + 1
        lines = self._lines()
        if lines is not None and lines.event(event_type, size, sequence):
            return
        self.emitter.emit(  # over the byte cap, or no templates here
            "backend.sse.event",
            metadata={
                "event_type": event_type,
                "payload_size_bytes": size,
                "sequence_num": sequence,
            },
            context=self.ctx,
        )

    def settle(self) -> None:
        """Account for anything sent but not yet looked at, before a terminal reads the totals."""

    def edge_events(self) -> tuple[str | None, str | None]:
        """The types of the stream's first and last events, where the exchange can name them
        (an SSE body)."""
        return None, None

    def _closing(self) -> tuple[str | None, str] | None:
        """What a terminal adds to its metadata: the stream's first and last events
        (``first_event_type``, ``last_event_type``), for a reader to see whether it opened and
        ended a protocol (AG-UI ``RUN_STARTED`` … ``RUN_FINISHED``). A plain ``data:`` event
        ("message") names no protocol: then the terminal stays as it was."""
        first, last = self.edge_events()
        return None if last is None or last == "message" else (first, last)

    def settle_streams(self, *, body_end: bool) -> None:
        """Before the terminal, end the LLM streams this request opened and dropped unclosed.

        Any other stream goes on: whatever task or thread reads it next (a graph run that
        outlives its client) ends its call, at its end, its close or shutdown. At the app's
        exit the request lets go of them."""
        state = self.state
        streams = state.streams
        if streams:
            kept = [s for s in streams if not s.request_ending()]
            state.streams = kept if body_end else None

    def responding_ends(self, *, completed: bool) -> None:
        """The terminal is next: end the agent turns held for the response first (``ok`` when
        the response completed, else ``cancelled``: it stopped without an exception)."""
        state = self.state
        state.responded = True
        state.ended_at = _monotonic()  # a call that ends later says by how much it outlived it
        if state.held:
            end_held(state, None if completed else ended_short())

    def complete(self, status: int | None = None) -> None:
        if self.terminal:
            return
        self.terminal = True
        self.responding_ends(completed=True)
        self.settle()
        total = ms_since(self.start)
        status = self.status if status is None else status
        named = self._closing()
        lines = self._lines()
        if lines is not None and lines.complete(
            status, self.bytes_sent, total, self.event_count, self.edge, named
        ):
            return
        self.emitter.emit(
            "backend.response.complete",
            outcome="ok" if 100 <= status < 400 else "err",
            metadata={
                "http_status": status,
                "content_length": self.bytes_sent,
                "total_duration_ms": total,
                "sse_event_count": self.event_count,
                **_names(named),
            },
            duration_ms=total,
            context=self.ctx,
            edge_headers=self.edge,
        )

    def abort(self, termination_kind: str, cause: str) -> None:
        """``termination_kind`` is CVDIAG v1's (rst, timeout, chunk_error, fin_premature);
        ``termination_cause`` (additive) says which of cvdiag's finer causes it was."""
        if self.terminal:
            return
        self.terminal = True
        self.responding_ends(completed=False)
        self.settle()
        if self.emitter.otel is not None:
            self.emitter.otel.record_abort(termination_kind)
        # One clock read for both figures: read apart, a pause between them (GC, a starved
        # machine) made the silence longer than the whole stream.
        now = perf_counter()
        duration = ms_between(self.start, now)
        silence = ms_between(self.sent_at, now)
        lines = self._lines()
        edge = self.edge  # the request's, and the response's if it had started
        named = self._closing()
        if lines is not None and lines.aborted(
            termination_kind, self.bytes_sent, cause, duration, silence, edge, named
        ):
            return
        self.emitter.emit(
            "backend.sse.aborted",
            outcome="err",
            metadata={
                "termination_kind": termination_kind,
                "bytes_before_abort": self.bytes_sent,
                "termination_cause": cause,
                "silence_ms": silence,
                **_names(named),
            },
            duration_ms=duration,
            context=self.ctx,
            edge_headers=edge,
        )


def _names(named: tuple[str | None, str] | None) -> dict[str, str | None]:
    return {} if named is None else {"first_event_type": named[0], "last_event_type": named[1]}
