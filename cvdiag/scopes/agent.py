"""``agent_scope``: one agent turn, ``backend.agent.enter`` … ``backend.agent.exit``.

``backend.agent.enter`` carries the scope's span and hangs under the current context's span (the
request's ingress, or the enclosing agent); ``backend.agent.exit`` is its sibling (fresh span,
same parent) and ``backend.error.caught`` hangs under the scope (docs/agents-and-llm-calls.md).
"""

from __future__ import annotations

import time
from typing import Literal

from cvdiag.core.context import RequestContext
from cvdiag.core.errors import claim_report, describe_exception, is_timeout
from cvdiag.pipeline.emitter import Emitter, get_emitter
from cvdiag.schema.ids import new_span_id
from cvdiag.scopes.run_config import context_and_run, run_metadata
from cvdiag.scopes.scope import Scope, client_left, elapsed_ms

#: When an agent turn ends: when its block (or decorated function) exits, or when the response
#: of the request it runs in ends.
Until = Literal["exit", "response"]


class AgentScope(Scope):
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
        # terminal is still to come, hands the turn to the request
        # (cvdiag/scopes/until_response.py).
        if self.until == "response" and exc is None and self._depth == 1 and self._live:
            from cvdiag.scopes.until_response import hold

            if hold(self):
                self._depth = 0
                return
        super()._exit(exc)

    def _begin(self) -> bool:
        emitter = get_emitter()
        if not emitter.allows("backend.agent.enter"):
            return False
        outer, link = context_and_run(emitter)
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
            metadata={
                "agent_name": self.agent_name,
                "model_id": self.model_id,
                **run_metadata(link),
            },
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
        elapsed = elapsed_ms(self._started)
        if exc is None:
            terminal, outcome = "ok", "ok"
        elif isinstance(exc, Exception) and not client_left(exc):
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
