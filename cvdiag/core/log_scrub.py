"""App logs scrubbed: ``ScrubFilter`` (logging) and ``scrub_log_event`` (structlog).

cvdiag scrubs what it writes; a host's own logs are another door. uvicorn prints an app's
exception with its traceback on stderr, and pytest captures the same record: an ``sk-proj-…``
key in the exception's message reached both in full. The filter runs the same scrubber over a
record's message, its arguments, its exception text and its stack, before any handler formats it.

What it cannot reach: text a library writes to ``sys.stderr`` itself, not through ``logging``
(``traceback.print_exc()``, ``warnings`` shown without ``logging.captureWarnings``), and
formatters that render ``exc_info`` themselves rather than ``exc_text`` (rich's tracebacks).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final

from cvdiag.scrubbing.redact import scrub

__all__ = ["ScrubFilter", "install_scrub_filter", "scrub_log_event"]

#: Characters of a log message (or traceback) scanned: a long traceback is still one record.
LOG_LIMIT: Final = 1 << 18
#: Values a format's ``%d``/``%f`` needs as they are: never secrets.
_PLAIN: Final = (int, float, type(None))


def _scrubbed(value: Any) -> Any:
    """``value`` unchanged when it holds no secret (its type kept: ``%d`` still formats it),
    else its scrubbed text."""
    if isinstance(value, _PLAIN):
        return value
    text = value if isinstance(value, str) else str(value)
    out = scrub(text, limit=LOG_LIMIT)
    if out == text:
        return value
    return out


class ScrubFilter(logging.Filter):
    """Scrubs each record it sees, in place; never drops one, never raises.

    On a logger (``logging.getLogger("uvicorn.error").addFilter(ScrubFilter())``) it changes the
    record before any handler sees it, pytest's capture included; on a handler, only that
    handler's records, whichever logger made them. ``install_scrub_filter`` does both.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            _scrub_record(record)
        except Exception:  # never cost the host its log line
            return True
        return True


def _scrub_record(record: logging.LogRecord) -> None:
    if getattr(record, "_cvdiag_scrubbed", False):
        return  # a record passes a logger's filter and then its handlers' too
    record._cvdiag_scrubbed = True
    args = record.args
    if isinstance(args, Mapping):
        record.args = {key: _scrubbed(value) for key, value in args.items()}
    elif isinstance(args, tuple):
        record.args = tuple(_scrubbed(value) for value in args)
    if isinstance(record.msg, str):
        message = record.getMessage()
        if scrub(message, limit=LOG_LIMIT) != message:
            # A secret the arguments' own scrub did not see (split across the template and an
            # argument, or in the template): the message is fixed as its scrubbed text. Its
            # arguments then go, so that nothing formats them again.
            record.msg, record.args = scrub(message, limit=LOG_LIMIT), ()
    else:
        record.msg = _scrubbed(record.msg)
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        # What logging.Formatter would write, scrubbed; it uses exc_text once set.
        record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    if record.exc_text:
        record.exc_text = scrub(record.exc_text, limit=LOG_LIMIT)
    if record.stack_info:
        record.stack_info = scrub(record.stack_info, limit=LOG_LIMIT)


def install_scrub_filter(
    *loggers: str | logging.Logger,
) -> ScrubFilter:
    """One filter on each named logger and on each of its handlers: ``install_scrub_filter(
    "uvicorn.error", "uvicorn.access")`` after uvicorn has set up its logging (in the app's
    module, which uvicorn imports after). No names: the root logger and uvicorn's three."""
    scrub_filter = ScrubFilter()
    names: Iterable[str | logging.Logger] = loggers or (
        "",
        "uvicorn",
        "uvicorn.error",
        "uvicorn.access",
    )
    for name in names:
        logger = name if isinstance(name, logging.Logger) else logging.getLogger(name)
        if not any(isinstance(f, ScrubFilter) for f in logger.filters):
            logger.addFilter(scrub_filter)
        for handler in logger.handlers:
            if not any(isinstance(f, ScrubFilter) for f in handler.filters):
                handler.addFilter(scrub_filter)
    return scrub_filter


def scrub_log_event(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: every value scrubbed (strings, and others that hold a secret as
    text); an ``exc_info`` not yet rendered is rendered into ``exception``, scrubbed. Put it
    last before the renderer, after ``format_exc_info`` if you use it."""
    exc_info = event_dict.pop("exc_info", None)
    if exc_info:
        if exc_info is True:
            import sys

            exc_info = sys.exc_info()
        elif isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        if isinstance(exc_info, tuple) and exc_info[0] is not None:
            event_dict["exception"] = "".join(traceback.format_exception(*exc_info))
    for key, value in list(event_dict.items()):
        event_dict[key] = _scrubbed(value)
    return event_dict
