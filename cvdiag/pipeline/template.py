"""The middleware's envelopes from templates: serialized once, finished with one ``bytes %``.

A request's own boundaries (``backend.sse.event`` once per event at the debug tier,
``backend.sse.first_byte``, ``backend.response.complete``, ``backend.sse.aborted``) share the
request's context and differ in a few fields. Each boundary's envelope is serialized once per
process through the one build and serialize path (``cvdiag.pipeline.envelope``), with every
field that varies left as a ``%`` slot; a request fills in its context once (``RequestLines``), and
each envelope is then a single ``bytes %`` of its span id, timestamps and metadata. The line is byte
for byte the line ``Emitter.emit`` writes (tests/pipeline/test_template.py holds them equal).

The emitter offers templates only where nothing needs the envelope as a dict: every sink takes
lines alone (stdout, a file) and the OpenTelemetry bridge is off. A line the template cannot
make within the tier's byte cap is left to ``Emitter.emit`` (``False`` from a method here),
which cuts it down the truncation ladder. The gate is the emitter's (``Emitter.admits``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Protocol

from cvdiag.core.context import RequestContext
from cvdiag.core.guard import record_failure
from cvdiag.pipeline import envelope as _envelope
from cvdiag.pipeline import metadata as _metadata
from cvdiag.pipeline.template_forms import (
    ABORTED_NAMED_ONCE,
    ABORTED_ONCE,
    COMPLETE_NAMED_ONCE,
    COMPLETE_ONCE,
    EVENT,
    FIRST_BYTE_ONCE,
    INGRESS_ONCE,
)
from cvdiag.pipeline.template_values import (
    NULL_EDGE,
    edge_json,
    event_name,
    known_json,
    text_json,
)
from cvdiag.schema.vocabulary import BOUNDARY_TIER

if TYPE_CHECKING:
    from cvdiag.pipeline.budget import DebugBudget
    from cvdiag.schema.vocabulary import Tier
    from cvdiag.sinks.base import LineSink


class Gate(Protocol):
    """What the templates ask of the emitter (``Emitter`` is one): its gate, its cap, its count."""

    emitted: int
    byte_cap: int
    _budget: DebugBudget  # the tier, cap and debug budget as a line reads them (native)

    def admits(self, tier: Tier) -> bool: ...

    def _fall_back(self, count: int, elapsed: float) -> bool: ...


class Lined(Gate, Protocol):
    """An emitter that may offer templates: its line sinks, None where they cannot serve."""

    _line_sinks: tuple[LineSink, ...] | None


#: Each boundary's tier as a number: compared with the gate's (``DebugBudget.level``) natively.
_INGRESS_TIER: Final = int(BOUNDARY_TIER["backend.request.ingress"])
_EVENT_TIER: Final = int(BOUNDARY_TIER["backend.sse.event"])
_clock_bytes: Final = _envelope.clock_bytes
_FIRST_BYTE_TIER: Final = int(BOUNDARY_TIER["backend.sse.first_byte"])
_COMPLETE_TIER: Final = int(BOUNDARY_TIER["backend.response.complete"])
_ABORTED_TIER: Final = int(BOUNDARY_TIER["backend.sse.aborted"])
_OUTCOME: Final = {True: b"ok", False: b"err"}
#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round).
_getrandbits: Final = random.getrandbits
_monotonic_ns: Final = time.monotonic_ns


def lines_for(emitter: Lined, context: RequestContext) -> RequestLines | None:
    """``Emitter.lines_for``, compiled: the request's own envelopes from templates where they
    can serve (every sink takes lines alone, the bridge is off); None: use ``emit``."""
    sinks = emitter._line_sinks
    if sinks is None:
        return None
    try:
        return RequestLines(emitter, sinks, context)
    except Exception as exc:
        record_failure("emit", exc)
        return None


class RequestLines:
    """One request's envelopes as lines. Each method returns False when ``Emitter.emit`` must
    make the envelope instead (over the byte cap); True when it is written or gated out."""

    __slots__ = ("_context", "_emitter", "_event", "_gate", "_sinks")

    def __init__(self, emitter: Gate, sinks: tuple[LineSink, ...], context: RequestContext) -> None:
        self._emitter = emitter
        #: The emitter's gate as a line reads it: native fields, kept current by the gate.
        self._gate = emitter._budget
        self._sinks = sinks
        test_id, trace_id, slug, demo, parent = context
        test_json = text_json(test_id)
        #: The context's values as JSON, in key order; span_id's slot comes after trace_id.
        self._context = (
            test_json,
            # A request no test sent has one id for both (cvdiag/asgi/middleware.py).
            test_json if trace_id is test_id else text_json(trace_id),
            b"null" if parent is None else text_json(parent),
            known_json(slug),
            known_json(demo),
        )
        #: The event format with this request's context in: a stream writes many.
        self._event: bytes | None = None

    def _admits(self, tier: int) -> bool:
        """``Emitter.admits`` (cvdiag/pipeline/gate.py), asked inline: compiled, a line's gate
        is a few native reads, and at the debug tier its budget is spent by a native call."""
        gate = self._gate
        if tier > gate.level:
            return False
        if gate.debug:
            over = gate.spend()
            if over is not None and self._emitter._fall_back(*over):
                return tier <= gate.level
        return True

    def _write(self, line: bytes) -> bool:
        if len(line) > self._gate.byte_cap:
            return False  # emit cuts it down the ladder, and counts it
        emitter = self._emitter
        emitter.emitted += 1
        for sink in self._sinks:
            try:
                sink.write_line(line)
            except Exception as exc:
                record_failure("sink", exc)
        return True

    def ingress(
        self,
        span_id: str,
        method: str,
        path: str,
        length: int | None,
        edge: Mapping[str, str | None] | None,
    ) -> bool:
        """The request's ``backend.request.ingress``: no parent span, its own span id."""
        if not self._admits(_INGRESS_TIER):
            return True
        # Scrubbed as ``emit`` closes these three values (``closed_metadata``: each string
        # within one budget, an integer or None as is), so the line is the same.
        budget = _metadata.Budget(self._gate.byte_cap * _metadata.SCAN_PER_CAP)
        method = _metadata.scrubbed(method, budget)
        path = _metadata.scrubbed(path, budget)
        edges = edge_json(edge)
        if edges is None:
            return False  # a lone surrogate: emit escapes the whole envelope
        test_id, trace_id, _, slug, demo = self._context
        return self._write(
            INGRESS_ONCE
            % (
                test_id,
                trace_id,
                text_json(span_id),
                b"null",  # the ingress hangs under no span
                slug,
                demo,
                _clock_bytes(),
                _monotonic_ns(),
                edges,
                text_json(method),
                text_json(path),
                b"null" if length is None else b"%d" % length,
            )
        )

    def event(self, event_type: str, size: int, sequence: int) -> bool:
        if not self._admits(_EVENT_TIER):
            return True
        form = self._event
        if form is None:  # the context becomes constant text: escaped for the second format
            form = self._event = EVENT % tuple(v.replace(b"%", b"%%") for v in self._context)
        return self._write(
            form
            % (
                _getrandbits(64) or 1,  # a span id as ids.new_span_id mints it, formatted here
                _clock_bytes(),
                _monotonic_ns(),
                NULL_EDGE,
                # Scrubbed like any identifier, then cut, as closed metadata is.
                event_name(event_type),
                size,
                sequence,
            )
        )

    def first_byte(self, delta_ms: int) -> bool:
        if not self._admits(_FIRST_BYTE_TIER):
            return True
        return self._under_span(FIRST_BYTE_ONCE, (NULL_EDGE, delta_ms))

    def complete(
        self,
        status: int,
        length: int,
        total_ms: int,
        events: int,
        edge: Mapping[str, str | None] | None,
        named: tuple[str | None, str] | None = None,
    ) -> bool:
        if not self._admits(_COMPLETE_TIER):
            return True
        edges = edge_json(edge)
        if edges is None:
            return False  # a lone surrogate: emit escapes the whole envelope
        values = (total_ms, _OUTCOME[100 <= status < 400], edges, status, length, total_ms, events)
        return self._terminal(COMPLETE_ONCE, COMPLETE_NAMED_ONCE, values, named)

    def aborted(
        self,
        kind: str,
        before: int,
        cause: str,
        duration_ms: int,
        silence_ms: int,
        edge: Mapping[str, str | None] | None = None,
        named: tuple[str | None, str] | None = None,
    ) -> bool:
        if not self._admits(_ABORTED_TIER):
            return True
        edges = edge_json(edge)
        if edges is None:
            return False  # a lone surrogate: emit escapes the whole envelope
        values = (
            duration_ms,
            edges,
            known_json(kind),
            before,
            known_json(cause),
            silence_ms,
        )
        return self._terminal(ABORTED_ONCE, ABORTED_NAMED_ONCE, values, named)

    def _terminal(
        self,
        form: bytes,
        named_form: bytes,
        values: tuple[object, ...],
        named: tuple[str | None, str] | None,
    ) -> bool:
        """A terminal's line: ``values``, and the stream's first and last event types where it
        named a protocol (``named_form``)."""
        if named is None:
            return self._under_span(form, values)
        names = (event_name(named[0]), event_name(named[1]))
        return self._under_span(named_form, values + names)

    def _under_span(self, form: bytes, values: tuple[object, ...]) -> bool:
        """A line under the request's span: ``form`` filled with what every such line opens
        with (the context, a fresh span id as ``ids.new_span_id`` mints it and the template
        formats it, the stamp, the clock), then ``values``."""
        test_id, trace_id, parent, slug, demo = self._context
        opening = (
            test_id,
            trace_id,
            _getrandbits(64) or 1,
            parent,
            slug,
            demo,
            _clock_bytes(),
            _monotonic_ns(),
        )
        return self._write(form % (opening + values))
