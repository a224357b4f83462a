"""What agent scopes and LLM calls share: one begin, a context switch, one end.

A scope's *begin* emits its start envelope and mints a span, its context switch makes everything
inside hang under that span, and its *end* emits the exit envelope exactly once. When the emitter
is off, or the tier leaves the scope's boundaries out, begin is one check and nothing else
happens. The forms a scope takes as a decorator are in cvdiag/scopes/forms.py; the two kinds of
scope in cvdiag/scopes/agent.py and cvdiag/scopes/llm_calls.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import Token
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from cvdiag.core.context import _CURRENT, _STATE, RequestContext
from cvdiag.core.errors import is_client_gone
from cvdiag.core.guard import record_failure
from cvdiag.pipeline import emitter as _emitters
from cvdiag.pipeline.emitter import Emitter
from cvdiag.scopes.forms import decorate

if TYPE_CHECKING:
    from opentelemetry.trace import Span


_F = TypeVar("_F", bound=Callable[..., Any])
#: What a scope's context switch must undo: its request context, its LLM-call marker, and the
#: OpenTelemetry context that makes its span current (when the bridge is on).
Tokens = tuple[Token[RequestContext | None], Token[Any] | None, object | None]
_S = TypeVar("_S", bound="Scope")


def client_left(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the client leaving; if so, the request's turn is marked cut."""
    if exc is None or not is_client_gone(exc):
        return False
    state = _STATE.get()
    if state is not None:
        state.turn_cut = True
    return True


def elapsed_ms(since: float) -> int:
    return max(0, round((time.monotonic() - since) * 1000))


class Scope:
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
    _tokens: Tokens | None = None
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

    def _install(self) -> Tokens:
        return _CURRENT.set(self._inner), None, self._attach_span()

    def _attach_span(self) -> object | None:
        span = self._otel_span
        if span is None:
            return None
        from cvdiag.otel.bridge import attach_span

        return attach_span(span)

    def _emit_in_span(self, emitter: Emitter, boundary: str, **options: Any) -> None:
        """Emit where the scope's own span is current, so its start and end envelopes become
        events of that span (they are emitted outside the scope's context switch)."""
        token = self._attach_span()
        try:
            emitter.emit(boundary, **options)
        finally:
            if token is not None:
                from cvdiag.otel.bridge import detach

                detach(token)

    def _end_span(self, exc: BaseException | None) -> None:
        span, self._otel_span = self._otel_span, None
        if span is None:
            return
        try:
            if isinstance(exc, Exception):
                from cvdiag.otel.bridge import OtelBridge

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
    ) -> Tokens | None:
        try:
            return self._install()
        except Exception as exc:
            record_failure("scopes", exc)
            return None

    @staticmethod
    def _uninstall(
        tokens: Tokens | None,
    ) -> None:
        if tokens is None:
            return
        current, call, span = tokens
        if span is not None:
            from cvdiag.otel.bridge import detach

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
                call.var.reset(call)  # the LLM-call marker (cvdiag.scopes.llm_calls)
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
        return decorate(self, fn)
