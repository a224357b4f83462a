"""What the emitter and the producers ask of a tracing bridge.

The OpenTelemetry bridge (``cvdiag.otel.bridge.OtelBridge``) implements ``Bridge``; the emitter,
the scopes and the middleware know it only by this protocol (``cvdiag.pipeline.assembly`` builds
it when ``CVDIAG_OTEL`` asks), and it knows a call only by ``cvdiag.otel.genai.CallView``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from cvdiag.otel.genai import CallView
    from cvdiag.providers import RequestFacts


class Bridge(Protocol):
    """A tracing bridge: the request's server span, agent and LLM spans, abort counts."""

    def tracing(self) -> bool:
        """Whether a real tracer provider is installed (else spans cost without a reader)."""
        ...

    def exporting_at_start(self) -> bool:
        """``tracing()`` for the startup line, which claims export only when it is true; when
        false, the bridge says at the first request whether export started or nothing will be."""
        ...

    def server_span(self, scope: Mapping[str, Any]) -> AbstractContextManager[tuple[Span, bool]]:
        """The request's server span: an outer instrumentation's, or one of the bridge's own
        (the bool says whether the bridge owns it)."""
        ...

    def current_trace_id(self) -> str | None:
        """The current span's trace id (32 hex), so stdout and traces join; None outside one."""
        ...

    def start_agent_span(self, agent_name: str, model_id: str | None) -> Span | None: ...

    def start_llm_span(
        self, provider: str, model: str, facts: RequestFacts | None
    ) -> Span | None: ...

    def end_llm_call(
        self, call: CallView, span: Span | None, seconds: float, error_class: str | None
    ) -> None: ...

    def record_abort(self, termination_kind: str) -> None: ...
