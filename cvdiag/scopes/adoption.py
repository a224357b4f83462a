"""``adopt_test_id``: a test id, and the trace it belongs to, carried into work outside its request.

The middleware's context flows into the tasks and threads a request itself starts, but not into
work a queue hands to a worker: a LangGraph server's runs (each one a task its worker creates),
Celery / arq / RQ jobs, a consumer's messages. There the code holds the id as a value (a header
copied into a run's config, a job's payload) and adopts it for a block, a task or a function,
with the middleware's guarantees: scrubbed and bounded like an inbound id, reset afterwards, and,
being a context variable, never seen by another task. A LangGraph run needs no code at all: its
config is read where a scope begins (cvdiag/scopes/run_config.py).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from contextvars import Token
from types import TracebackType
from typing import Any, TypeVar

from cvdiag.core.context import _CURRENT, _RUN, RequestContext, RunLink, request_for
from cvdiag.core.guard import record_failure
from cvdiag.pipeline import emitter as _emitters
from cvdiag.pipeline.emitter import get_emitter
from cvdiag.schema.ids import adopt_test_id as adopted_id
from cvdiag.schema.ids import join_key, sanitize_slug
from cvdiag.scopes.forms import decorate
from cvdiag.scopes.run_config import run_key

_F = TypeVar("_F", bound=Callable[..., Any])
_Tokens = tuple[Token[RequestContext | None], Token[RunLink | None]]


class AdoptedTestId:
    """A test id adopted for a block (``with`` / ``async with``) or each call of a decorated
    function: inside, ``current_context()`` carries it, and scopes, LLM calls, heartbeats and
    instrumented clients use it as they use a request's.

    ``test_id`` is read as the middleware reads the ``x-test-id`` header (a UUIDv7 kept, anything
    else scrubbed into a join key, at most 128 characters); None or nothing usable mints a fresh
    one, so the block's envelopes still join each other. The adopted context continues the
    current one when it has the same id, else the latest request in this process that sent the
    id: its trace, slug and span (what begins inside hangs under it), and an LLM call that ends
    after that request's terminal says by how much (``after_request_end_ms``). Otherwise it
    starts a trace of its own. ``trace_id`` and ``slug``, when given, win; ``parent_span_id``
    (16 hex digits: ``current_context().span_id`` where the work was handed over, in the route
    that enqueued the job) continues that trace in another process, what begins inside hanging
    under that span. ``run_id`` and
    ``thread_id`` name the run on the start envelopes begun inside (``backend.agent.enter``,
    ``backend.llm.call.start``).
    """

    #: The adopted context while entered (None outside, or with cvdiag off).
    context: RequestContext | None = None
    _link: RunLink | None = None
    _tokens: _Tokens | None = None
    _depth: int = 0

    def __init__(
        self,
        test_id: str | bytes | uuid.UUID | None,
        *,
        trace_id: str | bytes | None = None,
        slug: str | bytes | None = None,
        run_id: str | bytes | uuid.UUID | None = None,
        thread_id: str | bytes | uuid.UUID | None = None,
        parent_span_id: str | None = None,
    ) -> None:
        self.test_id = test_id
        self.trace_id = trace_id
        self.parent_span_id = parent_span_id
        self.slug = slug
        self.run_id = run_id
        self.thread_id = thread_id

    def __repr__(self) -> str:
        return f"adopt_test_id({self.context.test_id if self.context else '…'!r})"

    def _copy(self) -> AdoptedTestId:
        return AdoptedTestId(
            self.test_id,
            trace_id=self.trace_id,
            slug=self.slug,
            run_id=self.run_id,
            thread_id=self.thread_id,
            parent_span_id=self.parent_span_id,
        )

    def _begin(self) -> bool:
        emitter = _emitters._REQUEST_EMITTER.get() or _emitters._emitter
        if emitter is not None and not emitter.enabled:
            return False  # the one check adopting costs while cvdiag is off
        emitter = emitter or get_emitter()
        raw = self.test_id
        test_id = adopted_id(str(raw) if isinstance(raw, uuid.UUID) else raw)
        outer = _CURRENT.get()
        origin = request_for(test_id)
        # The context this one continues: the current one when it has the same id (a task the
        # request started itself), else the request that sent the id, when it ran here.
        base = outer if outer is not None and outer.test_id == test_id else None
        if base is None and origin is not None:
            base = origin[0]
        trace = join_key(self.trace_id) if self.trace_id is not None else None
        slug = sanitize_slug(self.slug) if self.slug is not None else None
        if base is None:
            base = RequestContext(test_id, emitter.new_trace_id(), span_id=None)
        self.context = RequestContext(
            test_id=test_id,
            trace_id=trace or base.trace_id,
            slug=slug or base.slug,
            demo=base.demo,
            # What begins inside hangs under the span the work was started from: the one the
            # job carries (a request in another process), else the request's found here.
            span_id=_span_id(self.parent_span_id) or base.span_id,
        )
        self._link = RunLink(
            run_key(self.run_id),
            run_key(self.thread_id),
            origin[1] if origin is not None else None,
        )
        return True

    # -- the steps a decorator form runs (cvdiag/scopes/forms.py) ---------------------------

    def _begin_guarded(self) -> bool:
        try:
            return self._begin()
        except Exception as exc:
            record_failure("scopes", exc)
            return False

    def _install_guarded(self) -> _Tokens | None:
        try:
            return _CURRENT.set(self.context), _RUN.set(self._link)
        except Exception as exc:
            record_failure("scopes", exc)
            return None

    @staticmethod
    def _uninstall(tokens: _Tokens | None) -> None:
        if tokens is None:
            return
        current, run = tokens
        try:
            _RUN.reset(run)
            _CURRENT.reset(current)
        except Exception as exc:  # reset in another Context (an object misused across tasks)
            record_failure("scopes", exc)

    def _end_guarded(self, exc: BaseException | None) -> None:
        """Nothing to emit: adopting is a context, not a boundary."""

    # -- with / async with / decorator -------------------------------------------------------

    def __enter__(self) -> AdoptedTestId:
        self._depth += 1
        if self._depth > 1:
            record_failure("scopes", "adopt_test_id entered again while live; ignored")
        elif self._begin_guarded():
            self._tokens = self._install_guarded()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._depth -= 1
        if self._depth == 0:
            tokens, self._tokens = self._tokens, None
            self._uninstall(tokens)

    async def __aenter__(self) -> AdoptedTestId:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: _F) -> _F:
        """Decorate a sync or async function or generator: each call adopts the id afresh."""
        return decorate(self, fn)


def adopt_test_id(
    test_id: str | bytes | uuid.UUID | None,
    *,
    trace_id: str | bytes | None = None,
    slug: str | bytes | None = None,
    run_id: str | bytes | uuid.UUID | None = None,
    thread_id: str | bytes | uuid.UUID | None = None,
    parent_span_id: str | None = None,
) -> AdoptedTestId:
    """Carry ``test_id`` into work that runs outside its request: ``with``, ``async with``, or a
    decorator. See ``AdoptedTestId`` and docs/agents-and-llm-calls.md."""
    return AdoptedTestId(
        test_id,
        trace_id=trace_id,
        slug=slug,
        run_id=run_id,
        thread_id=thread_id,
        parent_span_id=parent_span_id,
    )


_SPAN_ID = re.compile(r"[0-9a-f]{16}")


def _span_id(raw: object) -> str | None:
    """A span id as the envelope carries one (16 lowercase hex digits, not all zero), or None:
    anything else a payload holds is not trusted as a parent."""
    if not isinstance(raw, str) or _SPAN_ID.fullmatch(raw) is None or raw == "0" * 16:
        return None
    return raw
