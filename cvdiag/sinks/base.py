"""What every sink is: the protocols the emitter writes to, and the line prefix.

A sink receives each envelope that passed the gate as its dict and its serialized JSON; cvdiag's
own line sinks need only the line (``LineSink``), which the per-request templates hand them
without building a dict (cvdiag/pipeline/template.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

PREFIX = b"CVDIAG "


class LineSink(Protocol):
    """A sink that needs only the serialized line: the per-request templates write to it
    without building an envelope dict (cvdiag/pipeline/template.py)."""

    def write_line(self, line: bytes) -> None: ...


@runtime_checkable
class Sink(Protocol):
    """Receives every envelope that passed the gate: the dict and its serialized JSON."""

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None: ...

    def flush(self, timeout: float = 5.0) -> None: ...

    def close(self) -> None: ...


class BaseSink:
    """Defaults for sinks that have nothing to flush or close."""

    def flush(self, timeout: float = 5.0) -> None:
        return None

    def close(self) -> None:
        return None
