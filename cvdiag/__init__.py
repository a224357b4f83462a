"""cvdiag: boundary envelopes that make agent backends diagnosable.

The public names are loaded on first use (PEP 562), so ``cvdiag`` the command starts without
importing the middleware, the scopes or the httpx transports it never needs.
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"


class _Package(types.ModuleType):
    """The package, whose ``scrub`` is the function even though a submodule has that name.

    Importing the submodule ``cvdiag.scrub`` (which the emitter does) makes the import system
    set the package attribute ``scrub`` to the module; this keeps the function there instead.
    The function used to be imported eagerly for that reason, which cost every ``cvdiag``
    command the scrubber's rules (a third of ``cvdiag --version``).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scrub" and isinstance(value, types.ModuleType):
            value = value.scrub
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

_LAZY: dict[str, str] = {
    "AgentScope": "cvdiag.scopes",
    "AsyncCvdiagTransport": "cvdiag.httpx",
    "CallableSink": "cvdiag.sinks",
    "CvdiagMiddleware": "cvdiag.middleware",
    "CvdiagTransport": "cvdiag.httpx",
    "Emitter": "cvdiag.emitter",
    "FileSink": "cvdiag.sinks",
    "LLMCall": "cvdiag.scopes",
    "LogContextFilter": "cvdiag.log_context",
    "LoggingSink": "cvdiag.sinks",
    "MemorySink": "cvdiag.sinks",
    "RequestContext": "cvdiag.context",
    "Settings": "cvdiag.settings",
    "Sink": "cvdiag.sinks",
    "StdoutSink": "cvdiag.sinks",
    "Tier": "cvdiag.schema",
    "add_log_context": "cvdiag.log_context",
    "agent_scope": "cvdiag.scopes",
    "configure": "cvdiag.emitter",
    "current_context": "cvdiag.context",
    "emit": "cvdiag.emitter",
    "flush": "cvdiag.emitter",
    "get_emitter": "cvdiag.emitter",
    "instrument_httpx": "cvdiag.httpx",
    "llm_call": "cvdiag.scopes",
    "scrub": "cvdiag.scrub",
}

__all__ = [
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
    "Settings",
    "Sink",
    "StdoutSink",
    "Tier",
    "add_log_context",
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

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Any

    from cvdiag.context import RequestContext, current_context
    from cvdiag.emitter import Emitter, configure, emit, flush, get_emitter
    from cvdiag.httpx import AsyncCvdiagTransport, CvdiagTransport, instrument_httpx
    from cvdiag.log_context import LogContextFilter, add_log_context
    from cvdiag.middleware import CvdiagMiddleware
    from cvdiag.schema import Tier
    from cvdiag.scopes import AgentScope, LLMCall, agent_scope, llm_call
    from cvdiag.scrub import scrub
    from cvdiag.settings import Settings
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
