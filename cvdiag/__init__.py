"""cvdiag: boundary envelopes that make agent backends diagnosable.

The public names are loaded on first use (PEP 562), so ``cvdiag`` the command starts without
importing the middleware, the scopes or the httpx transports it never needs.
"""

from __future__ import annotations

import importlib

from cvdiag.core.version import __version__ as __version__

_LAZY: dict[str, str] = {
    "AdoptedTestId": "cvdiag.scopes",
    "AgentScope": "cvdiag.scopes",
    "AsyncCvdiagTransport": "cvdiag.outbound.transports",
    "CallableSink": "cvdiag.sinks",
    "CvdiagMiddleware": "cvdiag.asgi.middleware",
    "CvdiagTransport": "cvdiag.outbound.transports",
    "Emitter": "cvdiag.pipeline.emitter",
    "FileSink": "cvdiag.sinks",
    "LLMCall": "cvdiag.scopes",
    "LogContextFilter": "cvdiag.core.log_context",
    "LoggingSink": "cvdiag.sinks",
    "MemorySink": "cvdiag.sinks",
    "RequestContext": "cvdiag.core.context",
    "ScrubFilter": "cvdiag.core.log_scrub",
    "Settings": "cvdiag.core.settings",
    "Sink": "cvdiag.sinks",
    "StdoutSink": "cvdiag.sinks",
    "Tier": "cvdiag.schema.vocabulary",
    "add_log_context": "cvdiag.core.log_context",
    "adopt_test_id": "cvdiag.scopes",
    "agent_scope": "cvdiag.scopes",
    "configure": "cvdiag.pipeline.emitter",
    "current_context": "cvdiag.core.context",
    "emit": "cvdiag.pipeline.emitter",
    "flush": "cvdiag.pipeline.emitter",
    "get_emitter": "cvdiag.pipeline.emitter",
    "install_scrub_filter": "cvdiag.core.log_scrub",
    "instrument_httpx": "cvdiag.outbound.transports",
    "llm_call": "cvdiag.scopes",
    "scrub": "cvdiag.scrubbing.redact",
    "scrub_log_event": "cvdiag.core.log_scrub",
}

__all__ = [
    "AdoptedTestId",
    "AgentScope",
    "AsyncCvdiagTransport",
    "CallableSink",
    "CvdiagMiddleware",
    "CvdiagTransport",
    "Emitter",
    "FileSink",
    "LLMCall",
    "LogContextFilter",
    "LoggingSink",
    "MemorySink",
    "RequestContext",
    "ScrubFilter",
    "Settings",
    "Sink",
    "StdoutSink",
    "Tier",
    "add_log_context",
    "adopt_test_id",
    "agent_scope",
    "configure",
    "current_context",
    "emit",
    "flush",
    "get_emitter",
    "install_scrub_filter",
    "instrument_httpx",
    "llm_call",
    "scrub",
    "scrub_log_event",
]

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Any

    from cvdiag.asgi.middleware import CvdiagMiddleware
    from cvdiag.core.context import RequestContext, current_context
    from cvdiag.core.log_context import LogContextFilter, add_log_context
    from cvdiag.core.log_scrub import ScrubFilter, install_scrub_filter, scrub_log_event
    from cvdiag.core.settings import Settings
    from cvdiag.outbound.transports import AsyncCvdiagTransport, CvdiagTransport, instrument_httpx
    from cvdiag.pipeline.emitter import Emitter, configure, emit, flush, get_emitter
    from cvdiag.schema.vocabulary import Tier
    from cvdiag.scopes import (
        AdoptedTestId,
        AgentScope,
        LLMCall,
        adopt_test_id,
        agent_scope,
        llm_call,
    )
    from cvdiag.scrubbing.redact import scrub
    from cvdiag.sinks import CallableSink, FileSink, LoggingSink, MemorySink, Sink, StdoutSink


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cvdiag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
