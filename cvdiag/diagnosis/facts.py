"""The facts of one test id, gathered envelope by envelope into a small summary.

Nothing here holds a test id's envelopes (``stats --by-class`` classifies every test id of a
large log): only counts, a few references per kind of evidence, one ``Call`` per LLM call.
Envelopes come in time order; what a call had done *by the request's end* is read off it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Final

from cvdiag.diagnosis.calls import Call, Key, Ref
from cvdiag.diagnosis.describe import edge_headers, number
from cvdiag.diagnosis.probe_facts import add_probe, browser_own
from cvdiag.diagnosis.protocol import Protocol
from cvdiag.diagnosis.timeline import Clock
from cvdiag.diagnosis.vocabulary import (
    CLIENT_EXCEPTIONS,
    Termination,
    is_content_event,
    is_error_event,
    termination,
)
from cvdiag.layers.join import Join
from cvdiag.logs.reading import Record
from cvdiag.schema.vocabulary import BOUNDARY_TIER, Tier

#: ``cf-mitigated`` values Cloudflare sets when it challenged or blocked the request.
MITIGATIONS: Final = frozenset({"challenge", "jschallenge", "block"})
#: Envelopes kept per kind of evidence: enough to show, small enough to keep for every test id.
KEEP: Final = 8

INGRESS: Final = "backend.request.ingress"
COMPLETE: Final = "backend.response.complete"
ABORTED: Final = "backend.sse.aborted"


@dataclasses.dataclass(slots=True)
class Completion:
    ref: Ref
    outcome: str
    status: float | None
    events: float | None
    #: ``content_length``: the body bytes the app sent (a JSON answer has no first byte).
    size: float | None = None

    @property
    def bad(self) -> bool:
        return self.outcome != "ok" or (self.status is not None and self.status >= 400)


@dataclasses.dataclass(slots=True)
class Abort:
    termination: Termination
    ref: Ref
    bytes_before: float | None
    #: How long the stream had been silent when it ended: the terminal's ``silence_ms``, else
    #: from when the client last got something the log times (an event, the ingress) to the
    #: end (``quiet_since``); both None when the tier shows neither.
    silence_ms: float | None = None
    quiet_since: Key | None = None


@dataclasses.dataclass(slots=True)
class Facts:
    """What the classes are decided on, gathered one envelope at a time."""

    test_id: str
    count: int = 0
    first: Key | None = None
    last: Key | None = None
    ingresses: int = 0
    #: The run its scopes name (``run_id`` on a start envelope): work outside any request.
    run: str | None = None
    #: The highest tier any of the test id's envelopes needs: what the log can show.
    tier: Tier = Tier.DEFAULT
    bad_outcome: Ref | None = None
    mitigations: list[tuple[str, Ref]] = dataclasses.field(default_factory=list)
    #: ``via`` values: a proxy in the path, context for the edge rule, never a cause alone.
    proxies: list[tuple[str, Ref]] = dataclasses.field(default_factory=list)
    #: What the client saw, where the harness's probe layer wrote it: HTTP statuses it got
    #: (``probe.network.response``/``error``) and a stream cut on its side (``probe.sse.aborted``)
    #: by the network (not the client's own timeout or leaving); the layers joined (``join``).
    client_statuses: list[tuple[float, Ref]] = dataclasses.field(default_factory=list)
    client_cut: Ref | None = None
    join: Join = dataclasses.field(default_factory=Join)
    #: The first non-probe envelope: the backend's clock anchors the offsets.
    backend_first: Key | None = None
    #: Envelopes of requests a browser makes of its own accord (an icon): not the test's.
    browser_own: int = 0
    #: Whether each request's stream kept its protocol (AG-UI, the Responses stream).
    protocol: Protocol = dataclasses.field(default_factory=Protocol)
    retry_after: list[tuple[str, Ref]] = dataclasses.field(default_factory=list)
    rays: dict[str, Ref] = dataclasses.field(default_factory=dict)
    errors: int = 0
    error_refs: list[tuple[dict[str, Any], Ref]] = dataclasses.field(default_factory=list)
    #: Caught exceptions that only say the client left (older logs): not application errors.
    client_errors: int = 0
    calls: dict[str, Call] = dataclasses.field(default_factory=dict)
    first_byte: tuple[float | None, Ref] | None = None
    #: The last stream event before the first abort (the debug tier): when the client last got
    #: something.
    last_event_key: Key | None = None
    #: That first byte held only SSE keep-alive comments.
    keepalive_first: bool = False
    first_ingress: Ref | None = None
    #: The first event carrying model output, and the ingress it followed.
    first_content: tuple[Ref, Ref | None] | None = None
    error_events: list[tuple[str, Ref]] = dataclasses.field(default_factory=list)
    error_event_count: int = 0
    completion_count: int = 0
    first_completion: Completion | None = None
    last_completion: Completion | None = None
    #: The first completion with an outcome other than ok, one with HTTP ≥ 400, one with no event.
    failed: Completion | None = None
    failed_count: int = 0
    error_status: Completion | None = None
    silent: Completion | None = None
    aborts: list[Abort] = dataclasses.field(default_factory=list)
    abort_count: int = 0
    #: Terminals with the ``duration_ms`` since their request began: where a log without the
    #: ingress (the default tier) learns when its first request started.
    lasted: list[tuple[Ref, float]] = dataclasses.field(default_factory=list)
    _last_ingress: Ref | None = None
    #: The last thing known to reach the client (its request's ingress, a byte, an event): an
    #: LLM call begun later kept the client waiting since then, not only since its own start.
    #: ``_sent_unknown``: bytes went out after it that the log does not show one by one (a
    #: first byte without events): then when the client last got something is unknown.
    _quiet_from: Key | None = None
    _sent_unknown: bool = False
    #: A call just answered ok and nothing was sent since: the next byte and the next content
    #: event are that answer going out, no sign of the calls still open.
    _answer_unsent: bool = False
    _answer_unsent_content: bool = False
    #: Envelopes the log reports dropped (``cvdiag.queue_dropped``) while this story was
    #: written, and those reports: the story may lack them (``classify.add_drops``).
    dropped: int = 0
    drop_refs: list[Ref] = dataclasses.field(default_factory=list)
    #: A ``cvdiag.queue_dropped`` line under this test id: its writer lost its terminal.
    writer_cut: tuple[float, Ref] | None = None
    #: SSE events present, and those the terminals say were sent.
    sse_events: int = 0
    events_said: float = 0
    #: No text in the refs: for classifying many test ids at once (``ls``, ``stats``).
    lean: bool = False

    def ref_of(self, record: Record) -> Ref:
        if self.lean:
            env = record.envelope
            return Ref(env["boundary"], env["outcome"], record.key, "", "")
        return Ref.of(record)

    def add(self, record: Record) -> None:
        env = record.envelope
        boundary = env["boundary"]
        meta = env["metadata"]
        self.count += 1
        if self.first is None or record.key < self.first:
            self.first = record.key
        if self.last is None or record.key > self.last:
            self.last = record.key
        if boundary.startswith(("probe.", "aimock.")):  # the client's, the mock provider's
            add_probe(self, record, boundary, meta)
            return
        if self.backend_first is None or record.key < self.backend_first:
            self.backend_first = record.key
        if browser_own(self, record):
            return
        tier = BOUNDARY_TIER.get(boundary, Tier.DEFAULT)
        if tier > self.tier:
            self.tier = tier
        if env["outcome"] in ("err", "timeout") and self.bad_outcome is None:
            self.bad_outcome = self.ref_of(record)
        edges = edge_headers(env)
        if edges:
            self._add_edges(record, boundary, edges)
        if boundary == "backend.sse.event":
            self.sse_events += 1
            if not self.aborts:
                self.last_event_key = record.key
            self._quiet_from, self._sent_unknown = record.key, False
            self._add_event(record, meta)
        elif boundary == COMPLETE:
            self._add_completion(record, env["outcome"], meta)
        elif boundary == INGRESS:
            self.ingresses += 1
            self._last_ingress = self.ref_of(record)
            self.first_ingress = self.first_ingress or self._last_ingress
            self._quiet_from, self._sent_unknown = record.key, False
        elif boundary == "backend.error.caught":
            self._add_error(record, meta)
        elif boundary.startswith(("backend.llm.call.", "backend.agent.enter")):
            if boundary != "backend.agent.enter":
                self._add_call(record, boundary, meta)
            self.run = self.run or _string(meta.get("run_id"))
        elif boundary == "backend.sse.first_byte":
            ref = self.ref_of(record)
            keepalive = meta.get("keepalive") is True
            if self.first_byte is None:
                self.first_byte = (number(meta.get("delta_ms_from_ingress")), ref)
                self.keepalive_first = keepalive
            if not keepalive:  # a ``: ping`` comment is no sign of tokens
                self._flowing(ref, content=False)
                self._quiet_from, self._sent_unknown = record.key, True
        elif boundary == "cvdiag.queue_dropped" and self.writer_cut is None:
            self.writer_cut = (number(meta.get("dropped_count")) or 0, self.ref_of(record))
        elif boundary == ABORTED:
            self.abort_count += 1
            if len(self.aborts) < KEEP:
                size = number(meta.get("bytes_before_abort"))
                quiet = None if self._sent_unknown else self._quiet_from
                silence = number(meta.get("silence_ms"))
                ref = self.ref_of(record)
                self.aborts.append(Abort(termination(meta), ref, size, silence, quiet))
                self._at_end(self.aborts[-1].ref, record.envelope.get("duration_ms"))
            self.protocol.end(self.ref_of(record), meta, completed=False)

    def _flowing(self, ref: Ref, *, content: bool) -> None:
        """Bytes or model output reached the client: every call still open was flowing,
        unless this is the answer a call just gave, going out (calls run side by side: one
        answered and was sent while another still waited)."""
        if content:
            if self._answer_unsent_content:
                self._answer_unsent_content = False
                return
        elif self._answer_unsent:
            self._answer_unsent = False
            return
        for call in self.calls.values():
            if not call.open or call.start is None:
                continue
            if content and call.flow_content is None:
                call.flow_content = ref
            if call.flow_byte is None:
                call.flow_byte = ref

    def _add_event(self, record: Record, meta: dict[str, Any]) -> None:
        kind = meta.get("event_type")
        if not isinstance(kind, str):
            return
        ref = self.ref_of(record)
        self.protocol.event(kind, ref)
        if is_error_event(kind):
            self.error_event_count += 1
            if len(self.error_events) < KEEP:
                self.error_events.append((kind, ref))
        elif is_content_event(kind):
            if self.first_content is None:
                self.first_content = (ref, self._last_ingress)
            self._flowing(ref, content=True)

    def _add_error(self, record: Record, meta: dict[str, Any]) -> None:
        if meta.get("exception_type") in CLIENT_EXCEPTIONS:
            self.client_errors += 1
            return
        self.errors += 1
        if len(self.error_refs) < KEEP:
            self.error_refs.append((meta, self.ref_of(record)))

    def _at_end(self, ref: Ref, duration: Any) -> None:
        """A terminal: note how long its request lasted, and where each streaming call's
        heartbeats stood (``silence``)."""
        lasted = number(duration)
        if lasted is not None and len(self.lasted) < KEEP:
            self.lasted.append((ref, lasted))
        for call in self.calls.values():
            if call.stream_beat is not None and len(call.beat_at_end) < KEEP:
                call.beat_at_end[ref.key] = call.stream_beat

    def _add_completion(self, record: Record, outcome: str, meta: dict[str, Any]) -> None:
        done = Completion(
            self.ref_of(record),
            outcome,
            number(meta.get("http_status")),
            number(meta.get("sse_event_count")),
            number(meta.get("content_length")),
        )
        self.completion_count += 1
        self.events_said += done.events or 0
        self._at_end(done.ref, record.envelope.get("duration_ms"))
        self.protocol.end(done.ref, meta, completed=not done.bad)
        self.first_completion = self.first_completion or done
        self.last_completion = done
        if outcome != "ok":
            self.failed_count += 1
            self.failed = self.failed or done
        if done.status is not None and done.status >= 400:
            self.error_status = self.error_status or done
        if done.events == 0:
            self.silent = self.silent or done

    def _add_edges(self, record: Record, boundary: str, edges: dict[str, str]) -> None:
        mitigated = edges.get("cf-mitigated", "").strip().lower()
        if mitigated in MITIGATIONS and len(self.mitigations) < KEEP:
            self.mitigations.append((mitigated, self.ref_of(record)))
        via = edges.get("via", "").strip()
        if via and len(self.proxies) < KEEP:
            self.proxies.append((via, self.ref_of(record)))
        if "retry-after" in edges and len(self.retry_after) < KEEP:
            self.retry_after.append((edges["retry-after"], self.ref_of(record)))
        ray = edges.get("cf-ray")
        if ray and boundary in (INGRESS, COMPLETE, ABORTED) and len(self.rays) < KEEP:
            self.rays.setdefault(ray, self.ref_of(record))

    def _add_call(self, record: Record, boundary: str, meta: dict[str, Any]) -> None:
        env = record.envelope
        # A start is its call's span; heartbeats and the response hang under it.
        span = env["span_id"] if boundary.endswith(".start") else env.get("parent_span_id")
        span = span or env["span_id"]
        call = self.calls.get(span)
        if call is None:
            call = self.calls[span] = Call(span)
        if boundary.endswith(".start"):
            # A new call began: what is sent next may be its own.
            self._answer_unsent = self._answer_unsent_content = False
            call.start = self.ref_of(record)
            call.quiet_since, call.quiet_unknown = self._quiet_from, self._sent_unknown
            call.provider = _string(meta.get("provider")) or call.provider
            call.model = _string(meta.get("model")) or call.model
            call.run_id = _string(meta.get("run_id"))
        elif boundary.endswith(".heartbeat"):
            call.heartbeats += 1
            call.last_heartbeat = beat = self.ref_of(record)
            elapsed = number(meta.get("elapsed_ms_since_start"))
            beat_first = number(meta.get("first_token_delta_ms"))
            if beat_first is not None and call.first_token_ms is None:
                call.first_token_ms = beat_first  # streaming before it answered, if it ever did
            if elapsed is not None and beat_first is None:
                call.beats_before_token += 1
                call.waited_before_token_ms = max(elapsed, call.waited_before_token_ms or 0.0)
            if elapsed is not None and beat_first is not None:
                gap = elapsed - (call.max_elapsed_ms or 0.0)
                call.stream_beat = (beat, number(meta.get("chunk_wait_ms")) or 0.0, gap)
            if elapsed is not None:
                call.max_elapsed_ms = max(elapsed, call.max_elapsed_ms or 0.0)
                if call.flow_content is None:
                    call.waiting_content_ms = max(elapsed, call.waiting_content_ms or 0.0)
                if call.flow_byte is None:
                    call.waiting_byte_ms = max(elapsed, call.waiting_byte_ms or 0.0)
        elif boundary.endswith(".response"):
            call.response = self.ref_of(record)
            call.outcome = env["outcome"]
            call.provider = call.provider or _string(meta.get("provider"))
            call.model = call.model or _string(meta.get("model"))
            call.error_class = _string(meta.get("error_class"))
            latency = number(meta.get("latency_ms"))
            call.latency_ms = latency if latency is not None else number(env.get("duration_ms"))
            call.tokens = number(meta.get("response_token_count"))
            first = number(meta.get("first_token_delta_ms"))
            if first is not None:  # else keep what a heartbeat said
                call.first_token_ms = first
            reasons = meta.get("finish_reasons")
            if isinstance(reasons, list):
                call.finish_reasons = [r[:40] for r in reasons[:8] if isinstance(r, str) and r]
            call.after_request_end_ms = number(meta.get("after_request_end_ms"))
            call.read_error(meta)
            if call.ok:
                self._answer_unsent = self._answer_unsent_content = True

    def lead_ms(self, clock: Clock) -> float:
        """How long before the first envelope the first request began (its terminal says)."""
        lead = max([0.0] + [lasted - clock.offset_ms(ref.key) for ref, lasted in self.lasted])
        return lead if lead > 1.0 else 0.0  # within the ms rounding: the ingress is there

    @property
    def client_aborts(self) -> list[Abort]:
        return [a for a in self.aborts if a.termination.by_client]

    @property
    def ended(self) -> Ref | None:
        """Where the test id's story ended for the client: its first abort, else its first
        failed completion, else its last completion; None when the log ends before that."""
        ends = [done.ref for done in (self.failed, self.error_status) if done is not None]
        if self.aborts:
            ends.append(self.aborts[0].ref)
        if ends:
            return min(ends, key=lambda ref: ref.key)
        return self.last_completion.ref if self.last_completion is not None else None

    @property
    def requests(self) -> int:  # at the default tier (no ingress): the requests that ended
        return max(self.ingresses, self.completion_count + self.abort_count)

    @property
    def ended_badly(self) -> bool:
        return bool(self.abort_count or self.failed_count or self.error_status is not None)


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def gather(test_id: str, records: Iterable[Record]) -> Facts:
    facts = Facts(test_id)
    for record in records:
        facts.add(record)
    return facts
