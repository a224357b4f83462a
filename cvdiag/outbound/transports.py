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

What is done to each request is in cvdiag/outbound/exchange.py; here are the wrappers, which
hold the options, pass the rest of the transport through, and install themselves on a client.

Neither httpx nor httpx2 is a dependency of cvdiag: nothing here imports them. The library a
client, transport or response belongs to is read from its class's module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Final, TypeVar

from cvdiag.outbound.exchange import Options, begin_exchange, library_of
from cvdiag.providers import DEFAULT_LLM_HOSTS, DEFAULT_LLM_PATHS

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
        self._options = Options.build(
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
        exchange = begin_exchange(request, self._options)
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
        exchange = begin_exchange(request, self._options)
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
    library = library_of(client)
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
