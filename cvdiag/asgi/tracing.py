"""The request's OpenTelemetry server span, as the middleware enters it: the bridge's where it
traces the request, else a native no-op (``UNTRACED``); the bridge's own functions imported
only when a span exists, so that an untraced request never loads them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Final

from starlette.types import Scope

from cvdiag.core.context import RequestContext

if TYPE_CHECKING:
    from opentelemetry.trace import Span

#: Scope types that get an OpenTelemetry server span.
TRACED: Final = frozenset({"http", "websocket"})


class _Untraced:
    """No server span: the request's ``with`` enters this instead of the bridge's (reentrant).
    Not ``contextlib.nullcontext``: compiled, entering and leaving this are native calls, where
    ``nullcontext``'s are two Python frames a request."""

    def __enter__(self) -> tuple[Span | None, bool]:
        return None, False

    def __exit__(self, *exc: object) -> None:
        return None


UNTRACED: Final[AbstractContextManager[tuple[Span | None, bool]]] = _Untraced()


def annotate_request(span: Span, ctx: RequestContext) -> None:
    from cvdiag.otel.bridge import annotate_request as annotate

    annotate(span, ctx)


def finish_request(span: Span, scope: Scope, status: int, failure: BaseException | None) -> None:
    from cvdiag.otel.bridge import finish_request as finish

    finish(span, scope, status, failure)
