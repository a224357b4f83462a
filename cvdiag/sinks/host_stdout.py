"""The stream the stdout sink writes: ``sys.stdout``, unless a logger has taken it over.

Celery's worker (``worker_redirect_stdouts``, on by default) replaces ``sys.stdout`` with a
``LoggingProxy`` that turns each write into a log record: a batch of envelope lines would come
out on the worker's log as one record, with Celery's ``[date: WARNING/ForkPoolWorker-2]``
prefix before its first line only, and every reader would set the prefixed line aside. Such a
stream (no descriptor, a ``logger`` attribute holding a ``logging.Logger``) is passed over for
the process's own stdout, ``sys.__stdout__``, which the proxy leaves in place: envelopes go to
descriptor 1 as lines of their own, and the app's log records go where the logger sends them,
untouched. Where the process has no stdout of its own (``sys.__stdout__`` None or closed), the
proxy is written one line per write, so that every envelope is a record of its own. Either way
stderr says once which path is taken (in the parent of a prefork pool: its children inherit
that it was said).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, Final

from cvdiag.core.guard import say

#: The ``sys.stdout`` last looked at, the stream chosen for it and whether that is a logger's
#: proxy to be written one line per write: resolved once per ``sys.stdout`` object.
_seen: list[Any] = [None, None, False]
#: Whether stderr was told which path is taken (inherited by a forked child).
_said = False
#: A stdout sink exists in this process: resolve before a fork, so the parent says it once.
_wanted = False

VIA_FD: Final = (
    "sys.stdout hands its writes to a logger (Celery's worker_redirect_stdouts); envelopes are"
    " written to the process's own stdout (sys.__stdout__) instead, one line each"
)
VIA_PROXY: Final = (
    "sys.stdout hands its writes to a logger (Celery's worker_redirect_stdouts) and the process"
    " has no stdout of its own; envelopes are written through the logger one line per record"
)


def hands_to_logger(stream: Any) -> bool:
    """Whether ``stream`` turns writes into log records (Celery's ``LoggingProxy`` and its
    kind): it has a logger and no descriptor."""
    try:
        if not isinstance(getattr(stream, "logger", None), logging.Logger):
            return False
        fileno = getattr(stream, "fileno", None)
        return fileno is None or not isinstance(fileno(), int)
    except Exception:  # a fileno() that raises: no descriptor
        return True


def _usable(stream: Any) -> bool:
    try:
        return stream is not None and not stream.closed and isinstance(stream.fileno(), int)
    except Exception:  # no descriptor, or a closed stream refusing to answer
        return False


def target() -> tuple[Any, bool]:
    """The stream to write (None when there is none), and whether it is a logger's proxy to be
    written one line per write."""
    stream = sys.stdout
    if stream is _seen[0]:
        return _seen[1], _seen[2]
    chosen, per_line = stream, False
    if hands_to_logger(stream):
        real = sys.__stdout__
        if _usable(real):
            chosen, message = real, VIA_FD
        else:
            per_line, message = True, VIA_PROXY
        global _said
        if not _said:
            _said = True
            say(message)
    _seen[:] = [stream, chosen, per_line]
    return chosen, per_line


def want() -> None:
    """A stdout sink was built: resolve the stream before each fork from now on."""
    global _wanted
    _wanted = True


def _before_fork() -> None:
    if _wanted:  # a failure here is met again in the child, at its first write
        with contextlib.suppress(Exception):
            target()


os.register_at_fork(before=_before_fork)
