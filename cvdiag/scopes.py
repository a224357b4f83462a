"""``agent_scope`` and ``llm_call``: the agent turn and the LLM calls inside a request.

Both are context managers (``with`` and ``async with``) and decorators (sync and async functions,
sync and async generators). They share one shape: a *begin* that emits the start envelope and
mints a span, a context switch so that everything inside hangs under that span, and an *end*
that emits the exit envelope exactly once. When the emitter is off, or the tier leaves their
boundaries out, begin is one check and nothing else happens: no span, no context change, no
heartbeat registration.

Span tree (see docs/agents-and-llm-calls.md):

- ``backend.agent.enter`` carries the scope's span and hangs under the current context's span
  (the request's ingress, or the enclosing agent); ``backend.agent.exit`` is its sibling (fresh
  span, same parent) and ``backend.error.caught`` hangs under the scope;
- ``backend.llm.call.start`` carries the call's span and hangs under the enclosing scope;
  ``backend.llm.call.heartbeat`` and ``backend.llm.call.response`` hang under the start, so a
  replay nests a call's whole life under one node.

A scope entered outside any request gets a fresh context (new UUIDv7 test and trace ids) for its
duration, so its envelopes, and the test id an instrumented httpx client forwards, still join.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Generator
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast

from cvdiag import emitter as _emitters
from cvdiag.context import _CURRENT, _STATE, RequestContext
from cvdiag.emitter import Emitter, get_emitter
from cvdiag.errors import claim_report, describe_exception, is_client_gone, is_timeout
from cvdiag.guard import record_failure
from cvdiag.heartbeat import scheduler
from cvdiag.ids import new_span_id, new_uuid7
from cvdiag.sinks import before_exit

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from cvdiag.providers import RequestFacts, ResponseFacts

__all__ = ["AgentScope", "LLMCall", "agent_scope", "current_llm_call", "llm_call"]

_F = TypeVar("_F", bound=Callable[..., Any])
#: What a scope's context switch must undo: its request context, its LLM-call marker, and the
#: OpenTelemetry context that makes its span current (when the bridge is on).
_Tokens = tuple[Token[RequestContext | None], Token["LLMCall | None"] | None, object | None]
_S = TypeVar("_S", bound="_Scope")
#: When an agent turn ends: when its block (or decorated function) exits, or when the response
#: of the request it runs in ends.
Until = Literal["exit", "response"]

#: The innermost live ``llm_call``: lets an instrumented httpx client inside a hand-written call
#: fill that call in instead of opening a second one for the same request.
_ACTIVE_CALL: ContextVar[LLMCall | None] = ContextVar("cvdiag_llm_call", default=None)


#: Calls started and not yet ended, so that shutdown can end each with one response.
_LIVE_CALLS: weakref.WeakSet[LLMCall] = weakref.WeakSet()
#: ``error_class`` of a call still outstanding when the process shuts down.
SHUTDOWN_ERROR: Final = "Shutdown"


def _client_left(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the client leaving; if so, the request's turn is marked cut."""
    if exc is None or not is_client_gone(exc):
        return False
    state = _STATE.get()
    if state is not None:
        state.turn_cut = True
    return True


def end_outstanding_calls(error_class: str = SHUTDOWN_ERROR) -> int:
    """End every call still outstanding (shutdown): one response each, ``error_class`` set."""
    ended = 0
    for call in list(_LIVE_CALLS):
        if not call.ended:
            call.finish(error_class=error_class)
            ended += 1
    return ended


before_exit(end_outstanding_calls)


def _fresh_context(emitter: Emitter) -> RequestContext:
    return RequestContext(test_id=new_uuid7(), trace_id=emitter.new_trace_id())


def _elapsed_ms(since: float) -> int:
    return max(0, round((time.monotonic() - since) * 1000))


class _Scope:
    """What agent scopes and LLM calls share: with / async with / decorators, context switch.

    One object is one scope. A decorator makes a fresh copy per call, so a decorated function
    can run concurrently; entering the same object again while it is live is a no-op (counted).
    """

    # Run state lives in class-level defaults, set on the instance only once something is
    # recorded: a scope that records nothing (cvdiag off) costs its configuration alone.

    #: Recorded and not yet ended.
    _live: bool = False
    #: ``with`` nesting of this very object: only the outermost entry counts.
    _depth: int = 0
    #: The context installed inside the scope: the outer one, hanging under our span.
    _inner: RequestContext | None = None
    _tokens: _Tokens | None = None
    #: The scope's OpenTelemetry span (only with the bridge on and an SDK configured).
    _otel_span: Span | None = None

    # -- subclass hooks --------------------------------------------------------------------

    def _copy(self: _S) -> _S:
        raise NotImplementedError

    def _begin(self) -> bool:
        """Emit the start envelope and set ``_inner``; False when nothing is to be recorded."""
        raise NotImplementedError

    def _end(self, exc: BaseException | None) -> None:
        """Emit the end envelope(s), once."""
        raise NotImplementedError

    def _install(self) -> _Tokens:
        return _CURRENT.set(self._inner), None, self._attach_span()

    def _attach_span(self) -> object | None:
        span = self._otel_span
        if span is None:
            return None
        from cvdiag.otel import attach_span

        return attach_span(span)

    def _emit_in_span(self, emitter: Emitter, boundary: str, **options: Any) -> None:
        """Emit where the scope's own span is current, so its start and end envelopes become
        events of that span (they are emitted outside the scope's context switch)."""
        token = self._attach_span()
        try:
            emitter.emit(boundary, **options)
        finally:
            if token is not None:
                from cvdiag.otel import detach

                detach(token)

    def _end_span(self, exc: BaseException | None) -> None:
        span, self._otel_span = self._otel_span, None
        if span is None:
            return
        try:
            if isinstance(exc, Exception):
                from cvdiag.otel import OtelBridge

                OtelBridge.fail(span, exc)
            span.end()
        except Exception as failure:  # a failing span processor costs the span, nothing else
            record_failure("otel", failure)

    # -- guarded steps: cvdiag's own failures never reach the host ---------------------------

    def _begin_guarded(self) -> bool:
        try:
            return self._begin()
        except Exception as exc:
            record_failure("scopes", exc)
            return False

    def _end_guarded(self, exc: BaseException | None) -> None:
        try:
            self._end(exc)
        except Exception as failure:
            record_failure("scopes", failure)

    def _install_guarded(
        self,
    ) -> _Tokens | None:
        try:
            return self._install()
        except Exception as exc:
            record_failure("scopes", exc)
            return None

    @staticmethod
    def _uninstall(
        tokens: _Tokens | None,
    ) -> None:
        if tokens is None:
            return
        current, call, span = tokens
        if span is not None:
            from cvdiag.otel import detach

            try:
                detach(span)
            except Exception as exc:
                record_failure("scopes", exc)
        try:
            _CURRENT.reset(current)
        except Exception as exc:  # reset in another Context (a misused scope object)
            record_failure("scopes", exc)
        if call is not None:
            try:
                _ACTIVE_CALL.reset(call)
            except Exception as exc:
                record_failure("scopes", exc)

    # -- context manager ---------------------------------------------------------------------

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > 1:
            record_failure("scopes", f"{type(self).__name__} entered again while live; ignored")
            return
        emitter = _emitters._REQUEST_EMITTER.get() or _emitters._emitter
        if emitter is not None and not emitter.enabled:
            return  # the one check a scope costs while cvdiag is off
        if self._begin_guarded():
            self._tokens = self._install_guarded()

    def _exit(self, exc: BaseException | None) -> None:
        self._depth -= 1
        if self._depth > 0:
            return
        if self._tokens is not None:
            tokens, self._tokens = self._tokens, None
            self._uninstall(tokens)
        if self._live:
            self._end_guarded(exc)

    def __enter__(self: _S) -> _S:
        self._enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit(exc)

    async def __aenter__(self: _S) -> _S:
        self._enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit(exc)

    # -- decorator ---------------------------------------------------------------------------

    def __call__(self, fn: _F) -> _F:
        """Decorate a sync or async function, or a sync or async generator function."""
        if inspect.isasyncgenfunction(fn):
            wrapper: Callable[..., Any] = self._wrap_async_generator(fn)
        elif inspect.iscoroutinefunction(fn):
            wrapper = self._wrap_coroutine(fn)
        elif inspect.isgeneratorfunction(fn):
            wrapper = self._wrap_generator(fn)
        else:
            wrapper = self._wrap_function(fn)
        return cast(_F, functools.wraps(fn)(wrapper))

    def _wrap_function(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._copy():
                return fn(*args, **kwargs)

        return call

    def _wrap_coroutine(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            async with self._copy():
                return await fn(*args, **kwargs)

        return call

    def _wrap_generator(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The scope spans the whole iteration; its context is set only while the body runs.

        Setting a context variable inside a generator and holding it across ``yield`` would leak
        it into the consumer (and resetting it later could happen in another Context), so the
        context is installed around each step instead.
        """

        def call(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            scope = self._copy()
            inner = fn(*args, **kwargs)
            live = scope._begin_guarded()
            failure: BaseException | None = None
            try:
                sent: Any = None
                thrown: BaseException | None = None
                while True:
                    tokens = scope._install_guarded() if live else None
                    try:
                        item = inner.send(sent) if thrown is None else inner.throw(thrown)
                    except StopIteration as stop:
                        return stop.value
                    finally:
                        scope._uninstall(tokens)
                    thrown = None
                    try:
                        sent = yield item
                    except GeneratorExit:
                        tokens = scope._install_guarded() if live else None
                        try:
                            inner.close()
                        finally:
                            scope._uninstall(tokens)
                        raise
                    except BaseException as exc:
                        thrown, sent = exc, None
            except BaseException as exc:
                failure = exc
                raise
            finally:
                if live:
                    scope._end_guarded(failure)

        return call

    def _wrap_async_generator(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """As ``_wrap_generator``: an agent turn that streams its answer."""

        async def call(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
            scope = self._copy()
            inner = fn(*args, **kwargs)
            live = scope._begin_guarded()
            failure: BaseException | None = None
            try:
                sent: Any = None
                thrown: BaseException | None = None
                while True:
                    tokens = scope._install_guarded() if live else None
                    try:
                        if thrown is None:
                            item = await inner.asend(sent)
                        else:
                            item = await inner.athrow(thrown)
                    except StopAsyncIteration:
                        return
                    finally:
                        scope._uninstall(tokens)
                    thrown = None
                    try:
                        sent = yield item
                    except GeneratorExit:
                        tokens = scope._install_guarded() if live else None
                        try:
                            await inner.aclose()
                        finally:
                            scope._uninstall(tokens)
                        raise
                    except BaseException as exc:
                        thrown, sent = exc, None
            except BaseException as exc:
                failure = exc
                raise
            finally:
                if live:
                    scope._end_guarded(failure)

        return call


# --- agent_scope -------------------------------------------------------------------------------


class AgentScope(_Scope):
    """One agent turn: ``backend.agent.enter`` … ``backend.agent.exit``.

    ``terminal_outcome`` is ``ok`` (no exception), ``err`` (an exception: also one
    ``backend.error.caught``; envelope outcome ``timeout`` for timeouts, else ``err``) or
    ``cancelled`` (asyncio cancellation, ``GeneratorExit``, ``KeyboardInterrupt``: envelope
    outcome ``info`` — the turn was stopped from outside, which is not its error). The exception
    always propagates unchanged.
    """

    #: The scope's span once recorded (None when nothing is recorded).
    span_id: str | None = None
    _outer: RequestContext | None = None
    _emitter: Emitter | None = None
    _started: float = 0.0

    def __init__(
        self, agent_name: str, *, model_id: str | None = None, until: Until = "exit"
    ) -> None:
        if until not in ("exit", "response"):
            raise ValueError(f"until must be 'exit' or 'response', not {until!r}")
        self.agent_name = agent_name
        self.model_id = model_id
        self.until = until

    def __repr__(self) -> str:
        held = ", until='response'" if self.until == "response" else ""
        return f"agent_scope({self.agent_name!r}, model_id={self.model_id!r}{held})"

    def _copy(self) -> AgentScope:
        return AgentScope(self.agent_name, model_id=self.model_id, until=self.until)

    def _exit(self, exc: BaseException | None) -> None:
        # until="response": a block that ends without an exception, inside a request whose
        # terminal is still to come, hands the turn to the request (cvdiag/response_scope.py).
        if self.until == "response" and exc is None and self._depth == 1 and self._live:
            from cvdiag.response_scope import hold

            if hold(self):
                self._depth = 0
                return
        super()._exit(exc)

    def _begin(self) -> bool:
        emitter = get_emitter()
        if not emitter.allows("backend.agent.enter"):
            return False
        outer = _CURRENT.get() or _fresh_context(emitter)
        span = new_span_id()
        self._emitter, self._outer, self.span_id = emitter, outer, span
        self._inner = outer.child(span)
        self._started = time.monotonic()
        self._live = True
        if emitter.otel is not None:
            self._otel_span = emitter.otel.start_agent_span(self.agent_name, self.model_id)
        self._emit_in_span(
            emitter,
            "backend.agent.enter",
            metadata={"agent_name": self.agent_name, "model_id": self.model_id},
            context=outer,
            span_id=span,
            parent_span_id=outer.span_id,
        )
        return True

    def _end(self, exc: BaseException | None) -> None:
        self._live = False
        emitter, outer = self._emitter, self._outer
        if emitter is None or outer is None:
            return
        elapsed = _elapsed_ms(self._started)
        if exc is None:
            terminal, outcome = "ok", "ok"
        elif isinstance(exc, Exception) and not _client_left(exc):
            terminal, outcome = "err", "timeout" if is_timeout(exc) else "err"
            if claim_report(exc):
                self._emit_in_span(
                    emitter,
                    "backend.error.caught",
                    outcome="err",
                    metadata=describe_exception(exc),
                    context=self._inner,
                    parent_span_id=self.span_id,
                )
        else:  # cancelled, interrupted, or the client left: stopped from outside
            terminal, outcome = "cancelled", "info"
        self._emit_in_span(
            emitter,
            "backend.agent.exit",
            outcome=outcome,
            metadata={"terminal_outcome": terminal, "total_duration_ms": elapsed},
            duration_ms=elapsed,
            context=outer,
            parent_span_id=outer.span_id,
        )
        self._end_span(exc)


def agent_scope(
    agent_name: str, *, model_id: str | None = None, until: Until = "exit"
) -> AgentScope:
    """An agent turn: ``with``, ``async with``, or a decorator (functions and generators).

    ``until="response"``: inside a request, the turn lasts until the request's response ends
    (its streamed body included), not until the block or decorated handler returns; see
    docs/agents-and-llm-calls.md. Outside a request, or when the block raises, it is a plain
    scope.
    """
    return AgentScope(agent_name, model_id=model_id, until=until)


# --- llm_call ----------------------------------------------------------------------------------


class LLMCall(_Scope):
    """One outstanding LLM call, and the handle to tell cvdiag how it went.

    Emits ``backend.llm.call.start``, a ``backend.llm.call.heartbeat`` every
    ``heartbeat_interval`` seconds while outstanding (from the process's one heartbeat thread,
    so sync code, async code and threads are alike and no task or thread is added per call) and
    ``backend.llm.call.response`` exactly once at the end. The response's ``outcome`` is ``ok``,
    ``timeout`` for a timeout, else ``err``; ``error_class`` names the exception, so a call ended
    by cancellation says ``CancelledError`` (outcome ``err``: no answer came) and is never
    mistaken for an answered one. The caller's exception, cancellation included, propagates.
    """

    #: What ``record_response`` (or an instrumented client) recorded.
    response_token_count: int | None = None
    #: The call's span (its start envelope's) once recorded; None when nothing is recorded.
    span_id: str | None = None
    #: ``time.monotonic()`` at start, and at the first chunk of a streamed response: the time
    #: to first token (``first_token_delta_ms`` on the heartbeats that follow and the response).
    started_at: float | None = None
    first_chunk_at: float | None = None
    #: True once the response envelope is emitted.
    ended: bool = False
    #: Set by an instrumented stream dropped unclosed (from a finalizer, which must not take
    #: locks): the heartbeat thread ends the call at its next beat.
    orphaned: bool = False
    #: What an instrumented client knows of the request (operation, streaming, server) and
    #: read from the response (tokens, response model and id, finish reasons): for the span.
    request_facts: RequestFacts | None = None
    response_facts: ResponseFacts | None = None
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

    @property
    def time_to_first_chunk_ms(self) -> int | None:
        if self.started_at is None or self.first_chunk_at is None:
            return None
        return max(0, round((self.first_chunk_at - self.started_at) * 1000))

    def record_response(self, response_token_count: int | None = None) -> None:
        """Record the answer's token count (kept for the response envelope at exit)."""
        if response_token_count is None:
            return
        try:
            self.response_token_count = max(0, int(response_token_count))
        except (TypeError, ValueError, OverflowError) as exc:
            record_failure("scopes", exc)

    def mark_first_chunk(self) -> None:
        """Note the arrival of the first response chunk (only the first counts)."""
        if self.first_chunk_at is None:
            self.first_chunk_at = time.monotonic()

    # -- lifecycle ---------------------------------------------------------------------------

    def _copy(self) -> LLMCall:
        return LLMCall(
            self.provider,
            self.model,
            prompt_token_count_estimate=self.prompt_token_count_estimate,
            heartbeat_interval=self.heartbeat_interval,
        )

    def _install(self) -> _Tokens:
        return _CURRENT.set(self._inner), _ACTIVE_CALL.set(self), self._attach_span()

    def _begin(self) -> bool:
        emitter = get_emitter()
        if not emitter.allows("backend.llm.call.start") and emitter.otel is None:
            return False  # neither an envelope nor a span wants this call
        if self.started_at is not None:
            if not self.ended:  # live elsewhere (the transport drives it): leave it alone
                return False
            # A handle used again for a new call: forget the previous one.
            self.response_token_count = self.first_chunk_at = self.response_facts = None
            self.ended = self.orphaned = self._scheduled = False
        ctx = _CURRENT.get() or _fresh_context(emitter)
        span = new_span_id()
        self._emitter, self._ctx, self.span_id = emitter, ctx, span
        self._inner = ctx.child(span)
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
            error_class = type(exc).__qualname__
            outcome = "timeout" if is_timeout(exc) else "err"
            _client_left(exc)
        else:
            outcome = "ok" if error_class is None else "err"
        latency = _elapsed_ms(started)
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
                first = self.time_to_first_chunk_ms
                emitter.emit(
                    "backend.llm.call.heartbeat",
                    # Once tokens flow, a heartbeat says since when: the call is streaming,
                    # not waiting.
                    metadata={"elapsed_ms_since_start": _elapsed_ms(started)}
                    if first is None
                    else {
                        "elapsed_ms_since_start": _elapsed_ms(started),
                        "first_token_delta_ms": first,
                    },
                    context=self._ctx,
                    parent_span_id=self.span_id,
                )
            finally:
                if token is not None:
                    from cvdiag.otel import detach

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


def current_llm_call() -> LLMCall | None:
    """The innermost recorded ``llm_call`` around this code (for decorated functions)."""
    return _ACTIVE_CALL.get()
