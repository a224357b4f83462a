"""cvdiag under any async library, and a late-response look that takes nothing not its own.

Real servers on 127.0.0.1 with real httpx clients: uvicorn (asyncio), hypercorn on asyncio, and
hypercorn's trio worker, where the app, its lifespan and cvdiag run under trio with no asyncio
loop at all. The apps here use anyio, as Starlette does, so the same app runs on every server.

- A client that left while a plain endpoint waited is found gone as the late response starts
  (``left_before_response``), with no warning, on every server; the disconnect the look took is
  what the app's next ``receive`` gets.
- The look never takes a body chunk from a reader outside cvdiag: a ``BaseHTTPMiddleware`` whose
  ``dispatch`` reads the rest of the body after ``call_next`` gets every byte.
- Odd values on ``receive`` and ``send`` (None, not a mapping, no "type") are the host's business:
  the app gets them as they came, and the server's own error, not one of cvdiag's.
- Lifespan shutdown writes what is queued before the server hears it is complete; a queued file
  sink's lines arrive under trio too (written by its thread: there is no asyncio loop).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response

from cvdiag import CvdiagMiddleware, FileSink, MemorySink, Settings, configure, get_emitter
from cvdiag.asgi.http_exchange import PROBE_AFTER_S
from cvdiag.core import guard
from cvdiag.pytest_plugin import CvdiagEvents
from tests.support.servers import (
    serve_hypercorn,
    serve_hypercorn_trio,
    serve_uvicorn,
    serve_uvicorn_lifespan,
)

pytest.importorskip("trio")

SERVERS: dict[str, Callable[[Any], AbstractContextManager[str]]] = {
    "uvicorn": serve_uvicorn,
    "hypercorn": serve_hypercorn,
    "hypercorn-trio": serve_hypercorn_trio,
}
servers = pytest.mark.parametrize("server", list(SERVERS))
#: The same, with uvicorn's lifespan on (the helper above turns it off, as ``cvdiag demo`` does).
WITH_LIFESPAN = {**SERVERS, "uvicorn": serve_uvicorn_lifespan}


def _lifespan_too(app: Any) -> Any:
    """A bare ASGI app that also answers the lifespan protocol (hypercorn's trio worker waits
    for its startup to complete)."""

    async def with_lifespan(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    return with_lifespan


#: A response this late is preceded by the middleware's look at ``receive``; the wait also gives
#: the server time to see a client's close before the response starts.
LATE_S = PROBE_AFTER_S + 0.1


async def _wait(event: threading.Event) -> None:
    """Wait for a thread's event without blocking the server's loop (asyncio or trio)."""
    while not event.is_set():
        await anyio.sleep(0.005)


def _terminal(events: CvdiagEvents) -> dict[str, Any]:
    """The request's one terminal, once the server has finished it (the client may not wait)."""
    deadline = time.monotonic() + 20  # not a threshold: a stuck request fails here, not hangs
    while True:
        found = events.of("backend.response.complete") + events.of("backend.sse.aborted")
        if found:
            time.sleep(0.05)  # a second terminal, were there one, would come right behind
            found = events.of("backend.response.complete") + events.of("backend.sse.aborted")
            assert len(found) == 1, found
            return dict(found[0])
        assert time.monotonic() < deadline, "no terminal"
        time.sleep(0.01)


# --- a client that left while the app worked ----------------------------------------------------


def _waiting_endpoint(read: threading.Event, gone: threading.Event, after: list[Any]) -> Any:
    """Reads the body, waits (its model, say) until the client has given up, answers late,
    then reads ``receive`` once more, as an app listening for the disconnect would."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        read.set()
        await _wait(gone)
        await anyio.sleep(LATE_S)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"late " + body})
        after.append(await receive())

    return _lifespan_too(app)


@servers
def test_a_client_gone_before_a_late_response_is_found_on_every_server(
    cvdiag_events: CvdiagEvents, server: str
) -> None:
    events = cvdiag_events("verbose")
    read, gone, after = threading.Event(), threading.Event(), []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with SERVERS[server](CvdiagMiddleware(_waiting_endpoint(read, gone, after))) as base:
            # The app answers only once told the client is gone: the read timeout is certain.
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(
                    f"{base}/ask",
                    content=b"question",
                    headers={"x-test-id": "gone-early"},
                    timeout=httpx.Timeout(10, read=0.2),
                )
            assert read.is_set()
            gone.set()
            terminal = _terminal(events)
            deadline = time.monotonic() + 20
            while not after:
                assert time.monotonic() < deadline
                time.sleep(0.01)
    assert terminal["boundary"] == "backend.sse.aborted", terminal
    meta = terminal["metadata"]
    assert (meta["termination_kind"], meta["termination_cause"]) == ("rst", "left_before_response")
    # What the look took reached the app's next receive, unchanged.
    assert after == [{"type": "http.disconnect"}]
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], caught


@servers
def test_a_late_response_to_a_client_still_there_completes(
    cvdiag_events: CvdiagEvents, server: str
) -> None:
    events = cvdiag_events("verbose")
    read, gone, after = threading.Event(), threading.Event(), []
    gone.set()  # the endpoint does not wait for anything: the client stays
    with SERVERS[server](CvdiagMiddleware(_waiting_endpoint(read, gone, after))) as base:
        answer = httpx.post(f"{base}/ask", content=b"question", timeout=10)
        terminal = _terminal(events)
    assert (answer.status_code, answer.text) == (200, "late question")
    assert terminal["boundary"] == "backend.response.complete", terminal
    assert terminal["metadata"]["content_length"] == len(answer.content)


# --- the look never takes what an outer reader wants ------------------------------------------


@servers
def test_an_outer_base_http_middleware_reads_the_rest_of_the_body_after_a_late_look(
    cvdiag_events: CvdiagEvents, server: str
) -> None:
    """The app reads one chunk and answers late; the outer ``dispatch`` reads the rest after
    ``call_next``. A look at that moment would take the outer reader's chunk."""
    events = cvdiag_events("verbose")
    app_read = threading.Event()

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        first = await receive()
        app_read.set()
        await anyio.sleep(LATE_S)  # meanwhile the client sends the rest
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"app got " + first["body"]})

    async def dispatch(request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        rest = b"".join([chunk async for chunk in request.stream()])
        said = b"".join([chunk async for chunk in response.body_iterator])  # type: ignore[attr-defined]
        return Response(said + b"; outer got " + rest)

    def body() -> Iterator[bytes]:
        yield b"1"
        assert app_read.wait(10)  # the app read the first chunk alone
        yield b"2"

    app = _lifespan_too(BaseHTTPMiddleware(CvdiagMiddleware(endpoint), dispatch=dispatch))
    with SERVERS[server](app) as base:
        answer = httpx.post(f"{base}/", content=body(), timeout=10)
        terminal = _terminal(events)
    assert (answer.status_code, answer.text) == (200, "app got 1; outer got 2")
    assert terminal["boundary"] == "backend.response.complete", terminal


# --- odd values on receive and send -------------------------------------------------------------

#: What an outer layer might hand the app on ``receive``: not a mapping, no type, nothing.
ODD = (None, "not a message", 42, {"no": "type"}, {"type": None})


def _odd_outer(app: Any) -> Any:
    """Hands the app each odd value on ``receive`` first, then the server's own messages."""

    async def outer(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        queue = list(ODD)

        async def odd_receive() -> Any:
            return queue.pop(0) if queue else await receive()

        await app(scope, odd_receive, send)

    return _lifespan_too(outer)


def _odd_endpoint(got: list[Any], raised: list[str], *, odd_send: bool) -> Any:
    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        for _ in ODD:
            got.append(await receive())
        if odd_send:
            try:
                await send(None)
            except Exception as exc:  # the server's word on a message that is not one
                raised.append(type(exc).__name__)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return endpoint


@servers
def test_odd_values_on_receive_and_send_are_the_hosts_business(
    cvdiag_events: CvdiagEvents, server: str
) -> None:
    cvdiag_events("verbose")
    # uvicorn refuses a send of None with an exception and goes on; hypercorn drops the
    # connection, so there only receive's odd values are tried.
    odd_send = server == "uvicorn"
    bare_got: list[Any] = []
    bare_raised: list[str] = []
    with SERVERS[server](
        _odd_outer(_odd_endpoint(bare_got, bare_raised, odd_send=odd_send))
    ) as base:
        assert httpx.get(f"{base}/", timeout=10).text == "ok"
    got: list[Any] = []
    raised: list[str] = []
    app = _odd_outer(CvdiagMiddleware(_odd_endpoint(got, raised, odd_send=odd_send)))
    with SERVERS[server](app) as base:
        answer = httpx.get(f"{base}/", timeout=10)
    assert answer.text == "ok"
    assert got == list(ODD)
    assert all(a is b for a, b in zip(got, ODD, strict=True))
    assert raised == bare_raised  # the server's own error, as without cvdiag
    assert bare_got == got


# --- the lifespan and the sinks -----------------------------------------------------------------


class _SlowFileSink(FileSink):
    """A slow log pipe: without a flush at shutdown, nothing is written in time."""

    def _write_bytes(self, data: bytes) -> None:
        time.sleep(0.2)
        super()._write_bytes(data)


@servers
def test_lifespan_shutdown_writes_what_is_queued_on_every_server(
    server: str, tmp_path: Path
) -> None:
    log = tmp_path / "cvdiag.log"
    written_at_completion: list[int] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        for _ in range(20):
            get_emitter().emit("backend.error.caught")

    inner = Starlette(lifespan=lifespan)
    inner.add_middleware(CvdiagMiddleware)

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        """Sees what the server is told, as the server would: the lines written by then."""

        async def seen(message: Any) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                written_at_completion.append(log.read_bytes().count(b"CVDIAG {"))
            await send(message)

        await inner(scope, receive, seen)

    failed = guard.failures["middleware"]
    configure(Settings(enabled=True, tier="verbose"), sinks=[_SlowFileSink(log)])
    try:
        with WITH_LIFESPAN[server](recording) as base:
            httpx.get(f"{base}/nowhere", timeout=10)
            get_emitter().flush()
    finally:
        configure(Settings(), sinks=[MemorySink()])
    # The request's two lines, then the twenty of shutdown: all out before completion.
    assert written_at_completion == [22]
    assert guard.failures["middleware"] == failed


@servers
def test_a_queued_file_sinks_lines_arrive_on_every_server(server: str, tmp_path: Path) -> None:
    """Under trio there is no asyncio loop to drain from: the sink's thread writes."""
    log = tmp_path / "cvdiag.log"
    app = Starlette()
    app.add_middleware(CvdiagMiddleware)
    configure(Settings(enabled=True, tier="verbose"), sinks=[FileSink(log)])
    try:
        with SERVERS[server](app) as base:
            httpx.get(f"{base}/nowhere", headers={"x-test-id": "arrives"}, timeout=10)
            deadline = time.monotonic() + 20  # not a threshold: the lines come, or it fails
            while log.read_bytes().count(b'"test_id":"arrives"') < 2 if log.exists() else True:
                assert time.monotonic() < deadline, "the lines never arrived"
                time.sleep(0.01)
    finally:
        configure(Settings(), sinks=[MemorySink()])
    text = log.read_text()
    assert '"boundary":"backend.request.ingress"' in text
    assert '"boundary":"backend.response.complete"' in text
