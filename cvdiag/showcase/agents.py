"""The showcase's agent and LLM-call helpers, over cvdiag's emitter and ``llm_call``.

``emit_agent_enter`` and ``emit_agent_exit`` are two calls rather than one scope, so each is one
envelope through the emit path; ``LlmCallScope`` is cvdiag's ``llm_call`` (start, heartbeats from
the one heartbeat thread, one response) entered under the showcase's context.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import Token
from types import TracebackType
from typing import Any, Final

from cvdiag.core.context import RequestContext, reset_context, set_context
from cvdiag.core.guard import record_failure
from cvdiag.scopes import LLMCall, llm_call
from cvdiag.showcase.bootstrap import face_emitter
from cvdiag.showcase.context import _RequestCtx

__all__ = ["LlmCallScope", "emit_agent_enter", "emit_agent_exit"]


def _emit(ctx: _RequestCtx | None, boundary: str, **fields: Any) -> None:
    emitter = face_emitter()
    if not emitter.enabled:
        return
    try:
        context = ctx.in_force() if ctx is not None else None
    except Exception as exc:  # not a _RequestCtx: emitted under the current context
        record_failure("showcase", exc)
        context = None
    emitter.emit(boundary, context=context, **fields)


def emit_agent_enter(ctx: _RequestCtx | None, *, agent_name: str, model_id: str | None) -> None:
    """``backend.agent.enter`` for the request ``ctx``."""
    _emit(ctx, "backend.agent.enter", metadata={"agent_name": agent_name, "model_id": model_id})


def emit_agent_exit(
    ctx: _RequestCtx | None, *, terminal_outcome: str, total_duration_ms: int | float
) -> None:
    """``backend.agent.exit`` for the request ``ctx``: outcome ``ok`` for a turn that ended
    ``ok``, else ``err``, as the showcase says it."""
    _emit(
        ctx,
        "backend.agent.exit",
        outcome="ok" if terminal_outcome == "ok" else "err",
        metadata={"terminal_outcome": terminal_outcome, "total_duration_ms": total_duration_ms},
        duration_ms=total_duration_ms,
    )


class LlmCallScope:
    """``async with LlmCallScope(ctx, provider=..., model=..., interval_s=...)``: one LLM call.

    Start on entry, a heartbeat every ``interval_s`` while outstanding (each with
    ``elapsed_ms_since_start``), the response on exit (``err`` with the exception's class when
    one escapes; it always propagates). Outside the request ``ctx`` belongs to (a hand-built
    ``_RequestCtx`` under ``asyncio.run``), the call runs under ``ctx``'s context.
    """

    def __init__(
        self,
        ctx: _RequestCtx | None,
        *,
        provider: str,
        model: str,
        prompt_token_count_estimate: int = 0,
        interval_s: float = 10.0,
    ) -> None:
        self._ctx = ctx
        try:
            self.call: LLMCall = llm_call(
                provider,
                model,
                prompt_token_count_estimate=prompt_token_count_estimate,
                heartbeat_interval=interval_s,
            )
        except (TypeError, ValueError) as exc:  # an interval of 0: the default one, not a raise
            record_failure("showcase", exc)
            self.call = llm_call(str(provider), str(model))
        self._token: Token[RequestContext | None] | None = None
        #: The showcase's copy kept its heartbeat task here, and code written for it may cancel
        #: it or put a task of its own in its place; cvdiag's heartbeats come from its one
        #: thread and end with the call, so what is here is only cancelled and awaited at exit.
        self._hb_task: Any = None

    async def __aenter__(self) -> LlmCallScope:
        face_emitter()  # the flag and tier as they are now
        ctx = self._ctx
        if ctx is not None:
            try:
                context = ctx.in_force()
                self._token = set_context(context)
            except Exception as exc:
                record_failure("showcase", exc)
        await self.call.__aenter__()
        self._hb_task = _BEATS
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        try:
            await self.call.__aexit__(exc_type, exc, tb)
        finally:
            token, self._token = self._token, None
            if token is not None:
                # Exited in another context than it was entered in: nothing there to undo.
                with contextlib.suppress(ValueError):
                    reset_context(token)
        task, self._hb_task = self._hb_task, None
        if isinstance(task, asyncio.Future):
            await _stopped(task)
        return False  # never suppress the caller's exception


class _Beats:
    """``LlmCallScope._hb_task`` while cvdiag's thread beats the call: nothing to cancel."""

    __slots__ = ()

    def cancel(self, msg: Any = None) -> bool:
        return False

    def done(self) -> bool:
        return False


_BEATS: Final = _Beats()


async def _stopped(task: asyncio.Future[Any]) -> None:
    """Cancel a task put in ``_hb_task`` and wait for it; a cancellation of the caller's own that
    lands meanwhile propagates (``Task.cancelling``, Python 3.11+; before, it is absorbed)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        cancelling = getattr(current, "cancelling", None)
        if current is not None and cancelling is not None and cancelling() > 0:
            raise
    except Exception as exc:
        record_failure("showcase", exc)
