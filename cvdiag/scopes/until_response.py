"""``agent_scope(..., until="response")``: an agent turn that lasts as long as its response.

A handler that returns a streamed response (``return StreamingResponse(...)``, an AG-UI
adapter's ``dispatch_request``) leaves its ``async with`` block before the first byte; the
agent's work — its LLM calls — runs while the body streams. So when such a block ends without
an exception inside a request whose terminal is still to come, the scope is *held* by the
request instead of exiting:

- its context stays installed, so the body (which runs in the request's Context, or in a task
  copied from it) and everything it calls hang under the agent's span;
- the request ends it exactly once, just before its terminal envelope: ``ok`` when the body
  completed; ``err`` (with its ``backend.error.caught``) when the app raised while streaming;
  ``cancelled`` when the client left or the response stopped short;
- its context is given back where that is possible (the body ended in the request's own
  Context), else when the request's middleware call returns.

Outside a request, or once the request's terminal is out, the scope exits as a plain one.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from cvdiag.core.context import _CURRENT, _STATE, RequestState
from cvdiag.core.guard import record_failure

if TYPE_CHECKING:
    from cvdiag.scopes.scope import Scope

__all__ = ["end_held", "hold", "release"]


def hold(scope: Scope) -> bool:
    """Hand ``scope`` to the current request; False (exit now) outside one or after its end."""
    state = _STATE.get()
    if state is None or state.responded:
        return False
    if state.held is None:
        state.held = []
    state.held.append(scope)
    return True


def end_held(state: RequestState, exc: BaseException | None) -> None:
    """End the turns ``state`` holds, innermost first, before the request's terminal.

    ``exc`` None means the response completed. A response that stopped without an exception
    (the client left, a body cut short) ends them cancelled, as a plain scope stopped from
    outside would.
    """
    held = state.held
    if not held:
        return
    for scope in reversed(held):
        if scope._live:
            scope._end_guarded(exc)
        _give_back(scope)


def ended_short() -> BaseException:
    """What a held turn is ended with when its response stopped without an exception."""
    return asyncio.CancelledError()


def release(state: RequestState, failure: BaseException | None) -> None:
    """At the request's very end: end what is still held, give every context back."""
    held, state.held = state.held, None
    if not held:
        return
    for scope in reversed(held):
        if scope._live:
            scope._end_guarded(failure if failure is not None else ended_short())
        _give_back(scope)


def _give_back(scope: Scope) -> None:
    """Undo the scope's context switch if this is the Context it was made in.

    Elsewhere (the body streamed in a task of its own, a ``BaseHTTPMiddleware`` ran the handler
    in another task) is expected and harmless: that Context ends with its task, and the
    middleware restores the request's own.
    """
    tokens = scope._tokens
    if tokens is None:
        return
    current, _call, span = tokens
    try:
        _CURRENT.reset(current)
    except (ValueError, RuntimeError):  # another Context, or already given back
        return
    scope._tokens = None
    if span is not None:
        from cvdiag.otel.bridge import detach

        try:
            detach(span)
        except Exception as exc:
            record_failure("scopes", exc)
