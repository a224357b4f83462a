"""One outbound request's way through a transport: what is added before it, what follows it.

Before the request: the test id and slug headers (only to the hosts the forwarding policy allows,
never overwriting the caller's), the trace context, and, for an LLM provider call, an
``llm_call`` begun, or the hand-written one around it filled in. After it: the response's body
handed to a ``Tracker`` that ends the call once. The transports (cvdiag/outbound/transports.py)
are only the wrappers around the library's transport and its context-manager protocol; this is
what they do to each request, kept apart so that neither has to be read to follow the other.

Neither httpx nor httpx2 is imported: the library a response or client belongs to is read from
its class's module (``library_of``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from cvdiag.core.context import _CURRENT, _STATE
from cvdiag.core.forwarding import ForwardPolicy, policy_for, split_forward_hosts
from cvdiag.core.guard import record_failure
from cvdiag.outbound.streams import stream_class
from cvdiag.outbound.tracking import Tracker
from cvdiag.pipeline.emitter import Emitter, get_emitter
from cvdiag.providers import Detector, describe_request
from cvdiag.scopes import ACTIVE_CALL, LLMCall
from cvdiag.scopes.run_config import from_run_config

if TYPE_CHECKING:
    from opentelemetry.trace import Span

_LIBRARIES: Final = frozenset({"httpx", "httpx2"})


# --- options -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Options:
    """A transport's options, checked and lowered once when it is built, not per request."""

    test_id_header: str | None
    slug_header: str | None
    detector: Detector
    detect_llm: bool
    #: None: the emitter's ``Settings.forward_hosts`` (CVDIAG_FORWARD_HOSTS) decide.
    forward: ForwardPolicy | None

    @classmethod
    def build(
        cls,
        *,
        test_id_header: str | None,
        slug_header: str | None,
        llm_hosts: Mapping[str, str] | None,
        llm_paths: Mapping[str, str] | None,
        detect_llm: bool,
        forward_hosts: Iterable[str] | None,
    ) -> Options:
        forward = None
        if forward_hosts is not None:
            items = (forward_hosts,) if isinstance(forward_hosts, str) else tuple(forward_hosts)
            accepted, rejected = split_forward_hosts(items)
            if rejected:
                raise ValueError(
                    f"forward_hosts: {rejected[0]!r} is not a host name, an IP address,"
                    " *.suffix or *"
                )
            forward = ForwardPolicy.of(accepted)
        return cls(
            test_id_header=test_id_header.lower() if test_id_header else None,
            slug_header=slug_header.lower() if slug_header else None,
            detector=Detector.build(llm_hosts=llm_hosts, llm_paths=llm_paths),
            detect_llm=detect_llm,
            forward=forward,
        )


def library_of(obj: object) -> ModuleType | None:
    """The httpx-like library (``httpx`` or ``httpx2``) that ``obj``'s class comes from."""
    for cls in type(obj).__mro__:
        root = cls.__module__.partition(".")[0]
        if root in _LIBRARIES:
            return sys.modules.get(root)
    return None


# --- one exchange ------------------------------------------------------------------------------


class Exchange:
    """One LLM request in flight: the call it feeds and whether it owns (ends) it."""

    __slots__ = ("call", "owned")

    def __init__(self, call: LLMCall, owned: bool) -> None:
        self.call = call
        self.owned = owned

    def failed(self, exc: BaseException) -> None:
        if self.owned:
            self.call.finish(exc)

    def attach(self, response: Any, *, sync: bool) -> None:
        """Follow ``response``'s body; if that cannot be done, end the call now."""
        tracker: Tracker | None = None
        try:
            tracker = Tracker(self.call, self.owned, response)
            try:
                content = response.content  # already read: a mock transport, a cache
            except Exception:
                content = None
            if isinstance(content, bytes):
                tracker.read_all(content)
                tracker.finish()
                return
            library = library_of(response)
            if library is None:
                tracker.finish()
                return
            response.stream = stream_class(library, sync)(response.stream, tracker)
            state = _STATE.get()
            if state is not None and self.owned:
                # The request ends the streams it opened and dropped unclosed.
                if state.streams is None:
                    state.streams = [tracker]
                else:
                    state.streams.append(tracker)
        except Exception as exc:
            record_failure("httpx", exc)
            if tracker is not None:
                tracker.finish()
            elif self.owned:
                self.call.finish()


def begin_exchange(request: Any, options: Options) -> Exchange | None:
    """Forward the test id, slug and trace context; start an ``llm_call`` for an LLM call."""
    try:
        headers = request.headers
        emitter = get_emitter()
        ctx = _CURRENT.get()
        if ctx is None and emitter.enabled:  # a LangGraph run's worker: its config's test id
            adopted = from_run_config(emitter)
            ctx = adopted[0] if adopted is not None else None
        if ctx is not None and (options.test_id_header or options.slug_header):
            policy = options.forward or policy_for(emitter.settings.forward_hosts)
            if policy.allows(str(request.url.host)):
                name = options.test_id_header
                if name and name not in headers:
                    headers[name] = ctx.test_id
                name = options.slug_header
                if name and ctx.slug != "unknown" and name not in headers:
                    headers[name] = ctx.slug
        exchange = _llm_exchange(request, options, emitter)
        if emitter.otel is not None:
            span = exchange.call._otel_span if exchange is not None else None
            _inject_trace_context(headers, span)
        return exchange
    except Exception as exc:
        record_failure("httpx", exc)
        return None


def _llm_exchange(request: Any, options: Options, emitter: Emitter) -> Exchange | None:
    if not options.detect_llm or request.method != "POST":
        return None
    if not emitter.allows("backend.llm.call.start") and emitter.otel is None:
        return None  # neither an envelope nor a span wants this call
    url = request.url
    target = options.detector.target(str(url.host), url.port, str(url.path))
    if target is None:
        return None
    active = ACTIVE_CALL.get()
    if active is not None and not active.ended:
        # Inside a hand-written llm_call: fill it in rather than open a second call.
        return Exchange(active, owned=False)
    model, estimate, facts = describe_request(request, target.endpoint)
    call = LLMCall(target.provider, model, prompt_token_count_estimate=estimate)
    call.request_facts = facts
    if not call._begin():
        return None
    return Exchange(call, owned=True)


def _inject_trace_context(headers: Any, span: Span | None) -> None:
    """The trace context through the globally configured propagator (``traceparent`` with the
    default one), never overwriting what the caller set. The LLM call's own span is the parent
    when there is one, else the current span; with no valid span context the propagator writes
    no ``traceparent`` at all (cvdiag never invents a parent nobody exported)."""
    from opentelemetry import propagate, trace

    context = trace.set_span_in_context(span) if span is not None else None
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    for name, value in carrier.items():
        if name not in headers:
            headers[name] = value
