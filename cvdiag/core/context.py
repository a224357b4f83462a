"""The per-request context, carried in a ContextVar.

A ContextVar is copied into every asyncio task a handler creates and into Starlette's threadpool,
so scopes and outbound calls find their request without being handed it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, Final, NamedTuple


class RequestContext(NamedTuple):
    """What every envelope of one request shares; immutable.

    ``span_id`` is the span that envelopes emitted here hang under: the request's ingress span,
    or the innermost agent / LLM scope. A NamedTuple rather than a frozen dataclass: one is built
    per request and per scope, and this costs a quarter as much.
    """

    test_id: str
    trace_id: str
    slug: str = "unknown"
    demo: str = "default"
    span_id: str | None = None

    def child(self, span_id: str) -> RequestContext:
        """The same request, with envelopes now hanging under ``span_id``."""
        return self._replace(span_id=span_id)


_CURRENT: ContextVar[RequestContext | None] = ContextVar("cvdiag_request_context", default=None)


class RequestState:
    """What the request's own code tells the middleware while the request runs (mutable).

    ``streams``: instrumented LLM response streams opened in the request and not yet ended,
    so that none outlives the request unread. ``turn_cut``: a scope saw the client leave.
    ``held``: ``agent_scope(until="response")`` turns the request ends before its terminal
    (cvdiag/scopes/until_response.py); ``responded``: that terminal is out, and ``ended_at``
    (``time.monotonic()``) when: a call that ends later says by how much it outlived its
    request. One is made per observed request; scopes and transports find it through ``_STATE``.
    """

    __slots__ = ("ended_at", "held", "responded", "streams", "turn_cut")

    def __init__(self) -> None:
        self.streams: list[Any] | None = None
        self.turn_cut = False
        self.held: list[Any] | None = None
        self.responded = False
        self.ended_at: float | None = None


_STATE: ContextVar[RequestState | None] = ContextVar("cvdiag_request_state", default=None)


#: Where a context is found outside any request or scope: a LangGraph run's config, whose test
#: id the run's scopes adopt (cvdiag/scopes/run_config.py sets it; core cannot import scopes).
#: So the run's own code, and its log lines through the logging filter, see that id too.
outside_context: list[Callable[[], RequestContext | None]] = []


def current_context() -> RequestContext | None:
    """The context of the request (or scope) this code runs in, if any: outside both, the run
    whose config names a test id (a LangGraph node's body)."""
    ctx = _CURRENT.get()
    if ctx is None and outside_context:
        return outside_context[0]()
    return ctx


def set_context(context: RequestContext | None) -> Token[RequestContext | None]:
    return _CURRENT.set(context)


def reset_context(token: Token[RequestContext | None]) -> None:
    _CURRENT.reset(token)


class RunLink(NamedTuple):
    """Work that runs outside its request under an adopted test id (``cvdiag.adopt_test_id``,
    or a LangGraph run's config): the run it belongs to, as its start envelopes name it, and the
    state of the request that created it when that request ran in this process, so a call that
    outlives it says by how much (``after_request_end_ms``)."""

    run_id: str | None = None
    thread_id: str | None = None
    origin: RequestState | None = None


_RUN: ContextVar[RunLink | None] = ContextVar("cvdiag_run_link", default=None)

#: The latest requests that sent a test id, by that id: adopted elsewhere (a worker's task, a
#: job), the id finds the request that started the work, its trace and its state. Bounded: a
#: request costs one dict store (about 0.1 µs), and the oldest entries go first.
_BY_TEST_ID: dict[str, tuple[RequestContext, RequestState]] = {}
REMEMBERED_MAX: Final = 4096


def remember_request(context: RequestContext, state: RequestState) -> None:
    """Note the request that sent ``context.test_id`` (the latest one wins)."""
    _BY_TEST_ID.pop(context.test_id, None)
    _BY_TEST_ID[context.test_id] = context, state
    keep_bounded(_BY_TEST_ID, REMEMBERED_MAX)


def request_for(test_id: str) -> tuple[RequestContext, RequestState] | None:
    """The context and state of the latest request here that sent ``test_id``, if remembered."""
    return _BY_TEST_ID.get(test_id)


def keep_bounded(store: dict[Any, Any], limit: int) -> None:
    """Past ``limit`` entries, keep the newest half of them.

    In one go rather than the oldest entry per insert: deleting from a dict's front leaves
    dummies that the next ``next(iter(store))`` walks again (2.7 µs an insert, measured at 4096
    entries), where a rebuild every ``limit // 2`` inserts costs about 50 ns an insert.
    """
    if len(store) > limit:
        try:
            newest = list(store.items())[-(limit // 2) :]
        except RuntimeError:  # changed by another thread meanwhile: the next insert tries again
            return
        store.clear()
        store.update(newest)
