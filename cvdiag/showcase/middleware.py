"""``CvdiagBackendMiddleware``: cvdiag's ``CvdiagMiddleware``, as the showcase adds and drives it.

Added with ``app.add_middleware(CvdiagBackendMiddleware)`` it is the pure ASGI middleware, on
the face's emitter (the flag read as each request comes in), with the request's
``_RequestCtx`` at ``request.state.cvdiag`` and the showcase's test-id rule. Driven as a
``BaseHTTPMiddleware`` is (``await mw.dispatch(request, call_next)``), the same exchange is
fed what ``call_next``'s response sends: its start, each chunk of its ``body_iterator`` as it is
read, its end; closing that iterator early (``aclose()``) is the client leaving.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from cvdiag.asgi.http_exchange import HTTPExchange
from cvdiag.asgi.middleware import CvdiagMiddleware
from cvdiag.asgi.websocket_exchange import WebSocketExchange
from cvdiag.core.context import _STATE, reset_context, set_context
from cvdiag.core.guard import record_failure
from cvdiag.pipeline.emitter import Emitter
from cvdiag.showcase.bootstrap import face_emitter
from cvdiag.showcase.context import _RequestCtx, showcase_test_id

__all__ = ["CvdiagBackendMiddleware"]

CallNext = Callable[[Request], Awaitable[Response]]


async def _client_gone() -> Message:
    """What a server's ``receive`` says once the client has left."""
    return {"type": "http.disconnect"}


async def _nowhere(message: Message) -> None:
    """The response is sent by whoever drives ``dispatch``; the exchange only looks."""


class CvdiagBackendMiddleware(CvdiagMiddleware):
    """The showcase's middleware name for cvdiag's middleware (keyword options as its)."""

    # No ``__init__`` of its own: ``CvdiagMiddleware``'s keyword options, typed, are what
    # ``app.add_middleware(CvdiagBackendMiddleware, ...)`` is checked against under mypy.
    def _adopt(self, raw: str | bytes | None) -> str:
        return showcase_test_id(raw)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        face_emitter()  # the flag as this request comes in
        await super().__call__(scope, receive, send)

    def _begin(
        self, scope: Scope, emitter: Emitter, receive: Receive, send: Send
    ) -> HTTPExchange | WebSocketExchange | None:
        exchange = super()._begin(scope, emitter, receive, send)
        if exchange is not None:
            # Starlette's ``request.state`` is this dict: the showcase's endpoints read it there.
            scope.setdefault("state", {})["cvdiag"] = _RequestCtx.from_context(exchange.ctx)
        return exchange

    async def dispatch(self, request: Request, call_next: CallNext) -> Response:
        """``BaseHTTPMiddleware``'s contract: the response of ``call_next``, observed."""
        emitter = face_emitter()
        if not emitter.enabled:
            return await call_next(request)
        exchange: HTTPExchange | WebSocketExchange | None = None
        try:
            exchange = self._begin(request.scope, emitter, _client_gone, _nowhere)
        except Exception as exc:
            record_failure("middleware", exc)
        if not isinstance(exchange, HTTPExchange):
            return await call_next(request)
        token, state_token = set_context(exchange.ctx), _STATE.set(exchange.state)
        try:
            response = await call_next(request)
        except BaseException as exc:
            exchange.finish(exc)
            raise
        finally:
            _STATE.reset(state_token)
            reset_context(token)
        start: Message = {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": response.raw_headers,
        }
        body = getattr(response, "body_iterator", None)
        if body is None:
            await exchange.send(start)
            await exchange.send({"type": "http.response.body", "body": response.body})
            exchange.finish(None)
            return response
        response.body_iterator = _Observed(exchange, start, body, response.charset)  # type: ignore[attr-defined]
        return response


class _Observed:
    """The body iterator ``dispatch`` hands back: ``_observed``'s chunks, and one end however it
    goes. A generator closed before its first chunk was asked for runs none of its code, so
    closing this one then tells the exchange itself: the client left before any byte."""

    def __init__(
        self, exchange: HTTPExchange, start: Message, inner: AsyncIterable[Any], charset: str
    ) -> None:
        self._exchange, self._inner = exchange, inner
        self._chunks = _observed(exchange, start, inner, charset)
        self._started = False

    def __aiter__(self) -> _Observed:
        return self

    def __anext__(self) -> Awaitable[Any]:
        self._started = True
        return self._chunks.__anext__()

    async def aclose(self) -> None:
        if not self._started:
            self._started = True
            await self._exchange.receive()
            await _close(self._inner)
            self._exchange.finish(None)
        await self._chunks.aclose()


async def _close(inner: AsyncIterable[Any]) -> None:
    try:
        close = getattr(inner, "aclose", None)
        if close is not None:
            await close()
    except Exception as exc:
        record_failure("middleware", exc)


async def _observed(
    exchange: HTTPExchange, start: Message, inner: AsyncIterable[Any], charset: str
) -> AsyncGenerator[Any, None]:
    """``inner``, each chunk shown to the exchange before it is handed on."""
    failure: BaseException | None = None
    try:
        await exchange.send(start)
        async for chunk in inner:
            data = chunk if isinstance(chunk, (bytes, memoryview)) else str(chunk).encode(charset)
            await exchange.send(
                {"type": "http.response.body", "body": bytes(data), "more_body": True}
            )
            yield chunk
        await exchange.send({"type": "http.response.body", "body": b"", "more_body": False})
    except GeneratorExit:
        # Closed before its end: whoever read it stopped reading, the client leaving.
        await exchange.receive()
        raise
    except BaseException as exc:
        failure = exc
        raise
    finally:
        await _close(inner)
        exchange.finish(failure)
