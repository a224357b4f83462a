"""Sinks that stay in the process: a stdlib logger, memory (for tests), any callable; and which
sinks need only the serialized line."""

from __future__ import annotations

import collections
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeGuard

import orjson

from cvdiag.sinks.base import BaseSink, LineSink, Sink
from cvdiag.sinks.queued import QueuedLineSink


class LoggingSink(BaseSink):
    """Hands each line to a stdlib logger (for logging / structlog pipelines).

    The record's message is the ``CVDIAG {json}`` line; ``record.cvdiag`` holds the envelope.
    """

    def __init__(
        self, logger: logging.Logger | str = "cvdiag", *, level: int = logging.INFO
    ) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(
                self.level, "CVDIAG %s", line.decode("utf-8"), extra={"cvdiag": envelope}
            )


class MemorySink(BaseSink):
    """Keeps envelopes in memory, for tests. Bounded: the oldest go first past ``maxlen``."""

    def __init__(self, *, maxlen: int | None = 100_000) -> None:
        self.envelopes: collections.deque[Mapping[str, Any]] = collections.deque(maxlen=maxlen)
        self.lines: collections.deque[bytes] = collections.deque(maxlen=maxlen)

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        self.envelopes.append(envelope)
        self.lines.append(line)

    def write_line(self, line: bytes) -> None:
        """A line from the templated path: kept as written, and read back as its envelope, so
        what a test sees is what stdout would carry."""
        self.envelopes.append(orjson.loads(line))
        self.lines.append(line)

    def clear(self) -> None:
        self.envelopes.clear()
        self.lines.clear()


class CallableSink(BaseSink):
    """Calls ``fn(envelope)`` for every envelope, in the emitting thread."""

    def __init__(self, fn: Callable[[Mapping[str, Any]], object]) -> None:
        self.fn = fn

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        self.fn(envelope)


class SysStdoutSink(BaseSink):
    """Writes each line to whatever ``sys.stdout`` is as it is emitted, at once, in the
    emitting thread.

    Not the default (``StdoutSink`` queues and writes on a descriptor of its own, so the event
    loop never waits on a pipe): this one is for code that reads its lines back from
    ``sys.stdout`` as it stands at the time, as pytest's ``capsys`` does, the moment a
    synchronous call returns (the showcase face, cvdiag/showcase/).
    """

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        self.write_line(line)

    def write_line(self, line: bytes) -> None:
        stream = sys.stdout
        if stream is not None:  # pythonw, or a host that closed it: nowhere to write
            stream.write("CVDIAG " + line.decode("utf-8") + "\n")
            stream.flush()


def takes_lines(sink: Sink) -> TypeGuard[LineSink]:
    """Whether ``sink`` is one of cvdiag's own that needs only the line. A subclass that
    overrides ``write`` wants the envelope dict: it gets it through ``Emitter.emit``."""
    return type(sink).write in _LINE_WRITES


_LINE_WRITES: Final = (QueuedLineSink.write, MemorySink.write, SysStdoutSink.write)
