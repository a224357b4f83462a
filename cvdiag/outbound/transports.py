"""Outbound calls through httpx or httpx2: forward the test id, and record LLM provider calls.

``instrument_httpx(client)`` wraps a client's transports (its default one and its mounts) in
``CvdiagTransport`` / ``AsyncCvdiagTransport``. For every outbound request the wrapper

- adds the current request's test id (``x-test-id``) and slug headers to requests for local
  hosts and the hosts configured in ``forward_hosts`` (cvdiag/core/forwarding.py), never
  overwriting a header the caller set, so a mock LLM or a downstream service can join on the same
  key;
- with the OpenTelemetry bridge on, adds the trace context through the globally configured
  propagator;
- recognizes LLM provider calls (cvdiag/providers: provider from the host or the path, operation
  from the path, model from the JSON body) and wraps each in an ``llm_call`` whose response is
  read as it passes (cvdiag/outbound/tracking.py, cvdiag/outbound/streams.py). The call ends when
  the body is exhausted or closed, or, for a response dropped unclosed, at the next heartbeat:
  exactly once in every case.

Neither httpx nor httpx2 is a dependency of cvdiag: nothing here imports them. The library a
client, transport or response belongs to is read from its class's module.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from cvdiag.core.context import _CURRENT, _STATE
from cvdiag.core.forwarding import ForwardPolicy, policy_for, split_forward_hosts
from cvdiag.core.guard import record_failure
from cvdiag.outbound.streams import stream_class
from cvdiag.outbound.tracking import Tracker
from cvdiag.pipeline.emitter import Emitter, get_emitter
from cvdiag.providers import DEFAULT_LLM_HOSTS, DEFAULT_LLM_PATHS, Detector, describe_request
from cvdiag.scopes import ACTIVE_CALL, LLMCall

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = [
    "DEFAULT_LLM_HOSTS",
    "DEFAULT_LLM_PATHS",
    "AsyncCvdiagTransport",
    "CvdiagTransport",
    "instrument_httpx",
]

_C = TypeVar("_C")

DEFAULT_TEST_ID_HEADER: Final = "x-test-id"
DEFAULT_SLUG_HEADER: Final = "x-aimock-context"
_LIBRARIES: Final = frozenset({"httpx", "httpx2"})


# --- options -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Options:
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
    ) -> _Options:
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


def _library_of(obj: object) -> ModuleType | None:
    """The httpx-like library (``httpx`` or ``httpx2``) that ``obj``'s class comes from."""
    for cls in type(obj).__mro__:
        root = cls.__module__.partition(".")[0]
        if root in _LIBRARIES:
            return sys.modules.get(root)
    return None


# --- one exchange ------------------------------------------------------------------------------


class _Exchange:
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
            library = _library_of(response)
            if library is None:
                tracker.finish()
                return
            response.stream = stream_class(library, sync)(response.stream, tracker)
            state = _STATE.get()
            if state is not None and self.owned:
                # The request watches the streams it opened, so none outlives it unread.
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


def _before(request: Any, options: _Options) -> _Exchange | None:
    """Forward the test id, slug and trace context; start an ``llm_call`` for an LLM call."""
    try:
        headers = request.headers
        emitter = get_emitter()
        ctx = _CURRENT.get()
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


def _llm_exchange(request: Any, options: _Options, emitter: Emitter) -> _Exchange | None:
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
        return _Exchange(active, owned=False)
    model, estimate, facts = describe_request(request, target.endpoint)
    call = LLMCall(target.provider, model, prompt_token_count_estimate=estimate)
    call.request_facts = facts
    if not call._begin():
        return None
    return _Exchange(call, owned=True)


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


# --- the transports ----------------------------------------------------------------------------


class _Wrapper:
    def __init__(
        self,
        transport: Any,
        *,
        test_id_header: str | None = DEFAULT_TEST_ID_HEADER,
        slug_header: str | None = DEFAULT_SLUG_HEADER,
        llm_hosts: Mapping[str, str] | None = None,
        llm_paths: Mapping[str, str] | None = None,
        detect_llm: bool = True,
        forward_hosts: Iterable[str] | None = None,
    ) -> None:
        #: The wrapped transport, which does the actual I/O.
        self.transport = transport
        self._options = _Options.build(
            test_id_header=test_id_header,
            slug_header=slug_header,
            llm_hosts=llm_hosts,
            llm_paths=llm_paths,
            detect_llm=detect_llm,
            forward_hosts=forward_hosts,
        )

    def __getattr__(self, name: str) -> Any:
        # Anything else (a pool, a proxy setting) is the wrapped transport's.
        if name == "transport":
            raise AttributeError(name)
        return getattr(self.transport, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transport!r})"


class CvdiagTransport(_Wrapper):
    """Wraps a sync httpx or httpx2 transport: ``httpx.Client(transport=CvdiagTransport(t))``.

    Options: ``test_id_header`` / ``slug_header`` (None to send neither), ``llm_hosts``
    (host → provider, merged over the defaults), ``llm_paths`` (path ending → assumed provider,
    replacing the defaults), ``detect_llm`` (False: headers only), ``forward_hosts`` (hosts
    that receive the test id and slug besides local ones: names, IP addresses, ``*.suffix``,
    ``*`` for all; None takes ``Settings.forward_hosts`` / ``CVDIAG_FORWARD_HOSTS``).
    """

    def handle_request(self, request: Any) -> Any:
        exchange = _before(request, self._options)
        if exchange is None:
            return self.transport.handle_request(request)
        try:
            response = self.transport.handle_request(request)
        except BaseException as exc:
            exchange.failed(exc)
            raise
        exchange.attach(response, sync=True)
        return response

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> CvdiagTransport:
        self.transport.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        self.transport.__exit__(exc_type, exc, tb)


class AsyncCvdiagTransport(_Wrapper):
    """Wraps an async httpx or httpx2 transport (``AsyncHTTPTransport``); options as
    ``CvdiagTransport``."""

    async def handle_async_request(self, request: Any) -> Any:
        exchange = _before(request, self._options)
        if exchange is None:
            return await self.transport.handle_async_request(request)
        try:
            response = await self.transport.handle_async_request(request)
        except BaseException as exc:
            exchange.failed(exc)
            raise
        exchange.attach(response, sync=False)
        return response

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> AsyncCvdiagTransport:
        await self.transport.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        await self.transport.__aexit__(exc_type, exc, tb)


def instrument_httpx(
    client: _C,
    *,
    test_id_header: str | None = DEFAULT_TEST_ID_HEADER,
    slug_header: str | None = DEFAULT_SLUG_HEADER,
    llm_hosts: Mapping[str, str] | None = None,
    llm_paths: Mapping[str, str] | None = None,
    detect_llm: bool = True,
    forward_hosts: Iterable[str] | None = None,
) -> _C:
    """Instrument an httpx or httpx2 ``Client`` / ``AsyncClient`` in place; returns it.

    Its transport and mounted transports are wrapped once: instrumenting again changes nothing.
    """
    library = _library_of(client)
    if library is not None and isinstance(client, library.AsyncClient):
        wrapper: type[_Wrapper] = AsyncCvdiagTransport
    elif library is not None and isinstance(client, library.Client):
        wrapper = CvdiagTransport
    else:
        raise TypeError(
            f"instrument_httpx expects an httpx or httpx2 Client or AsyncClient,"
            f" not {type(client).__qualname__}"
        )

    def wrap(transport: Any) -> Any:
        if transport is None or isinstance(transport, _Wrapper):
            return transport
        return wrapper(
            transport,
            test_id_header=test_id_header,
            slug_header=slug_header,
            llm_hosts=llm_hosts,
            llm_paths=llm_paths,
            detect_llm=detect_llm,
            forward_hosts=forward_hosts,
        )

    target: Any = client
    target._transport = wrap(target._transport)
    target._mounts = {pattern: wrap(mounted) for pattern, mounted in target._mounts.items()}
    return client
