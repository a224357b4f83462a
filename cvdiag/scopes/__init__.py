"""``agent_scope`` and ``llm_call``: the agent turn and the LLM calls inside a request.

Both are context managers (``with`` and ``async with``) and decorators (sync and async functions,
sync and async generators). This module is their public face. Holds what both scopes share
(``scope.py``), their decorator forms (``forms.py``), the agent turn (``agent.py``), the agent
turn the request ends before its terminal (``until_response.py``), the LLM call
(``llm_calls.py``), what it records while outstanding (``call_record.py``) and the one
heartbeat scheduler thread (``heartbeat.py``).

A scope entered outside any request gets a fresh context (new UUIDv7 test and trace ids) for its
duration, so its envelopes, and the test id an instrumented httpx client forwards, still join;
unless it runs under an adopted test id (``adopt_test_id``, ``adoption.py``): work a queue runs
outside its request (a LangGraph run, a job) carries that request's test id.

May import: cvdiag.core, cvdiag.otel, cvdiag.pipeline, cvdiag.providers, cvdiag.schema,
cvdiag.sinks.
"""

from __future__ import annotations

from cvdiag.scopes.adoption import AdoptedTestId, adopt_test_id
from cvdiag.scopes.agent import AgentScope, Until, agent_scope
from cvdiag.scopes.llm_calls import (
    ACTIVE_CALL,
    SHUTDOWN_ERROR,
    LLMCall,
    current_llm_call,
    end_outstanding_calls,
    llm_call,
)

__all__ = [
    "ACTIVE_CALL",
    "SHUTDOWN_ERROR",
    "AdoptedTestId",
    "AgentScope",
    "LLMCall",
    "Until",
    "adopt_test_id",
    "agent_scope",
    "current_llm_call",
    "end_outstanding_calls",
    "llm_call",
]
