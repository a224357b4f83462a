"""Where envelopes go: stdout (the default), a file, a logger, memory, or any callable.

Holds the ``Sink`` and ``LineSink`` protocols (``base.py``), the bounded line queue and its writer
(``queued.py``), stdout and file (``streams.py``) on a descriptor of cvdiag's own
(``descriptor.py``), the flush at exit and on SIGTERM (``exit_flush.py``), and the in-process
sinks (``in_process.py``). The emitter above knows sinks through the protocols in ``base.py``.

This module is the sinks' public face: the names users and tests import.

May import: cvdiag.core.
"""

from __future__ import annotations

from cvdiag.sinks.base import PREFIX, BaseSink, LineSink, Sink
from cvdiag.sinks.exit_flush import before_exit, flush_all, install_exit_hooks
from cvdiag.sinks.in_process import (
    CallableSink,
    LoggingSink,
    MemorySink,
    SysStdoutSink,
    takes_lines,
)
from cvdiag.sinks.queued import QueuedLineSink
from cvdiag.sinks.streams import FileSink, StdoutSink

__all__ = [
    "PREFIX",
    "BaseSink",
    "CallableSink",
    "FileSink",
    "LineSink",
    "LoggingSink",
    "MemorySink",
    "QueuedLineSink",
    "Sink",
    "StdoutSink",
    "SysStdoutSink",
    "before_exit",
    "flush_all",
    "install_exit_hooks",
    "takes_lines",
]
