"""cvdiag: boundary envelopes that make agent backends diagnosable."""

from __future__ import annotations

from cvdiag.context import RequestContext, current_context
from cvdiag.emitter import Emitter, configure, emit, flush, get_emitter
from cvdiag.middleware import CvdiagMiddleware
from cvdiag.schema import Tier
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
    "CallableSink",
    "CvdiagMiddleware",
    "Emitter",
    "FileSink",
    "LoggingSink",
    "MemorySink",
    "RequestContext",
    "Settings",
    "Sink",
    "StdoutSink",
    "Tier",
    "configure",
    "current_context",
    "emit",
    "flush",
    "get_emitter",
    "scrub",
]
