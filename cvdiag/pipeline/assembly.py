"""Which concrete sinks and bridge an emitter gets: the one place that names them.

The emitter knows its sinks by the protocols in ``cvdiag.sinks.base`` and the bridge by
``cvdiag.pipeline.bridge.Bridge``. What it is given by default (stdout), what the OpenTelemetry
bridge adds when ``CVDIAG_OTEL`` asks, and what it must know of a queued sink (its drop report,
its exit hooks, its drop count) are answered here, so the emit path imports no sink and no bridge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cvdiag.core.settings import Settings
from cvdiag.pipeline.bridge import Bridge
from cvdiag.sinks import (
    PREFIX,
    QueuedLineSink,
    StdoutSink,
    flush_all,
    install_exit_hooks,
    takes_lines,
)
from cvdiag.sinks.base import LineSink, Sink


def default_sinks(settings: Settings) -> tuple[Sink, ...]:
    """An emitter's own sinks when it is given none: stdout, queued."""
    return (StdoutSink(queue_size=settings.queue_size),)


def bridge_for(settings: Settings) -> tuple[Bridge | None, tuple[Sink, ...]]:
    """The OpenTelemetry bridge and its span-event sink, only when asked for: off, the bridge
    costs nothing at all, not even its import."""
    if not settings.otel:
        return None, ()
    from cvdiag.otel.bridge import OtelBridge
    from cvdiag.otel.span_events import SpanEventSink

    return OtelBridge(), (SpanEventSink(),)


def line_sinks(sinks: Sequence[Sink]) -> tuple[LineSink, ...] | None:
    """The sinks, when every one takes serialized lines alone (stdout, a file, memory): then a
    request's templates may write lines without building dicts. None when any needs the dict."""
    if all(takes_lines(sink) for sink in sinks):
        return tuple(sink for sink in sinks if takes_lines(sink))
    return None


def adopt_queues(
    sinks: Sequence[Sink],
    drop_report: Callable[[int, str | None], bytes | None],
    *,
    enabled: bool,
    bound: float,
) -> None:
    """A queued sink reports what it dropped through its emitter, and is written out at exit
    within ``bound`` seconds."""
    for sink in sinks:
        if isinstance(sink, QueuedLineSink):
            if sink.drop_report is None:
                sink.drop_report = drop_report
            if enabled:
                install_exit_hooks(bound=bound)


def line_limit(sinks: Sequence[Sink]) -> int | None:
    """The longest envelope (JSON, without the prefix and line break) every queued sink can
    write whole beside other processes: ``PIPE_BUF`` less 8 where stdout is a pipe, a
    terminal or a socket; None where every one is a regular file or in memory."""
    limits = [
        limit
        for sink in sinks
        if isinstance(sink, QueuedLineSink) and (limit := sink.atomic_limit()) is not None
    ]
    return min(limits) - len(PREFIX) - 1 if limits else None


def shut_down(sinks: Sequence[Sink], bound: float) -> None:
    """Shutdown for these sinks: written within ``bound`` seconds, the rest counted and said."""
    flush_all(bound, [sink for sink in sinks if isinstance(sink, QueuedLineSink)])
    for sink in sinks:
        if not isinstance(sink, QueuedLineSink):
            sink.flush(bound)


def queue_dropped(sinks: Sequence[Sink]) -> int:
    """Lines the queued sinks dropped because their pipe was full."""
    return sum(sink.dropped for sink in sinks if isinstance(sink, QueuedLineSink))
