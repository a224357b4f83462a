"""The metadata of ``backend.error.caught``: what failed and where, with secrets scrubbed."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import sysconfig
import traceback
from typing import Any, Final

from cvdiag.scrubbing.redact import scrub

MESSAGE_MAX_BYTES: Final = 512
#: Characters of a message scrubbed: four times what is kept, so a credential straddling the cut
#: is seen whole (the scrubber's own cut falls back to whitespace), and a 100 MB message costs
#: what a short one does.
_MESSAGE_SCAN: Final = MESSAGE_MAX_BYTES * 4
#: Set on an exception once ``backend.error.caught`` was emitted for it, so an exception
#: travelling out through nested scopes and the middleware is reported once, by the innermost.
REPORTED_ATTR: Final = "__cvdiag_reported__"
STACK_FRAMES: Final = 8


def _roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get("purelib", ""), paths.get("platlib", ""), paths.get("stdlib", "")}
    roots.add(os.getcwd())
    # Longest first, so site-packages wins over a project root that contains the venv.
    return tuple(sorted((r.rstrip(os.sep) + os.sep for r in roots if r), key=len, reverse=True))


_ROOTS: Final = _roots()


def relative_path(path: str) -> str:
    """A frame's file relative to site-packages, the stdlib or the working directory."""
    for root in _ROOTS:
        if path.startswith(root):
            return path[len(root) :]
    return os.path.basename(path) if os.path.isabs(path) else path


def _cap_utf8(text: str, limit: int) -> tuple[str, bool]:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """``exception_type``, ``message_scrubbed`` (≤ 512 bytes), ``stack_brief``, ``truncated``."""
    try:
        message = scrub(exc, limit=_MESSAGE_SCAN)
    except Exception:
        message = f"<unprintable {type(exc).__name__}>"
    message, truncated = _cap_utf8(message, MESSAGE_MAX_BYTES)
    frames = traceback.extract_tb(exc.__traceback__)[-STACK_FRAMES:] if exc.__traceback__ else []
    return {
        "exception_type": type(exc).__qualname__,
        "message_scrubbed": message,
        "stack_brief": [
            {"file": scrub(relative_path(f.filename)), "line": f.lineno or 0} for f in frames
        ],
        "truncated": truncated,
    }


def claim_report(exc: BaseException) -> bool:
    """True the first time it is asked about ``exc``; marks it reported."""
    try:
        if getattr(exc, REPORTED_ATTR, False):
            return False
        setattr(exc, REPORTED_ATTR, True)
    except Exception:  # noqa: S110 - an exception refusing attributes is simply reported again
        pass
    return True


#: Set by the middleware on what the server's ``send`` raised for a client that had left.
CLIENT_GONE_ATTR: Final = "__cvdiag_client_gone__"
#: Exceptions that mean "the client left", by class name so no server needs importing:
#: Starlette's ``ClientDisconnect`` and ``WebSocketDisconnect``, uvicorn's ``ClientDisconnected``.
_CLIENT_GONE: Final = frozenset({"ClientDisconnect", "WebSocketDisconnect", "ClientDisconnected"})


def mark_client_gone(exc: BaseException) -> None:
    # An exception refusing attributes is judged by its class alone.
    with contextlib.suppress(Exception):
        setattr(exc, CLIENT_GONE_ATTR, True)


def is_client_gone(exc: BaseException) -> bool:
    """Whether ``exc`` says the client went away: never an application error."""
    if getattr(exc, CLIENT_GONE_ATTR, False):
        return True
    return any(cls.__name__ in _CLIENT_GONE for cls in type(exc).__mro__)


#: Class-name endings that mark a timeout, whichever library raised it (``TimeoutError``,
#: ``asyncio.TimeoutError`` on 3.10, httpx's ``ReadTimeout``, openai's ``APITimeoutError`` …).
_TIMEOUT_SUFFIXES: Final = ("Timeout", "TimeoutError", "TimeoutException")
_BaseExceptionGroup: Any = getattr(builtins, "BaseExceptionGroup", None)


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a timeout, judged by its class names (no library needs importing)."""
    return any(cls.__name__.endswith(_TIMEOUT_SUFFIXES) for cls in type(exc).__mro__)


#: Cancellation under other async libraries, by module and class name (none needs importing):
#: trio's ``Cancelled`` (also what anyio raises on trio). Written as asyncio's word, so one
#: vocabulary (``CancelledError``) names a cancelled call whatever the host runs on.
_FOREIGN_CANCELS: Final = frozenset({("trio", "Cancelled")})
CANCELLED: Final = "CancelledError"


def is_cancellation(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a cancellation: asyncio's ``CancelledError`` or trio's ``Cancelled``."""
    if exc is None:
        return False
    if isinstance(exc, asyncio.CancelledError):
        return True
    cls = type(exc)
    return (cls.__module__.split(".", 1)[0], cls.__name__) in _FOREIGN_CANCELS


def error_class_of(exc: BaseException) -> str:
    """The ``error_class`` an exception is written as: its class name, with every async
    library's cancellation written as ``CancelledError`` (the documented word)."""
    return CANCELLED if is_cancellation(exc) else type(exc).__qualname__


def classify_exit(exc: BaseException | None) -> str | None:
    """How the app ended: None (returned), "disconnect", "cancel", "timeout" or "error".

    A client going away is never an application error: Starlette's ``ClientDisconnect`` and
    ``WebSocketDisconnect``, or what our wrapped ``send`` saw fail, are "disconnect".
    Cancellation and other non-``Exception`` exits (KeyboardInterrupt, SystemExit) are "cancel".
    """
    if exc is None:
        return None
    if is_client_gone(exc):
        return "disconnect"
    if _BaseExceptionGroup is not None and isinstance(exc, _BaseExceptionGroup):
        kinds = {classify_exit(inner) for inner in exc.exceptions}
        for kind in ("error", "timeout", "disconnect", "cancel"):
            if kind in kinds:
                return kind
    if not isinstance(exc, Exception):
        return "cancel"
    return "timeout" if is_timeout(exc) else "error"
