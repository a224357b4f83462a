"""The hooks that hand the probe every request a test's httpx or httpx2 client sends with a
test id: ``Client._send_single_request`` and ``AsyncClient``'s, wrapped on the classes, so the
``cvdiag_test_id`` fixture's clients and the user's own, over the network or an in-process
``ASGITransport``, are all seen with no change to the test.

That method sends one request (each redirect is one) and returns once the response head has
arrived, its body not yet read: the one place that sees the send, the head, a failure before
the head, and the body's stream, which is wrapped in a stream of the library's own class to see
its chunks and how it ended. A request made inside a backend's request in this process (an
in-process app's own outbound call, which forwards the test id too), or while a recorded
request waits for its head in the same context (an ``ASGITransport`` app's own call with
cvdiag's middleware off) belongs to the backend's story, not the client's: it is left alone.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from typing import Any, Final

from cvdiag.core.context import _CURRENT
from cvdiag.core.guard import record_failure
from cvdiag.probe.observed import Observed
from cvdiag.probe.writer import ProbeWriter

#: The header a test id travels in (the backend's middleware reads the same).
HEADER: Final = b"x-test-id"
LIBRARIES: Final = ("httpx", "httpx2")
_METHOD: Final = "_send_single_request"

_writer: ProbeWriter | None = None
#: The writers installed before the one in force (a pytest session run inside another's test,
#: as pytester runs one, installs its own and gives the outer one back when it ends).
_outer: list[ProbeWriter | None] = []
#: (class, its own method) for each class patched, to put back.
_patched: list[tuple[type, Any]] = []
#: Set while a recorded request waits for its head: a request sent under it is the in-process
#: app's own (``ASGITransport`` runs the app in the client's context), not the test's.
_SENDING: ContextVar[bool] = ContextVar("cvdiag_probe_sending", default=False)


def install(writer: ProbeWriter) -> list[str]:
    """Record every request of httpx and httpx2 clients into ``writer`` from now on; returns
    the libraries hooked (those installed whose clients have the method)."""
    global _writer
    _outer.append(_writer)
    _writer = writer
    if _patched:
        return sorted({cls.__module__.partition(".")[0] for cls, _ in _patched})
    hooked = []
    for name in LIBRARIES:
        try:
            library = importlib.import_module(name)
        except ImportError:
            continue
        sync_stream, async_stream = _stream_classes(library)
        sync_client, async_client = library.Client, library.AsyncClient
        if not (hasattr(sync_client, _METHOD) and hasattr(async_client, _METHOD)):
            record_failure("probe", f"{name} has no Client.{_METHOD}: its requests are not seen")
            continue
        _patch(sync_client, _sync_hook(getattr(sync_client, _METHOD), sync_stream))
        _patch(async_client, _async_hook(getattr(async_client, _METHOD), async_stream))
        hooked.append(name)
    return hooked


def uninstall() -> None:
    """The writer installed before the last one records again; with none left, the clients'
    own methods are put back."""
    global _writer
    _writer = _outer.pop() if _outer else None
    if _outer:
        return
    while _patched:
        cls, original = _patched.pop()
        setattr(cls, _METHOD, original)


def _patch(cls: type, hook: Callable[..., Any]) -> None:
    _patched.append((cls, cls.__dict__[_METHOD]))
    setattr(cls, _METHOD, hook)


def _observe(request: Any) -> Observed | None:
    """The request's observation, or None when it is not the test's to record."""
    writer = _writer
    if writer is None or not writer.active or _CURRENT.get() is not None or _SENDING.get():
        return None
    try:
        raw = next((value for key, value in request.headers.raw if key.lower() == HEADER), None)
        if raw is None:
            return None
        state = writer.start(raw)
        return None if state is None else Observed(writer, state, request)
    except Exception as exc:
        record_failure("probe", exc)
        return None


def _sync_hook(original: Callable[..., Any], stream_class: type) -> Callable[..., Any]:
    @functools.wraps(original)
    def _send_single_request(self: Any, request: Any) -> Any:
        observed = _observe(request)
        if observed is None:
            return original(self, request)
        token = _SENDING.set(True)
        try:
            response = original(self, request)
        except BaseException as exc:
            observed.failed(exc, head=False)
            raise
        finally:
            _SENDING.reset(token)
        _follow(response, observed, stream_class)
        return response

    return _send_single_request


def _async_hook(original: Callable[..., Any], stream_class: type) -> Callable[..., Any]:
    @functools.wraps(original)
    async def _send_single_request(self: Any, request: Any) -> Any:
        observed = _observe(request)
        if observed is None:
            return await original(self, request)
        token = _SENDING.set(True)
        try:
            response = await original(self, request)
        except BaseException as exc:
            observed.failed(exc, head=False)
            raise
        finally:
            _SENDING.reset(token)
        _follow(response, observed, stream_class)
        return response

    return _send_single_request


def _follow(response: Any, observed: Observed, stream_class: type) -> None:
    observed.head(response)
    if getattr(response, "is_closed", False):  # read by its transport already: nothing to follow
        observed.complete()
        return
    try:
        response.stream = stream_class(response.stream, observed)
    except Exception as exc:
        observed.complete()  # not followed: say nothing of its end rather than something false
        record_failure("probe", exc)


def _stream_classes(library: Any) -> tuple[type, type]:
    """Body streams of ``library``'s own classes (its responses accept no other) that see each
    chunk and how the body ended, then hand everything on unchanged."""

    class ProbeSyncStream(library.SyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, observed: Observed) -> None:
            self._inner = inner
            self._observed = observed

        @property
        def elapsed(self) -> Any:  # the client's BoundSyncStream keeps the response's time
            return getattr(self._inner, "elapsed", None)

        @elapsed.setter
        def elapsed(self, value: Any) -> None:
            self._inner.elapsed = value

        def __iter__(self) -> Iterator[bytes]:
            try:
                for chunk in self._inner:
                    self._observed.chunk(chunk)
                    yield chunk
            except BaseException as exc:  # GeneratorExit too: the reader stopped early
                self._observed.failed(exc, head=True)
                raise
            self._observed.complete()

        def close(self) -> None:
            self._observed.left_early()  # nothing once the body ended
            self._inner.close()

    class ProbeAsyncStream(library.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, observed: Observed) -> None:
            self._inner = inner
            self._observed = observed

        @property
        def elapsed(self) -> Any:
            return getattr(self._inner, "elapsed", None)

        @elapsed.setter
        def elapsed(self, value: Any) -> None:
            self._inner.elapsed = value

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._inner:
                    self._observed.chunk(chunk)
                    yield chunk
            except BaseException as exc:  # a cancelled task too: the test gave up
                self._observed.failed(exc, head=True)
                raise
            self._observed.complete()

        async def aclose(self) -> None:
            self._observed.left_early()
            await self._inner.aclose()

    return ProbeSyncStream, ProbeAsyncStream
