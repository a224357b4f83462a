"""``llm_call``: one outstanding LLM call, its heartbeats, and its one response.

``backend.llm.call.start`` carries the call's span and hangs under the enclosing scope;
``backend.llm.call.heartbeat`` and ``backend.llm.call.response`` hang under the start, so a
replay nests a call's whole life under one node. A call still outstanding at shutdown ends with
``error_class`` ``Shutdown``. What a call records meanwhile (times, token count, facts for the
span) is its base, ``CallRecord`` (cvdiag/scopes/call_record.py).
"""

from __future__ import annotations

import threading
import time
import weakref
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

from cvdiag.core.context import _CURRENT, _STATE, RequestContext
from cvdiag.core.errors import error_class_of, is_timeout
from cvdiag.pipeline.emitter import Emitter, get_emitter
from cvdiag.schema.ids import new_span_id
from cvdiag.scopes.call_record import CallRecord
from cvdiag.scopes.heartbeat import scheduler
from cvdiag.scopes.run_config import context_and_run, run_metadata
from cvdiag.scopes.scope import Scope, Tokens, client_left, elapsed_ms
from cvdiag.sinks.exit_flush import before_exit

if TYPE_CHECKING:
    from cvdiag.providers import RequestFacts

#: Calls started and not yet ended, so that shutdown can end each with one response.
_LIVE_CALLS: weakref.WeakSet[LLMCall] = weakref.WeakSet()
#: ``error_class`` of a call still outstanding when the process shuts down.
SHUTDOWN_ERROR: Final = "Shutdown"


def end_outstanding_calls(error_class: str = SHUTDOWN_ERROR) -> int:
    """End every call still outstanding (shutdown): one response each, ``error_class`` set."""
    ended = 0
    for call in list(_LIVE_CALLS):
        if not call.ended:
            call.finish(error_class=error_class)
            ended += 1
    return ended


before_exit(end_outstanding_calls)


#: The innermost live ``llm_call``: lets an instrumented httpx client inside a hand-written call
#: fill that call in instead of opening a second one for the same request.
ACTIVE_CALL: ContextVar[LLMCall | None] = ContextVar("cvdiag_llm_call", default=None)


class LLMCall(Scope, CallRecord):
    """One outstanding LLM call, and the handle to tell cvdiag how it went.

    Emits ``backend.llm.call.start``, a ``backend.llm.call.heartbeat`` every
    ``heartbeat_interval`` seconds while outstanding (from the process's one heartbeat thread,
    so sync code, async code and threads are alike and no task or thread is added per call) and
    ``backend.llm.call.response`` exactly once at the end. The response's ``outcome`` is ``ok``,
    ``timeout`` for a timeout, else ``err``; ``error_class`` names the exception, so a call ended
    by cancellation says ``CancelledError`` (outcome ``err``: no answer came) and is never
    mistaken for an answered one. The caller's exception, cancellation included, propagates.
    """

    _ctx: RequestContext | None = None
    _emitter: Emitter | None = None
    _lock: threading.Lock | None = None
    _scheduled: bool = False

    def __init__(
        self,
        provider: str,
        model: str,
        *,
        prompt_token_count_estimate: int = 0,
        heartbeat_interval: float | None = None,
    ) -> None:
        if heartbeat_interval is not None and not heartbeat_interval > 0:
            raise ValueError("heartbeat_interval must be positive")
        self.provider = provider
        self.model = model
        self.prompt_token_count_estimate = prompt_token_count_estimate
        self.heartbeat_interval = heartbeat_interval

    def __repr__(self) -> str:
        return f"llm_call({self.provider!r}, {self.model!r})"

    # -- lifecycle ---------------------------------------------------------------------------

    def _copy(self) -> LLMCall:
        return LLMCall(
            self.provider,
            self.model,
            prompt_token_count_estimate=self.prompt_token_count_estimate,
            heartbeat_interval=self.heartbeat_interval,
        )

    def _install(self) -> Tokens:
        return _CURRENT.set(self._inner), ACTIVE_CALL.set(self), self._attach_span()

    def _begin(self) -> bool:
        emitter = get_emitter()
        if not emitter.allows("backend.llm.call.start") and emitter.otel is None:
            return False  # neither an envelope nor a span wants this call
        if self.started_at is not None:
            if not self.ended:  # live elsewhere (the transport drives it): leave it alone
                return False
            # A handle used again for a new call: forget the previous one.
            self.response_token_count = self.first_chunk_at = self.response_facts = None
            self.chunk_wait_since = self.after_request_end_ms = None
            self.ended = self.orphaned = self._scheduled = False
        ctx, link = context_and_run(emitter)
        span = new_span_id()
        self._emitter, self._ctx, self.span_id = emitter, ctx, span
        self._inner = ctx.child(span)
        # Outside its request (an adopted id), the request that sent the id, if it ran here.
        self.request_state = _STATE.get() or (link.origin if link is not None else None)
        self._lock = threading.Lock()
        self.started_at = time.monotonic()
        self._live = True
        _LIVE_CALLS.add(self)
        if emitter.otel is not None:
            self._otel_span = emitter.otel.start_llm_span(
                self.provider, self.model, self.request_facts
            )
        self._emit_in_span(
            emitter,
            "backend.llm.call.start",
            metadata={
                "provider": self.provider,
                "model": self.model,
                "prompt_token_count_estimate": self.prompt_token_count_estimate,
                **run_metadata(link),
                **_fingerprint(self.request_facts),
            },
            context=ctx,
            span_id=span,
            parent_span_id=ctx.span_id,
        )
        if emitter.allows("backend.llm.call.heartbeat"):
            interval = self.heartbeat_interval or emitter.settings.heartbeat_interval
            scheduler().schedule(self, interval)
            self._scheduled = True
        return True

    def _end(self, exc: BaseException | None) -> None:
        self.finish(exc)

    def finish(self, exc: BaseException | None = None, *, error_class: str | None = None) -> None:
        """End the call (idempotent): emit its response envelope, stop its heartbeats.

        ``with`` / ``async with`` / the decorators call this; the httpx transports call it when
        a response stream is exhausted, closed or abandoned. ``error_class`` without ``exc``
        marks a failure that raised nothing (an HTTP error status, a stream closed early).
        """
        lock = self._lock
        if lock is None:  # never started: nothing was recorded, nothing to end
            return
        with lock:
            # Under the lock the heartbeat thread also checks ``ended`` before emitting, so
            # once this returns no heartbeat can follow the response.
            if self.ended:
                return
            self.ended = True
        self._live = False
        _LIVE_CALLS.discard(self)
        if self._scheduled:
            scheduler().ended()
        emitter, ctx, started = self._emitter, self._ctx, self.started_at
        if emitter is None or ctx is None or started is None:
            return
        if exc is not None:
            error_class = error_class_of(exc)  # trio's Cancelled too is CancelledError
            outcome = "timeout" if is_timeout(exc) else "err"
            client_left(exc)
        else:
            outcome = "ok" if error_class is None else "err"
        latency = elapsed_ms(started)
        metadata: dict[str, Any] = {
            "provider": self.provider,
            "model": self.model,
            "response_token_count": self.response_token_count,
            "latency_ms": latency,
            "error_class": error_class,
        }
        first = self.time_to_first_chunk_ms
        if first is not None:
            metadata["first_token_delta_ms"] = first
        read = self.response_facts
        if read is not None and read.finish_reasons:  # why the model stopped: a length cut...
            metadata["finish_reasons"] = list(read.finish_reasons)
        if read is not None and read.error_code is not None:  # a mock's ``no_fixture_match``...
            metadata["provider_error_code"] = read.error_code
            if read.error_message is not None:
                metadata["provider_error_message"] = read.error_message
        request = self.request_state
        if request is not None and request.ended_at is not None:
            # The request's terminal is out and this call went on (a graph run reading after
            # its client left): the model kept generating, and billing, for this long.
            late = max(0, round((time.monotonic() - request.ended_at) * 1000))
            metadata["after_request_end_ms"] = self.after_request_end_ms = late
        self._emit_in_span(
            emitter,
            "backend.llm.call.response",
            outcome=outcome,
            metadata=metadata,
            duration_ms=latency,
            context=ctx,
            parent_span_id=self.span_id,
        )
        if emitter.otel is not None:
            self._finish_otel(emitter, started, error_class)

    def _finish_otel(self, emitter: Emitter, started: float, error_class: str | None) -> None:
        """The GenAI span attributes known at the end, and the call's metrics."""
        span, self._otel_span = self._otel_span, None
        if emitter.otel is not None:
            emitter.otel.end_llm_call(self, span, time.monotonic() - started, error_class)

    # -- driven by the heartbeat thread ------------------------------------------------------

    @property
    def heartbeat_ended(self) -> bool:
        return self.ended

    def heartbeat(self) -> None:
        if self.orphaned:
            self.finish(error_class="StreamCancelledUnclosed")
            return
        lock, emitter, started = self._lock, self._emitter, self.started_at
        if lock is None or emitter is None or started is None:
            return
        with lock:
            if self.ended:
                return
            # The scheduler thread has no current span: lend it the call's, so the heartbeat
            # also becomes a span event of the call's span.
            token = self._attach_span()
            try:
                emitter.emit(
                    "backend.llm.call.heartbeat",
                    metadata=self._beat(started),
                    context=self._ctx,
                    parent_span_id=self.span_id,
                )
            finally:
                if token is not None:
                    from cvdiag.otel.bridge import detach

                    detach(token)


def llm_call(
    provider: str,
    model: str,
    *,
    prompt_token_count_estimate: int = 0,
    heartbeat_interval: float | None = None,
) -> LLMCall:
    """An outstanding LLM call: ``with``, ``async with`` (both give the handle), or a decorator.

    ``heartbeat_interval`` defaults to ``Settings.heartbeat_interval``
    (``CVDIAG_HEARTBEAT_INTERVAL``, 10 s).
    """
    return LLMCall(
        provider,
        model,
        prompt_token_count_estimate=prompt_token_count_estimate,
        heartbeat_interval=heartbeat_interval,
    )


def _fingerprint(facts: RequestFacts | None) -> dict[str, str]:
    """``request_fingerprint`` (additive), present only when the transport read the request."""
    if facts is None or facts.fingerprint is None:
        return {}
    return {"request_fingerprint": facts.fingerprint}


def current_llm_call() -> LLMCall | None:
    """The innermost recorded ``llm_call`` around this code (for decorated functions)."""
    return ACTIVE_CALL.get()
