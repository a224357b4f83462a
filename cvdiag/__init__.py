"""cvdiag: boundary envelopes that make agent backends diagnosable."""

from __future__ import annotations

from cvdiag.context import RequestContext, current_context
from cvdiag.emitter import Emitter, configure, emit, flush, get_emitter
from cvdiag.httpx import AsyncCvdiagTransport, CvdiagTransport, instrument_httpx
from cvdiag.middleware import CvdiagMiddleware
from cvdiag.schema import Tier
from cvdiag.scopes import AgentScope, LLMCall, agent_scope, llm_call
from cvdiag.scrub import scrub
from cvdiag.settings import Settings
from cvdiag.sinks import (
    CallableSink,
    FileSink,
    LoggingSink,
    MemorySink,
    Sink,
    StdoutSink,
)

__version__ = "0.1.0"

__all__ = [
    "AgentScope",
    "AsyncCvdiagTransport",
    "CallableSink",
    "CvdiagMiddleware",
    "CvdiagTransport",
    "Emitter",
    "FileSink",
    "LLMCall",
    "LoggingSink",
    "MemorySink",
    "RequestContext",
    "Settings",
    "Sink",
    "StdoutSink",
    "Tier",
    "agent_scope",
    "configure",
    "current_context",
    "emit",
    "flush",
    "get_emitter",
    "instrument_httpx",
    "llm_call",
    "scrub",
]
