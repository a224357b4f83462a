"""``CvdiagMiddleware``: pure ASGI; tells each HTTP request's and WebSocket's story.

The middleware class is thin: it decides once per request whether cvdiag is on, builds a
per-request exchange object holding all the state, sets the request context and runs the app
with the exchange's wrapped ``receive`` and ``send``. Everything cvdiag does inside a request
runs under one guard: a failure there is counted (``record_failure("middleware", …)``), the
exchange goes quiet, and the request proceeds as if cvdiag were absent. The app's own exceptions
pass through unchanged.

See docs/streaming.md for every boundary emitted, when, and the ``termination_kind`` values.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal

from starlette.types import ASGIApp, Receive, Scope, Send

from cvdiag.asgi.headers import (
    CONTENT_LENGTH,
    EDGE,
    PATH_MAX,
    content_length,
    demo_name,
    edge_value,
)
from cvdiag.asgi.http_exchange import HTTPExchange
from cvdiag.asgi.lifespan import flushing_at_shutdown
from cvdiag.asgi.tracing import TRACED, UNTRACED, annotate_request, finish_request
from cvdiag.asgi.websocket_exchange import WebSocketExchange
from cvdiag.core.context import (
    _STATE,
    RequestContext,
    remember_request,
    reset_context,
    set_context,
)
from cvdiag.core.guard import record_failure, say
from cvdiag.core.settings import Settings
from cvdiag.pipeline import emitter as _emitters
from cvdiag.pipeline.emitter import Emitter, get_emitter
from cvdiag.pipeline.template import lines_for
from cvdiag.schema.ids import adopt_test_id, new_span_id, new_uuid7, sanitize_slug
from cvdiag.schema.vocabulary import EDGE_HEADER_KEYS, Tier
from cvdiag.scopes.until_response import release
from cvdiag.scrubbing.redact import scrub, scrub_head, scrub_text

try:  # mypyc reads the decorator when it compiles; run, it changes nothing, and is optional
    from mypy_extensions import mypyc_attr
except ImportError:  # not a dependency (a TYPE_CHECKING else-branch would raise, compiled)

    def mypyc_attr(*_: object, **__: object) -> Any:  # type: ignore[misc]
        return lambda cls: cls


if TYPE_CHECKING:
    from cvdiag.pipeline.template import RequestLines


__all__ = ["CvdiagMiddleware"]

_new_context: Final = partial(tuple.__new__, RequestContext)


# Compiled, a class takes no Python subclass unless it says so: an app's own must work too.
@mypyc_attr(allow_interpreted_subclasses=True)
class CvdiagMiddleware:
    """Pure-ASGI middleware emitting the request, stream and error boundaries of each request.

    ``settings=None`` follows the process-wide emitter (``configure()`` may be called after the
    app is built); given settings, the middleware owns an emitter built from them once.
    """

    def _adopt(self, raw: str | bytes | None) -> str:
        """An inbound test id as the request's: a UUIDv7 as-is, else a join key. The showcase
        face's override mints a UUIDv7 (a method: compiled, no class attribute is overridden)."""
        return adopt_test_id(raw)

    def __init__(
        self,
        app: ASGIApp,
        *,
        slug: str | None = None,
        settings: Settings | None = None,
        exclude_paths: Iterable[str | re.Pattern[str]] = (),
        slug_headers: Iterable[str] = ("x-aimock-context",),
        test_id_headers: Iterable[str] = ("x-test-id",),
        echo_test_id: bool = True,
    ) -> None:
        self.app = app
        self._emitter = Emitter(settings) if settings is not None else None
        self._slug = sanitize_slug(slug) if slug is not None else None
        if slug is not None and self._slug is None:
            say(f"CvdiagMiddleware: slug {scrub(slug)[:64]!r} is not a valid slug; ignored")
        exact: set[str] = set()
        patterns: list[re.Pattern[str]] = []
        for item in (
            (exclude_paths,) if isinstance(exclude_paths, (str, re.Pattern)) else exclude_paths
        ):
            if isinstance(item, re.Pattern):
                patterns.append(item)
            else:
                exact.add(item)
        self._exclude_exact = frozenset(exact)
        self._exclude_patterns = tuple(patterns)
        self._slug_headers = tuple(h.strip().lower().encode("latin-1") for h in slug_headers)
        self._test_id_headers = tuple(h.strip().lower().encode("latin-1") for h in test_id_headers)
        #: The response tells the client its test id in the header it would send it in.
        self._echo = self._test_id_headers[0] if echo_test_id and self._test_id_headers else None
        # Not request state: the tier's answers, recomputed whenever the emitter or tier changes.
        self._allowed: tuple[Emitter, Tier, tuple[bool, bool, bool]] | None = None
        self._wanted = frozenset(
            (*self._slug_headers, *self._test_id_headers, *EDGE, CONTENT_LENGTH)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        emitter = self._emitter or _emitters._emitter or get_emitter()
        if not emitter.enabled:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "lifespan":
            await self.app(scope, receive, flushing_at_shutdown(send, emitter))
            return
        bridge = emitter.otel
        # The request runs inside this coroutine, not one more awaited from it: every turn of
        # a stream's event loop resumes each coroutine between the server and the app.
        with (
            bridge.server_span(scope)
            if bridge is not None and scope["type"] in TRACED and bridge.tracing()
            else UNTRACED
        ) as (span, owned):
            exchange: HTTPExchange | WebSocketExchange | None = None
            try:
                exchange = self._begin(scope, emitter, receive, send)
                if span is not None and exchange is not None:
                    annotate_request(span, exchange.ctx)
            except Exception as exc:
                record_failure("middleware", exc)
            if exchange is None:
                await self.app(scope, receive, send)
                return
            token = set_context(exchange.ctx)
            state_token = _STATE.set(exchange.state)
            own = _emitters._REQUEST_EMITTER.set(emitter) if self._emitter is not None else None
            failure: BaseException | None = None
            try:
                await self.app(scope, exchange.receive, exchange.send)
            except BaseException as exc:
                failure = exc
                exchange.finish(exc)
                raise
            else:
                exchange.finish(None)
            finally:
                if exchange.state.held is not None:
                    release(exchange.state, failure)
                _STATE.reset(state_token)
                reset_context(token)
                if own is not None:
                    _emitters._REQUEST_EMITTER.reset(own)
                if span is not None and owned:
                    finish_request(span, scope, exchange.status, failure)

    def _allows(self, emitter: Emitter) -> tuple[bool, bool, bool]:
        """What the emitter's tier keeps of ingress, first_byte and event; cached per tier."""
        cached = self._allowed
        tier = emitter.tier
        if cached is not None and cached[0] is emitter and cached[1] is tier:
            return cached[2]
        answers = (
            emitter.allows("backend.request.ingress"),
            emitter.allows("backend.sse.first_byte"),
            emitter.allows("backend.sse.event"),
        )
        self._allowed = (emitter, tier, answers)
        return answers

    def _excluded(self, path: str) -> bool:
        if path in self._exclude_exact:
            return True
        return any(pattern.fullmatch(path) for pattern in self._exclude_patterns)

    def _begin(
        self, scope: Scope, emitter: Emitter, receive: Receive, send: Send
    ) -> HTTPExchange | WebSocketExchange | None:
        """The request's exchange, its context and its ingress; None to pass through."""
        # Servers pass a dict: read as one, compiled, each read is a dictionary lookup, not a
        # method call (any other mapping is read from a copy of it).
        fields: dict[str, Any] = scope if type(scope) is dict else dict(scope)
        kind = fields["type"]
        if kind == "http":
            cls: type[HTTPExchange | WebSocketExchange] = HTTPExchange
        elif kind == "websocket":
            cls = WebSocketExchange
        else:
            return None  # lifespan and unknown scope types are not ours
        path = fields.get("path") or "/"
        # Under a root path (uvicorn --root-path, a mount) scope["path"] includes it; routes,
        # exclusions and the demo name are the app's own path.
        root = fields.get("root_path")
        local = path[len(root) :] or "/" if root and path.startswith(root) else path
        if (self._exclude_exact or self._exclude_patterns) and self._excluded(local):
            return None
        start = time.perf_counter()
        wanted = self._wanted
        found: dict[bytes, Any] = {}  # values as the server hands them: Any, never checked
        for name, value in fields.get("headers") or ():
            if name in wanted and name not in found:
                found[name] = value
        test_id: str | None = None
        for name in self._test_id_headers:
            if name in found:
                test_id = self._adopt(found[name])
                break
        slug = self._slug
        if slug is None:
            for name in self._slug_headers:
                if name in found:
                    slug = sanitize_slug(found[name])
                    if slug is not None:
                        break
        span_id = new_span_id()
        if emitter.otel is None:
            trace_id = new_uuid7()  # as ``Emitter.new_trace_id`` mints it, without its call
            # A request no test sent is its own test: its trace id is its test id too (one
            # UUIDv7 minted, not two).
            own_test_id = test_id or trace_id
        else:  # the current OpenTelemetry trace's id where there is one: 32 hex, no UUIDv7
            trace_id = emitter.new_trace_id()
            own_test_id = test_id or new_uuid7()
        # Built as the tuple it is: NamedTuple's keyword __new__ costs four times as much.
        ctx = _new_context(
            (
                own_test_id,
                trace_id,
                slug or "unknown",  # slug
                demo_name(local),  # demo
                span_id,  # span_id
            )
        )
        allow_ingress, allow_first_byte, allow_events = self._allows(emitter)
        #: The request's templates, made for the ingress or (False) at its first envelope.
        lines: RequestLines | Literal[False] | None = False
        # The request's edge headers, at every tier: the ingress carries them, and so does the
        # terminal (with the response's), so a proxy or Cloudflare shows at the default tier too.
        # ``found`` holds only the few wanted headers the request has: usually none of these.
        edge: dict[str, str | None] | None = None
        for raw, value in found.items():
            key = EDGE.get(raw)
            if key is not None:
                if edge is None:
                    edge = dict.fromkeys(EDGE_HEADER_KEYS)
                edge[key] = edge_value(value)
        if allow_ingress:
            method = "WEBSOCKET" if kind == "websocket" else str(fields.get("method", ""))
            if len(method) > 32:  # h11 takes any token as a method: scrubbed, then cut
                method = scrub_head(method, 32)
            path = scrub_text(path, PATH_MAX)  # scrubbed, then cut
            length = content_length(found.get(CONTENT_LENGTH))
            lines = lines_for(emitter, ctx)  # ``Emitter.lines_for``, with no Python call
            if lines is None or not lines.ingress(span_id, method, path, length, edge):
                emitter.emit(
                    "backend.request.ingress",
                    outcome="info",
                    metadata={"method": method, "path": path, "content_length": length},
                    context=ctx,
                    span_id=span_id,
                    parent_span_id=None,
                    edge_headers=edge,
                )
        exchange = cls(emitter, ctx, receive, send, start, allow_first_byte, allow_events)
        exchange.request_lines = lines
        exchange.edge = edge
        if isinstance(exchange, HTTPExchange) and fields.get("method") == "HEAD":
            exchange.head = True
        exchange.echo = self._echo
        if test_id is not None:  # a sent id can be adopted by work the request starts elsewhere
            remember_request(ctx, exchange.state)
        return exchange
