"""The single emit path, behind the gate (``gate.py``: ``Emitter`` is a ``TierGate``).

Every producer (middleware, scopes, the httpx transports, users) ends here. This is the only
place that decides tiers, builds envelopes, applies caps and hands lines to sinks, and it never
raises: a failure is counted and reported once on stderr.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

from cvdiag.core.context import _CURRENT, RequestContext
from cvdiag.core.guard import announce_once, failures, record_failure, say
from cvdiag.core.settings import Settings
from cvdiag.pipeline import assembly
from cvdiag.pipeline import envelope as _envelope
from cvdiag.pipeline.envelope import wire_duration
from cvdiag.pipeline.gate import TierGate
from cvdiag.pipeline.metadata import closed_metadata
from cvdiag.pipeline.template import RequestLines, lines_for
from cvdiag.schema.ids import new_span_id, new_uuid7
from cvdiag.schema.vocabulary import BOUNDARY_TIER, OUTCOMES
from cvdiag.scrubbing.redact import scrub_head, use_rules
from cvdiag.sinks.base import LineSink, Sink

if TYPE_CHECKING:
    from cvdiag.pipeline.bridge import Bridge


class _Inherit:
    """Marker: take the parent span from the context."""


INHERIT: Final = _Inherit()
_NULL_EDGE: Final = _envelope.NULL_EDGE_HEADERS


class Emitter(TierGate):
    """Turns boundaries into envelopes and hands them to sinks, under one ``Settings``."""

    def __init__(self, settings: Settings | None = None, *, sinks: Sequence[Sink] | None = None):
        self.settings = settings if settings is not None else Settings.from_env()
        #: The one check a disabled emitter costs.
        self.enabled = self.settings.enabled
        self._owned: tuple[Sink, ...] = ()
        if sinks is None:
            sinks = self._owned = assembly.default_sinks(self.settings)
        #: The tracing bridge, only when asked for: off, it costs nothing at all.
        self.otel: Bridge | None
        self.otel, bridge_sinks = assembly.bridge_for(self.settings)
        self.sinks: tuple[Sink, ...] = (*sinks, *bridge_sinks)
        #: The sinks, when every one takes serialized lines alone (stdout, a file) and the
        #: bridge is off: then per-request templates may write lines without building dicts.
        self._line_sinks: tuple[LineSink, ...] | None = (
            assembly.line_sinks(self.sinks) if self.otel is None else None
        )
        assembly.adopt_queues(
            self.sinks,
            self._queue_dropped_line,
            enabled=self.enabled,
            bound=self.settings.shutdown_flush_seconds,
        )
        super().__init__(self.settings, line_limit=assembly.line_limit(self.sinks))
        # The scrubber is process-wide (ids, errors and the middleware use it before any emit):
        # the latest emitter built sets its user rules.
        use_rules(
            patterns=self.settings.scrub_patterns,
            keys=self.settings.scrub_keys,
            allow=self.settings.scrub_allow,
        )
        self.emitted = 0
        self.truncated = 0
        self.metadata_dropped = 0
        if self.enabled and self.settings.scrub_rejected:
            say(
                "CVDIAG_SCRUB_PATTERNS: ignored what is not a valid regular expression:"
                f" {', '.join(repr(scrub_head(p, 64)) for p in self.settings.scrub_rejected)}"
            )
        if self.enabled and self.settings.debug_refused:
            self._say_debug_refused()
        if self.enabled and settings is None:
            # Span events are named only when an SDK would export them: the API alone drops them.
            exporting = self.otel is None or self.otel.exporting_at_start()
            announce_once(self.tier.label, self.sinks if exporting else sinks)

    def new_trace_id(self) -> str:
        """A new request's trace id: the current OpenTelemetry trace's (32 hex) when the bridge
        is on and a span context exists, so stdout and traces join; else a UUIDv7."""
        if self.otel is not None:
            trace_id = self.otel.current_trace_id()
            if trace_id is not None:
                return trace_id
        return new_uuid7()

    def lines_for(self, context: RequestContext) -> RequestLines | None:
        """The request's own envelopes from templates, where they can serve (every sink takes
        lines alone, the bridge is off: see cvdiag/pipeline/template.py); None: use ``emit``."""
        return lines_for(self, context)

    def emit(
        self,
        boundary: str,
        *,
        outcome: str = "info",
        metadata: Mapping[str, Any] | None = None,
        duration_ms: float | int | None = None,
        context: RequestContext | None = None,
        span_id: str | None = None,
        parent_span_id: str | _Inherit | None = INHERIT,
        edge_headers: Mapping[str, str | None] | None = None,
    ) -> None:
        """Emit one boundary. ``context`` defaults to the current request's.

        This is the hot path of every tier (the debug tier runs it once per SSE event), so it is
        written flat: one function from the gate to the sinks, no helper for the common case.
        """
        if not self.enabled:
            return
        try:
            tier = BOUNDARY_TIER.get(boundary)
            if tier is None:
                record_failure("emit", f"unknown boundary {scrub_head(boundary, 64)!r} ignored")
                return
            if not self.admits(tier):
                return
            ctx = context if context is not None else _CURRENT.get()
            if ctx is None:
                ctx = RequestContext(test_id=new_uuid7(), trace_id=self.new_trace_id())
            if outcome not in OUTCOMES:
                record_failure(
                    "emit", f"unknown outcome {scrub_head(str(outcome), 32)!r} recorded as info"
                )
                outcome = "info"
            meta, dropped = closed_metadata(boundary, metadata, self.byte_cap)
            env = _envelope.build(
                boundary,
                outcome=outcome,
                metadata=meta,
                duration_ms=None if duration_ms is None else wire_duration(duration_ms),
                context=ctx,
                span_id=span_id or new_span_id(),
                parent_span_id=(
                    ctx.span_id if isinstance(parent_span_id, _Inherit) else parent_span_id
                ),
                edge_headers=_NULL_EDGE if edge_headers is None else edge_headers,
            )
            if dropped:
                env["_metadata_dropped"] = True
                self.metadata_dropped += 1
            line, env = _envelope.serialize(env, self.byte_cap)
            if "_truncated" in env:
                self.truncated += 1
            self.emitted += 1
        except Exception as exc:
            record_failure("emit", exc)
            return
        for sink in self.sinks:
            try:
                sink.write(env, line)
            except Exception as exc:
                record_failure("sink", exc)

    def _queue_dropped_line(self, count: int, test_id: str | None = None) -> bytes | None:
        """The ``cvdiag.queue_dropped`` line a queued sink writes once its pipe drains: under a
        test id of its own, or (``test_id``) under the story that lost its terminal, counting
        that story's envelopes not written."""
        env = _envelope.build(
            "cvdiag.queue_dropped",
            outcome="err" if test_id else "info",  # err: a story lost its terminal
            metadata={"dropped_count": count},
            duration_ms=None,
            context=RequestContext(test_id=test_id or new_uuid7(), trace_id=new_uuid7()),
            span_id=new_span_id(),
            parent_span_id=None,
            edge_headers=_envelope.NULL_EDGE_HEADERS,
        )
        return _envelope.serialize(env, self.byte_cap)[0]

    def flush(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        for sink in self.sinks:
            try:
                sink.flush(max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                record_failure("sink", exc)

    def shut_down(self) -> None:
        """Shutdown (the lifespan's): everything queued written within the settings'
        ``shutdown_flush_seconds``, what is left counted as not written and said on stderr."""
        try:
            assembly.shut_down(self.sinks, self.settings.shutdown_flush_seconds)
        except Exception as exc:
            record_failure("sink", exc)

    def close(self) -> None:
        """Flush every sink; close the ones this emitter created (never the caller's)."""
        self.flush()
        for sink in self._owned:
            try:
                sink.close()
            except Exception as exc:
                record_failure("sink", exc)

    def stats(self) -> dict[str, int]:
        """Counts for dashboards and tests: emitted, truncated, dropped, failures by kind."""
        dropped = assembly.queue_dropped(self.sinks)
        return {
            "emitted": self.emitted,
            "truncated": self.truncated,
            "metadata_dropped": self.metadata_dropped,
            "queue_dropped": dropped,
            **{f"failures.{kind}": n for kind, n in failures.items()},
        }


# --- the process-wide emitter ----------------------------------------------------------------

_emitter: Emitter | None = None
_configure_lock = threading.Lock()
#: A middleware given its own ``settings`` makes its emitter the one for its requests, so
#: scopes, instrumented clients and ``emit()`` inside them use it too.
_REQUEST_EMITTER: ContextVar[Emitter | None] = ContextVar("cvdiag_emitter", default=None)


def get_emitter() -> Emitter:
    """The emitter in force here: the request's (a middleware built with its own settings), else
    the process-wide one, resolved from the environment on first use."""
    emitter = _REQUEST_EMITTER.get() or _emitter
    if emitter is None:
        with _configure_lock:
            emitter = _emitter
            if emitter is None:
                emitter = _install(Emitter())
    return emitter


def _install(emitter: Emitter) -> Emitter:
    global _emitter
    _emitter = emitter
    return emitter


def configure(settings: Settings | None = None, *, sinks: Sequence[Sink] | None = None) -> Emitter:
    """Replace the process-wide emitter (settings default to the environment's) and return it.

    The previous emitter is flushed first, so nothing it queued is lost.
    """
    new = Emitter(settings, sinks=sinks)
    with _configure_lock:
        old = _emitter
        _install(new)
    if old is not None:
        old.close()
    return new


def emit(
    boundary: str,
    *,
    outcome: str = "info",
    metadata: Mapping[str, Any] | None = None,
    duration_ms: float | int | None = None,
) -> None:
    """Emit ``boundary`` in the current request's context through the emitter in force."""
    emitter = _REQUEST_EMITTER.get() or _emitter or get_emitter()
    if emitter.enabled:
        emitter.emit(boundary, outcome=outcome, metadata=metadata, duration_ms=duration_ms)


def flush(timeout: float = 5.0) -> None:
    """Write out everything queued, waiting at most ``timeout`` seconds."""
    emitter = _emitter
    if emitter is not None:
        emitter.flush(timeout)
