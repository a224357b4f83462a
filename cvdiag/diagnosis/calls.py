"""One LLM call as the envelopes show it, and the references the classifier's evidence rests on.

``facts.Facts`` builds one ``Call`` per LLM call, joining its start, heartbeats and response on
the start's span id; the rules (``rules``, ``waiting``) read what it had done by a given moment.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cvdiag.diagnosis.describe import describe
from cvdiag.diagnosis.vocabulary import CUT, error_kind
from cvdiag.logs.reading import Record
from cvdiag.schema.vocabulary import Tier

Key = tuple[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Ref:
    """An envelope the evidence rests on, reduced to what is shown."""

    boundary: str
    outcome: str
    key: Key
    where: str
    summary: str

    @classmethod
    def of(cls, record: Record) -> Ref:
        env = record.envelope
        return cls(env["boundary"], env["outcome"], record.key, record.where, describe(env))


#: A streaming call's heartbeat: the beat, its ``chunk_wait_ms`` and the interval before it.
Beat = tuple[Ref, float, float]


@dataclasses.dataclass(slots=True)
class Call:
    """One LLM call: its start, heartbeats and response, joined on the start's span id."""

    span_id: str
    start: Ref | None = None
    provider: str | None = None
    model: str | None = None
    response: Ref | None = None
    outcome: str | None = None
    error_class: str | None = None
    latency_ms: float | None = None
    tokens: float | None = None
    #: ``first_token_delta_ms`` of the response: from the call's start to its first chunk.
    first_token_ms: float | None = None
    heartbeats: int = 0
    max_elapsed_ms: float | None = None
    last_heartbeat: Ref | None = None
    #: The first sign, in the stream, that tokens were flowing while the call was open: a
    #: content event (debug tier), or the stream's first byte after the call started.
    flow_content: Ref | None = None
    flow_byte: Ref | None = None
    #: The longest heartbeat wait written before each of those signs.
    waiting_content_ms: float | None = None
    waiting_byte_ms: float | None = None
    #: The latest heartbeat of a streaming call (``first_token_delta_ms``): the beat, how long
    #: its stream had been waiting on the provider then (``chunk_wait_ms``; 0 when absent: the
    #: app held a chunk) and the interval since the beat before.
    stream_beat: Beat | None = None
    #: ``stream_beat`` as it was when each of the test id's terminals (completion, abort) was
    #: written, by the terminal's key: a call may beat on long after its client left.
    beat_at_end: dict[Key, Beat | None] = dataclasses.field(default_factory=dict)
    #: Heartbeats written before the call's first token (no ``first_token_delta_ms``), and the
    #: longest wait they report: how long the call kept the backend waiting on its model.
    beats_before_token: int = 0
    waited_before_token_ms: float | None = None
    #: The last thing known to reach the client before the call began (its request's ingress,
    #: a byte, an event; None: nothing since the test id's start), and whether bytes had gone
    #: out that the log does not time one by one (then the call's own start is all there is).
    quiet_since: Key | None = None
    quiet_unknown: bool = False
    #: ``finish_reasons`` of the response (the additive key): why the model stopped.
    finish_reasons: list[str] = dataclasses.field(default_factory=list)
    #: ``after_request_end_ms`` of the response (the additive key): how long the call went on
    #: after its request's terminal (a model generating, and billing, after the client left).
    after_request_end_ms: float | None = None
    #: ``provider_error_code``/``_message`` of the response (additive): the error the provider
    #: reported in its body, as written (a mock's ``no_fixture_match``).
    error_code: str | None = None
    error_message: str | None = None
    #: ``run_id`` of the start (additive): the call was a background run's (a job's, a
    #: LangGraph run's), begun under the test id of the request that handed it the work.
    run_id: str | None = None

    def read_error(self, meta: dict[str, Any]) -> None:
        code, message = meta.get("provider_error_code"), meta.get("provider_error_message")
        self.error_code = code[:64] if isinstance(code, str) and code else None
        self.error_message = message[:160] if isinstance(message, str) and message else None

    @property
    def beat_interval(self) -> float | None:
        """The heartbeat interval this call shows (beats come at whole intervals from its
        start), or None when it did not wait long enough to beat."""
        if not self.beats_before_token or not self.waited_before_token_ms:
            return None
        return self.waited_before_token_ms / self.beats_before_token

    @property
    def label(self) -> str:
        return f"{self.provider or '?'}/{self.model or '?'}"

    @property
    def kind(self) -> str:
        """``vocabulary.error_kind`` of the response (``None`` while unanswered)."""
        return error_kind(self.error_class, self.outcome)

    @property
    def cut(self) -> bool:
        """Answered, but by a timeout or a cancellation rather than the provider."""
        return self.response is not None and self.kind == CUT

    @property
    def ok(self) -> bool:
        return self.response is not None and self.outcome == "ok" and not self.error_class

    @property
    def open(self) -> bool:
        return self.response is None

    def refs(self) -> list[Ref]:
        return [r for r in (self.start, self.last_heartbeat, self.response) if r is not None]

    def flow(self, tier: Tier) -> Ref | None:
        """The first sign of this call's tokens in the stream. With events in the log (the
        debug tier) only a content event counts: a first byte may be a lifecycle event or a
        keep-alive. Without them, the first byte after the call started is the best sign."""
        if tier >= Tier.DEBUG:
            return self.flow_content
        return self.flow_byte or self.flow_content

    def waited_ms(self, tier: Tier) -> float | None:
        """The longest heartbeat wait before the first sign of tokens (see ``flow``)."""
        return self.waiting_content_ms if tier >= Tier.DEBUG else self.waiting_byte_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "span_id": self.span_id,
            "provider": self.provider,
            "model": self.model,
            # A response envelope is written for a cut call too (CancelledError, a timeout,
            # cvdiag's Shutdown): the provider never answered it, as ``state`` says.
            "answered": self.response is not None and not self.cut,
            "outcome": self.outcome,
            "error_class": self.error_class,
            "latency_ms": self.latency_ms,
            "first_token_ms": self.first_token_ms,
            "response_token_count": self.tokens,
            "heartbeats": self.heartbeats,
            "max_elapsed_ms": self.max_elapsed_ms,
            **({"finish_reasons": self.finish_reasons} if self.finish_reasons else {}),
            **(
                {"after_request_end_ms": self.after_request_end_ms}
                if self.after_request_end_ms is not None
                else {}
            ),
        }
