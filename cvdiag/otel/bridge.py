"""The OpenTelemetry bridge: cvdiag's boundaries as spans and metrics.

The same boundaries as span events come from the sink in ``span_events.py``, which the emitter
hands every envelope; the bridge is asked only per request, per agent and per LLM call.

Only opentelemetry-api is imported. With no SDK configured the API hands out non-recording
spans; the bridge checks for that once per request and then does nothing, and with
``CVDIAG_OTEL`` off it is never constructed at all.

The startup line claims span events only when an SDK tracer provider is set; one is often set
later (the app's lifespan), so the first request checks again and says once whether export
started or nothing will be exported (docs/opentelemetry.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Span, SpanKind
from opentelemetry.trace.status import Status, StatusCode

from cvdiag.core import conventions as sc
from cvdiag.core.guard import record_failure, say
from cvdiag.otel import genai as otel_genai
from cvdiag.otel.instruments import Instruments
from cvdiag.scrubbing.redact import scrub, scrub_identifier

if TYPE_CHECKING:
    from cvdiag.core.context import RequestContext
    from cvdiag.otel.genai import CallView
    from cvdiag.providers import RequestFacts

_SCOPE: Final = "cvdiag"
_UNCONFIGURED_METERS: Final = frozenset({"_ProxyMeterProvider", "NoOpMeterProvider"})
NOT_EXPORTING: Final = (
    "CVDIAG_OTEL=1 but no OpenTelemetry SDK tracer provider is configured: nothing will be"
    " exported; see docs/opentelemetry.md"
)
LATE: Final = "also writing to opentelemetry span events (a tracer provider was set after start)"
_first_request_said = False  # once per process, however many emitters are built


def _scrubbed(value: str, limit: int = 256) -> str:
    """Names and paths as span names and attributes get them: scrubbed and bounded, like every
    string an envelope carries (an agent named after its user's API key is not unheard of).
    Names are identifiers: kept whole or replaced by their digest placeholder, as in envelopes."""
    if limit > 256:
        return scrub(value, limit=limit)
    return scrub_identifier(value)[:limit]


def _tracing_configured() -> bool:
    provider = trace.get_tracer_provider()
    if isinstance(provider, ProxyTracerProvider):
        # The proxy delegates once an SDK provider is set; until then it is a no-op.
        return False
    return not isinstance(provider, NoOpTracerProvider)


def attach_span(span: Span) -> object:
    """Make ``span`` current (in this context); returns the token for ``detach``."""
    return otel_context.attach(trace.set_span_in_context(span))


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type, unused-ignore]


def trace_id_of_current_span() -> str | None:
    """The current span's trace id as 32 hex digits, when a valid span context exists."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return trace.format_trace_id(span_context.trace_id)


class OtelBridge:
    """Spans for requests, agents and LLM calls; metrics for LLM calls (duration, tokens and, for
    a stream, time to first chunk and per output chunk) and aborted streams."""

    def __init__(self) -> None:
        from cvdiag.core.version import __version__

        self._check_at_first_request = False  # the startup line did not claim export

        self._tracer = trace.get_tracer(_SCOPE, __version__)
        self._instruments = Instruments(metrics.get_meter(_SCOPE, __version__))

    @staticmethod
    def current_trace_id() -> str | None:
        return trace_id_of_current_span()

    def tracing(self) -> bool:
        configured = _tracing_configured()
        if self._check_at_first_request:
            self._say_at_first_request(configured)
        return configured

    def exporting_at_start(self) -> bool:
        """For the startup line; when false, the first request checks again and says."""
        self._check_at_first_request = not _tracing_configured()
        return not self._check_at_first_request

    def _say_at_first_request(self, configured: bool) -> None:
        global _first_request_said
        self._check_at_first_request, said, _first_request_said = False, _first_request_said, True
        if not said:
            say(LATE if configured else NOT_EXPORTING)

    # -- spans ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def server_span(self, scope: Mapping[str, Any]) -> Iterator[tuple[Span, bool]]:
        """The request's SERVER span, current for the block.

        When a server instrumentation (opentelemetry-instrumentation-asgi, Logfire) already made
        one, that span is used and no duplicate is created; else a new span continues the trace
        context the caller sent, extracted with the globally configured propagator. Yields the
        span and whether cvdiag owns it (names it, sets its status, ends it).
        """
        current = trace.get_current_span()
        if current.get_span_context().is_valid and current.is_recording():
            yield current, False
            return
        # A span processor or sampler that raises must not reach the request: guarded, and the
        # yield stays outside any except clause (the app's own exceptions pass through it).
        started: tuple[Span, object] | None = None
        try:
            parent = propagate.extract(scope, getter=_SCOPE_HEADERS)
            method = "WEBSOCKET" if scope.get("type") == "websocket" else scope.get("method", "GET")
            span = self._tracer.start_span(
                _scrubbed(str(method), 32),  # h11 takes any token as a method
                context=parent,
                kind=SpanKind.SERVER,
                attributes=server_attributes(scope),
            )
            started = span, otel_context.attach(trace.set_span_in_context(span, parent))
        except Exception as exc:
            record_failure("otel", exc)
        if started is None:
            yield trace.INVALID_SPAN, False
            return
        span, token = started
        try:
            yield span, True
        finally:
            try:
                otel_context.detach(token)  # type: ignore[arg-type, unused-ignore]
                span.end()
            except Exception as exc:
                record_failure("otel", exc)

    def start_span(self, name: str, kind: SpanKind, attributes: Mapping[str, Any]) -> Span | None:
        """A started span under the current one; the caller makes it current and ends it."""
        if not _tracing_configured():
            return None
        try:
            return self._tracer.start_span(
                name, kind=kind, attributes={k: v for k, v in attributes.items() if v is not None}
            )
        except Exception as exc:  # a failing processor costs the span, never the scope
            record_failure("otel", exc)
            return None

    def start_agent_span(self, agent_name: str, model_id: str | None) -> Span | None:
        """``invoke_agent {agent_name}``, INTERNAL, per the GenAI semantic conventions."""
        agent_name = _scrubbed(agent_name)
        return self.start_span(
            f"invoke_agent {agent_name}",
            SpanKind.INTERNAL,
            {
                sc.GEN_AI_OPERATION_NAME: sc.OP_INVOKE_AGENT,
                sc.GEN_AI_AGENT_NAME: agent_name,
                sc.GEN_AI_REQUEST_MODEL: None if model_id is None else _scrubbed(model_id),
            },
        )

    def start_llm_span(
        self, provider: str, model: str, facts: RequestFacts | None = None
    ) -> Span | None:
        """``{operation} {model}``, CLIENT, per the GenAI semantic conventions."""
        name, attributes = otel_genai.start(provider, model, facts)
        return self.start_span(name, SpanKind.CLIENT, attributes)

    @staticmethod
    def fail(span: Span | None, exc: BaseException) -> None:
        OtelBridge.fail_with(span, type(exc).__qualname__)

    @staticmethod
    def fail_with(span: Span | None, error_type: str) -> None:
        """Mark ``span`` failed with ``error.type`` (no exception message: it may hold secrets)."""
        if span is not None and span.is_recording():
            span.set_attribute(sc.ERROR_TYPE, error_type)
            span.set_status(Status(StatusCode.ERROR))

    # -- metrics ----------------------------------------------------------------------------

    def end_llm_call(
        self, call: CallView, span: Span | None, seconds: float, error_class: str | None
    ) -> None:
        """The call's metrics, and its span's closing attributes; ends the span."""
        try:
            self._instruments.record_call(call, seconds, error_class)
        except Exception as exc:  # a failing metric reader costs the metric, not the span
            record_failure("otel", exc)
        if span is None:
            return
        if call.started_at is not None:
            span.set_attributes(otel_genai.end(call, call.started_at, error_class))
        if error_class is not None:
            self.fail_with(span, otel_genai.error_type(error_class))
        span.end()

    def record_abort(self, termination_kind: str) -> None:
        self._instruments.record_abort(termination_kind)


class _ScopeHeaders(Getter[Mapping[str, Any]]):
    """Reads propagation headers straight from an ASGI scope, bounded in size."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        values = [
            value[:_HEADER_MAX].decode("latin-1")
            for header, value in carrier.get("headers") or ()
            if header.lower() == name
        ]
        return values or None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier.get("headers") or ()]


_SCOPE_HEADERS: Final = _ScopeHeaders()
_HEADER_MAX: Final = 8192


def annotate_request(span: Span, ctx: RequestContext) -> None:
    """Let users find a test id in their tracing backend."""
    if span.is_recording():
        span.set_attribute("cvdiag.test_id", ctx.test_id)
        span.set_attribute("cvdiag.slug", ctx.slug)


def finish_request(
    span: Span, scope: Mapping[str, Any], status: int, failure: BaseException | None
) -> None:
    """What is known of cvdiag's own server span once the app returned: status, route, error."""
    if not span.is_recording():
        return
    if status:
        span.set_attribute("http.response.status_code", status)
    route = getattr(scope.get("route"), "path", None)
    if isinstance(route, str):
        span.set_attribute("http.route", route)
        method = "WEBSOCKET" if scope.get("type") == "websocket" else scope.get("method", "GET")
        span.update_name(f"{_scrubbed(str(method), 32)} {route}")
    if isinstance(failure, Exception):
        OtelBridge.fail(span, failure)
    elif status >= 500:
        span.set_attribute("error.type", str(status))
        span.set_status(Status(StatusCode.ERROR))


def server_attributes(scope: Mapping[str, Any]) -> dict[str, Any]:
    """HTTP semantic-convention attributes known at ingress."""
    server: Sequence[Any] | None = scope.get("server")
    attributes: dict[str, Any] = {
        "http.request.method": scope.get("method", "GET"),
        "url.path": _scrubbed(str(scope.get("path", "")), 2048),
        "url.scheme": scope.get("scheme", "http"),
        "network.protocol.version": scope.get("http_version", "1.1"),
    }
    if server:
        attributes["server.address"] = str(server[0])
        if len(server) > 1 and server[1] is not None:
            attributes["server.port"] = int(server[1])
    return attributes
