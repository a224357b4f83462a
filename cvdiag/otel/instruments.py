"""The bridge's metric instruments: the GenAI client histograms and the aborted-stream counter.

``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` for every LLM call;
``gen_ai.client.operation.time_to_first_chunk`` and ``…time_per_output_chunk`` for streamed
ones, with the same attributes as the duration (``genai.metric_attributes``). Names and advised
bucket boundaries come from ``cvdiag.core.conventions``; what a call recorded, from its
``CallView``. docs/opentelemetry.md says when each is recorded and how.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cvdiag.core import conventions as sc
from cvdiag.otel import genai as otel_genai

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

    from cvdiag.otel.genai import CallView


def streaming_times(
    call: CallView, seconds: float, error_class: str | None
) -> tuple[float | None, float | None]:
    """The streamed call's time to first chunk and mean time per output chunk, in seconds.

    Both exist only for a stream: ``first_chunk_at`` is set for an SSE body alone (or by hand,
    by ``mark_first_chunk``), so a JSON answer has neither. An HTTP error status has neither
    either: its body is no chunk of an answer. A stream that failed after its first chunk (cut,
    timed out, an error event in a 200) did measure its time to first chunk, and keeps it: the
    point then carries ``error.type``, so a dashboard can leave it out, and slow first chunks of
    calls that later timed out do not vanish from the tail.

    cvdiag does not time each chunk (nothing is kept per chunk on the outbound path), so the
    time per output chunk is one honest mean per call, not a point per chunk: the time from the
    first chunk to the call's end (``seconds`` runs from start to end), shared among the output
    tokens after the first, as the provider counted them (``response_token_count``). It takes
    tokens for chunks: right where a provider streams about one token a chunk (OpenAI's Chat
    Completions), below the real gap where a chunk carries several (Anthropic's deltas). Only a
    call that succeeded with two output tokens or more has one: a failed stream's token count and
    last gap are unknown.
    """
    started, first = call.started_at, call.first_chunk_at
    if started is None or first is None:
        return None, None
    if error_class is not None and otel_genai.error_type(error_class) != error_class:
        return None, None  # ``HTTP429``: an error status, not a stream that broke
    to_first = max(0.0, first - started)
    tokens = call.response_token_count
    if error_class is not None or tokens is None or tokens < 2:
        return to_first, None
    return to_first, max(0.0, seconds - to_first) / (tokens - 1)


class Instruments:
    """The histograms and the counter, made once per bridge on the global meter."""

    def __init__(self, meter: Meter) -> None:
        names = sc.metric_names()
        # The conventions' advised boundaries: the SDK's defaults (0 to 10 000) suit
        # milliseconds, and would put every LLM call's seconds in their first bucket or two.
        seconds = sc.SECONDS_BUCKETS
        self._duration = meter.create_histogram(
            names.duration,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=seconds,
        )
        self._tokens = meter.create_histogram(
            names.token_usage,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=sc.TOKEN_BUCKETS,
        )
        self._to_first_chunk = meter.create_histogram(
            names.time_to_first_chunk,
            unit="s",
            description="Time from the request to the first chunk of a streamed response",
            explicit_bucket_boundaries_advisory=seconds,
        )
        self._per_output_chunk = meter.create_histogram(
            names.time_per_output_chunk,
            unit="s",
            description="Mean time per output chunk after the first, one point per streamed call",
            explicit_bucket_boundaries_advisory=seconds,
        )
        self._aborted = meter.create_counter(
            "cvdiag.stream.aborted",
            unit="{stream}",
            description="Streams that ended before their body was complete, by termination_kind",
        )

    def record_call(self, call: CallView, seconds: float, error_class: str | None) -> None:
        """Every metric an ended LLM call has, each with the duration's attributes."""
        attributes = otel_genai.metric_attributes(call, error_class)
        self._duration.record(seconds, attributes)
        for token_type, count in otel_genai.tokens(call).items():
            self._tokens.record(count, {**attributes, sc.GEN_AI_TOKEN_TYPE: token_type})
        to_first, per_chunk = streaming_times(call, seconds, error_class)
        if to_first is not None:
            self._to_first_chunk.record(to_first, attributes)
        if per_chunk is not None:
            self._per_output_chunk.record(per_chunk, attributes)

    def record_abort(self, termination_kind: str) -> None:
        self._aborted.add(1, {"termination_kind": termination_kind})
