"""The run a LangChain / LangGraph config names, read where a scope begins outside a request.

The LangGraph server runs each graph in a worker task, outside the request that created the run.
It copies the request's ``x-*`` headers listed in ``langgraph.json``'s ``configurable_headers``
into the run's ``config["configurable"]``, and ``langchain_core`` makes that config current
around every node and model call. So a scope (or an instrumented client's LLM call) begun with no
context adopts its ``x-test-id``, else the run's own id, and names the run (``run_id``,
``thread_id``) on its start envelope: no cvdiag code in the graph (``adopt_test_id`` is the way
for any other worker, cvdiag/scopes/adoption.py).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping
from typing import Any, Final

from cvdiag.core.context import (
    _CURRENT,
    _RUN,
    RequestContext,
    RunLink,
    keep_bounded,
    outside_context,
    request_for,
)
from cvdiag.core.guard import record_failure
from cvdiag.pipeline import emitter as _emitters
from cvdiag.pipeline.emitter import Emitter
from cvdiag.schema.ids import join_key, new_uuid7

#: Where LangChain keeps the config of the runnable running now (a ContextVar it sets around
#: every node and model call). Looked up in ``sys.modules`` only: cvdiag never imports it.
_CONFIG_MODULE: Final = "langchain_core.runnables.config"
#: The configurable key LangGraph copies the ``x-test-id`` request header to.
TEST_ID_KEY: Final = "x-test-id"
#: Contexts adopted from run configs, by (test id, run, thread): every scope of one run shares
#: one trace id. Bounded; the oldest entries go first.
_FROM_CONFIG: dict[tuple[str, str | None, str | None], tuple[RequestContext, RunLink]] = {}
_FROM_CONFIG_MAX: Final = 1024


def run_key(raw: object) -> str | None:
    """A run or thread id as a join key (scrubbed, ``[a-z0-9._-]``, at most 128 characters);
    None for anything but a string, bytes or a UUID (an object's ``str`` is the host's code)."""
    if isinstance(raw, uuid.UUID):
        return str(raw)
    if isinstance(raw, (str, bytes)):
        return join_key(raw)
    return None


def run_metadata(link: RunLink | None) -> dict[str, str | None]:
    """The keys a start envelope names its run with; none outside a run."""
    if link is None or (link.run_id is None and link.thread_id is None):
        return {}
    return {"run_id": link.run_id, "thread_id": link.thread_id}


def _run_config() -> Mapping[str, Any] | None:
    """The LangChain run config current here; None fast where there is none (every scope of a
    request asks: an ``isinstance`` against ``Mapping`` alone would cost it 0.3 µs)."""
    module = sys.modules.get(_CONFIG_MODULE)
    if module is None:
        return None
    var = getattr(module, "var_child_runnable_config", None)
    config = var.get() if var is not None else None
    if config is None:
        return None
    return config if isinstance(config, Mapping) else None


def from_run_config(emitter: Emitter) -> tuple[RequestContext, RunLink] | None:
    """The context a LangChain / LangGraph run's config carries (its ``x-test-id``, else its
    run id), if any."""
    config = _run_config()
    if config is None:
        return None
    configurable = config.get("configurable")
    if not isinstance(configurable, Mapping):
        return None
    raw = configurable.get(TEST_ID_KEY)
    run = run_key(configurable.get("run_id") or config.get("run_id"))
    thread = run_key(configurable.get("thread_id"))
    test_id = join_key(raw) if isinstance(raw, (str, bytes)) else None
    if test_id is None:
        if run is None:
            return None
        # No test id sent: the run's own id joins its envelopes (one story per run, not one
        # made-up id per call), and names it as a run, never as a request that failed.
        test_id = run
    key = (test_id, run, thread)
    found = _FROM_CONFIG.get(key)
    if found is None:
        origin = request_for(test_id)
        if origin is None:
            found = RequestContext(test_id, emitter.new_trace_id()), RunLink(run, thread)
        else:  # the run's scopes hang under the request that created it, in its trace
            found = origin[0], RunLink(run, thread, origin[1])
        if run is not None:  # without a run, a later request with the id may be its origin
            _FROM_CONFIG[key] = found
            keep_bounded(_FROM_CONFIG, _FROM_CONFIG_MAX)
    return found


def context_and_run(emitter: Emitter) -> tuple[RequestContext, RunLink | None]:
    """The context a scope begins in, and the run it belongs to (None: no run)."""
    ctx, link = _CURRENT.get(), _RUN.get()
    if ctx is None:
        return outside_request(emitter)
    if link is None and _run_config() is not None:
        # Inside a scope of a LangGraph run: the run its config names, when its id is ours.
        found = from_run_config(emitter)
        if found is not None and found[0].test_id == ctx.test_id:
            link = found[1]
    return ctx, link


def outside_request(emitter: Emitter) -> tuple[RequestContext, RunLink | None]:
    """What a scope begun with no context uses: the run config's test id, else fresh ids (so its
    envelopes, and the test id an instrumented client forwards, still join)."""
    found = from_run_config(emitter)
    if found is not None:
        return found
    return RequestContext(test_id=new_uuid7(), trace_id=emitter.new_trace_id()), None


def _run_context() -> RequestContext | None:
    """``current_context()`` outside any request or scope: the context a scope begun here
    would adopt from the LangGraph run's config, so a node's own code (and its log lines) sees
    the test id its calls carry. None fast where no run config is current, or cvdiag is off."""
    if _run_config() is None:
        return None
    try:
        emitter = _emitters._REQUEST_EMITTER.get() or _emitters._emitter
        if emitter is None or not emitter.enabled:
            return None
        found = from_run_config(emitter)
    except Exception as exc:  # never cost the host its context lookup or its log line
        record_failure("scopes", exc)
        return None
    return found[0] if found is not None else None


if not outside_context:
    outside_context.append(_run_context)
