"""App logs that join the envelopes: ``LogContextFilter`` (logging) and ``add_log_context``
(structlog).

Both read the request context (cvdiag/core/context.py), which the middleware sets per request and
which asyncio copies into the request's tasks and Starlette into its threadpool; a scope or an
instrumented call narrows its ``span_id`` to its own span; in a LangGraph node's body, outside
its scopes, the run's config gives the test id its scopes adopt (``current_context``). Outside
any request, scope or run (and for
every request while cvdiag is off: the middleware is then a pass-through and sets nothing) there
is no context: the filter sets the three attributes to None, so that a format such as
``%(test_id)s`` never raises, and the processor adds nothing.

Neither imports structlog: a structlog processor is any callable
``(logger, method_name, event_dict) -> event_dict``.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any, Final

from cvdiag.core.context import current_context

__all__ = ["LOG_KEYS", "LogContextFilter", "add_log_context"]

#: The keys both add, in this order.
LOG_KEYS: Final = ("test_id", "trace_id", "span_id")


class LogContextFilter(logging.Filter):
    """Adds ``test_id``, ``trace_id`` and ``span_id`` to each record it sees; never drops one.

    Put it on a handler (``handler.addFilter(LogContextFilter())``): a handler's filters see
    every record the handler writes, whichever logger made it, while a logger's filters see only
    the records logged on that very logger, not those its child loggers pass up. Values a record
    already has (``extra={"test_id": …}``) are kept. Outside a request all three are None.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            ctx = current_context()
            values = (None, None, None) if ctx is None else (ctx.test_id, ctx.trace_id, ctx.span_id)
            fields = record.__dict__
            for key, value in zip(LOG_KEYS, values, strict=True):
                if key not in fields:
                    fields[key] = value
        except Exception:  # never cost the host its log line (a record with odd __dict__)
            return True
        return True


def add_log_context(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: adds ``test_id``, ``trace_id`` and ``span_id`` inside a request or
    scope (keys the event already has are kept); outside one it adds nothing."""
    ctx = current_context()
    if ctx is not None:
        event_dict.setdefault("test_id", ctx.test_id)
        event_dict.setdefault("trace_id", ctx.trace_id)
        event_dict.setdefault("span_id", ctx.span_id)
    return event_dict
