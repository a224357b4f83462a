"""``agent_scope`` and ``llm_call``: the agent turn and the LLM calls inside a request.

Both are context managers (``with`` and ``async with``) and decorators (sync and async functions,
sync and async generators). This module is their public face; what a scope is lives in
cvdiag/scope.py, its decorator forms in cvdiag/scope_forms.py, the agent turn in cvdiag/agent.py
and the LLM call in cvdiag/llm_calls.py.

A scope entered outside any request gets a fresh context (new UUIDv7 test and trace ids) for its
duration, so its envelopes, and the test id an instrumented httpx client forwards, still join.
"""

from __future__ import annotations

from cvdiag.agent import AgentScope, Until, agent_scope
from cvdiag.llm_calls import (
    SHUTDOWN_ERROR,
    LLMCall,
    current_llm_call,
    end_outstanding_calls,
    llm_call,
)
from cvdiag.scope import ACTIVE_CALL

__all__ = [
    "ACTIVE_CALL",
    "SHUTDOWN_ERROR",
    "AgentScope",
    "LLMCall",
    "Until",
    "agent_scope",
    "current_llm_call",
    "end_outstanding_calls",
    "llm_call",
]
