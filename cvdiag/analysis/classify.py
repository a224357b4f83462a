"""Why a test flapped: one class, a one-line reason, and the envelopes it rests on.

The facts of a test id are gathered envelope by envelope into a small summary (``Facts``), so
``cvdiag stats --by-class`` can classify every test id of a large log without holding its
envelopes. The rules are then checked in a fixed order; the first that holds wins:

1. ``edge-interference`` – an edge (Cloudflare, a proxy) stood between client and backend.
2. ``backend-error`` – the backend caught an exception.
3. ``stalled-backend`` – an LLM call never answered (or was cut by a timeout or cancellation)
   and no byte reached the client before the request ended.
4. ``slow-first-token`` – the first byte, an LLM answer or an LLM wait passed the timeout.
5. ``provider-empty`` – the LLM answered with no tokens and the stream carried no event.
6. ``client-abort`` – the client went away while every LLM call had been answered.
7. ``healthy`` – every request completed ok.
8. ``unclassified`` – none of the above.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Final

from cvdiag.analysis.describe import describe, edge_headers, ms, number, text
from cvdiag.analysis.reading import Record
from cvdiag.analysis.timeline import Clock

CLASSES: Final = (
    "edge-interference",
    "backend-error",
    "stalled-backend",
    "slow-first-token",
    "provider-empty",
    "client-abort",
    "healthy",
    "unclassified",
)
DEFAULT_FIRST_TOKEN_TIMEOUT: Final = 60.0
#: ``cf-mitigated`` values Cloudflare sets when it challenged or blocked the request.
MITIGATIONS: Final = frozenset({"challenge", "jschallenge", "block"})
#: ``via`` values that name a proxy between the edge and the backend.
PROXIES: Final = ("squid", "varnish", "nginx-proxy", "unknown-proxy")
#: Abort causes meaning the client ended the stream: ``termination_cause`` where the log has
#: it, else ``termination_kind`` (v1's ``rst``, or the words of logs cvdiag 0.1 wrote).
CLIENT_ABORTS: Final = frozenset({"client_disconnect", "client_close", "send_failed", "rst"})
#: Envelopes kept per kind of evidence: enough to show, small enough to keep for every test id.
_KEEP: Final = 8

INGRESS: Final = "backend.request.ingress"
COMPLETE: Final = "backend.response.complete"


@dataclasses.dataclass(frozen=True, slots=True)
class Ref:
    """An envelope the evidence rests on, reduced to what is shown."""

    boundary: str
    outcome: str
    key: tuple[str, int]
    where: str
    summary: str

    @classmethod
    def of(cls, record: Record) -> Ref:
        env = record.envelope
        return cls(env["boundary"], env["outcome"], record.key, record.where, describe(env))


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
    #: Time to first token of a streamed call (``first_token_delta_ms``), when the log has it.
    first_token_ms: float | None = None
    tokens: float | None = None
    heartbeats: int = 0
    max_elapsed_ms: float | None = None
    last_heartbeat: Ref | None = None

    @property
    def label(self) -> str:
        return f"{self.provider or '?'}/{self.model or '?'}"

    @property
    def cut(self) -> bool:
        """Answered, but by a timeout or a cancellation rather than the provider."""
        if self.response is None:
            return False
        kind = (self.error_class or "").lower()
        return self.outcome == "timeout" or "cancel" in kind or "timeout" in kind

    @property
    def ok(self) -> bool:
        return self.response is not None and self.outcome == "ok" and not self.error_class

    def refs(self) -> list[Ref]:
        return [r for r in (self.start, self.last_heartbeat, self.response) if r is not None]


@dataclasses.dataclass(slots=True)
class Completion:
    ref: Ref
    outcome: str
    status: float | None
    events: float | None


@dataclasses.dataclass(slots=True)
class Facts:
    """What the classes are decided on, gathered one envelope at a time."""

    test_id: str
    count: int = 0
    first: tuple[str, int] | None = None
    bad_outcome: Ref | None = None
    mitigations: list[tuple[str, Ref]] = dataclasses.field(default_factory=list)
    proxies: list[tuple[str, Ref]] = dataclasses.field(default_factory=list)
    retry_after: list[tuple[str, Ref]] = dataclasses.field(default_factory=list)
    rays: dict[str, Ref] = dataclasses.field(default_factory=dict)
    errors: int = 0
    error_refs: list[tuple[dict[str, Any], Ref]] = dataclasses.field(default_factory=list)
    calls: dict[str, Call] = dataclasses.field(default_factory=dict)
    first_byte: tuple[float | None, Ref] | None = None
    completion_count: int = 0
    first_completion: Completion | None = None
    last_completion: Completion | None = None
    #: The first completion with an outcome other than ok, one with HTTP ≥ 400, one with no event.
    failed: Completion | None = None
    failed_count: int = 0
    error_status: Completion | None = None
    silent: Completion | None = None
    aborts: list[tuple[str, Ref]] = dataclasses.field(default_factory=list)
    abort_count: int = 0

    def add(self, record: Record) -> None:
        env = record.envelope
        boundary = env["boundary"]
        meta = env["metadata"]
        self.count += 1
        if self.first is None or record.key < self.first:
            self.first = record.key
        if env["outcome"] in ("err", "timeout") and self.bad_outcome is None:
            self.bad_outcome = Ref.of(record)
        edges = edge_headers(env)
        if edges:
            self._add_edges(record, boundary, edges)
        if boundary == COMPLETE:
            self._add_completion(record, env["outcome"], meta)
        elif boundary == "backend.error.caught":
            self.errors += 1
            if len(self.error_refs) < _KEEP:
                self.error_refs.append((meta, Ref.of(record)))
        elif boundary.startswith("backend.llm.call."):
            self._add_call(record, boundary, meta)
        elif boundary == "backend.sse.first_byte":
            if self.first_byte is None:
                self.first_byte = (number(meta.get("delta_ms_from_ingress")), Ref.of(record))
        elif boundary == "backend.sse.aborted":
            self.abort_count += 1
            if len(self.aborts) < _KEEP:
                kind = meta.get("termination_cause") or meta.get("termination_kind")
                self.aborts.append((kind if isinstance(kind, str) else "?", Ref.of(record)))

    def _add_completion(self, record: Record, outcome: str, meta: dict[str, Any]) -> None:
        done = Completion(
            Ref.of(record),
            outcome,
            number(meta.get("http_status")),
            number(meta.get("sse_event_count")),
        )
        self.completion_count += 1
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
        if mitigated in MITIGATIONS and len(self.mitigations) < _KEEP:
            self.mitigations.append((mitigated, Ref.of(record)))
        via = edges.get("via", "").lower()
        if any(proxy in via for proxy in PROXIES) and len(self.proxies) < _KEEP:
            self.proxies.append((edges["via"], Ref.of(record)))
        if "retry-after" in edges and len(self.retry_after) < _KEEP:
            self.retry_after.append((edges["retry-after"], Ref.of(record)))
        ray = edges.get("cf-ray")
        if ray and boundary in (INGRESS, COMPLETE) and len(self.rays) < _KEEP:
            self.rays.setdefault(ray, Ref.of(record))

    def _add_call(self, record: Record, boundary: str, meta: dict[str, Any]) -> None:
        env = record.envelope
        # A start is its call's span; heartbeats and the response hang under it.
        span = env["span_id"] if boundary.endswith(".start") else env.get("parent_span_id")
        call = self.calls.get(span or env["span_id"])
        if call is None:
            call = self.calls[span or env["span_id"]] = Call(span or env["span_id"])
        if boundary.endswith(".start"):
            call.start = Ref.of(record)
            call.provider = _string(meta.get("provider")) or call.provider
            call.model = _string(meta.get("model")) or call.model
        elif boundary.endswith(".heartbeat"):
            call.heartbeats += 1
            call.last_heartbeat = Ref.of(record)
            first = number(meta.get("first_token_delta_ms"))
            if first is not None:  # tokens flow: streaming, no longer waiting
                call.first_token_ms = first
            else:
                elapsed = number(meta.get("elapsed_ms_since_start"))
                if elapsed is not None:
                    call.max_elapsed_ms = max(elapsed, call.max_elapsed_ms or 0.0)
        elif boundary.endswith(".response"):
            call.response = Ref.of(record)
            call.outcome = env["outcome"]
            call.provider = call.provider or _string(meta.get("provider"))
            call.model = call.model or _string(meta.get("model"))
            call.error_class = _string(meta.get("error_class"))
            latency = number(meta.get("latency_ms"))
            call.latency_ms = latency if latency is not None else number(env.get("duration_ms"))
            call.tokens = number(meta.get("response_token_count"))
            first = number(meta.get("first_token_delta_ms"))
            call.first_token_ms = first if first is not None else call.first_token_ms


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def gather(test_id: str, records: Iterable[Record]) -> Facts:
    facts = Facts(test_id)
    for record in records:
        facts.add(record)
    return facts


# --- the rules ------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Verdict:
    test_id: str
    flap_class: str
    reason: str
    evidence: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "test_id": self.test_id,
            "flap_class": self.flap_class,
            "reason": self.reason,
            "evidence": self.evidence,
        }


@dataclasses.dataclass(slots=True)
class _Finding:
    reasons: list[str] = dataclasses.field(default_factory=list)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    refs: list[Ref] = dataclasses.field(default_factory=list)

    def add(self, reason: str, refs: Iterable[Ref], **facts: Any) -> None:
        self.reasons.append(reason)
        self.facts.update(facts)
        self.refs.extend(refs)


class _Context:
    """Helpers shared by the rules: offsets from the test id's first envelope, units."""

    def __init__(self, facts: Facts, timeout_s: float) -> None:
        self.facts = facts
        self.timeout_ms = timeout_s * 1000.0
        self.clock = Clock(facts.first) if facts.first is not None else None

    def at(self, ref: Ref) -> str:
        return f"+{self.offset(ref):.0f} ms"

    def offset(self, ref: Ref) -> float:
        return self.clock.offset_ms(ref.key) if self.clock is not None else 0.0

    def timeout(self) -> str:
        return f"the {self.timeout_ms / 1000:g} s first-token timeout"


def _edge(ctx: _Context) -> _Finding:
    f, found = ctx.facts, _Finding()
    for value, ref in f.mitigations[:1]:
        found.add(f"Cloudflare answered with cf-mitigated: {value}", [ref], cf_mitigated=value)
    if f.retry_after and (f.error_status is not None or f.bad_outcome is not None):
        value, ref = f.retry_after[0]
        if f.error_status is not None and f.error_status.status is not None:
            failed, other = f"HTTP {f.error_status.status:g}", f.error_status.ref
        else:
            assert f.bad_outcome is not None
            failed, other = f"outcome {f.bad_outcome.outcome}", f.bad_outcome
        found.add(f"retry-after: {text(value, 20)} with {failed}", [ref, other], retry_after=value)
    for value, ref in f.proxies[:1]:
        found.add(f"a proxy stood in the path (via: {text(value, 60)})", [ref], via=value)
    if len(f.rays) > 1:
        found.add(
            f"{len(f.rays)} distinct cf-ray ids across the requests (the edge retried or split)",
            f.rays.values(),
            cf_rays=list(f.rays),
        )
    return found


def _backend_error(ctx: _Context) -> _Finding:
    f, found = ctx.facts, _Finding()
    if f.errors:
        meta, ref = f.error_refs[0]
        more = f" (and {f.errors - 1} more)" if f.errors > 1 else ""
        found.add(
            f"the backend caught {text(meta.get('exception_type'), 60)}:"
            f" {text(meta.get('message_scrubbed'), 120)}{more} at {ctx.at(ref)}",
            [r for _, r in f.error_refs],
            errors=f.errors,
            exception_type=meta.get("exception_type"),
            message_scrubbed=meta.get("message_scrubbed"),
        )
    return found


def _request_end(ctx: _Context) -> tuple[str, list[Ref]]:
    f = ctx.facts
    if f.aborts:
        kind, ref = f.aborts[0]
        return f"the stream was aborted ({kind}) at {ctx.at(ref)}", [ref]
    if f.first_completion is not None:
        done = f.first_completion
        return f"the request ended ({done.ref.summary}) at {ctx.at(done.ref)}", [done.ref]
    return "the log ends before the request does", []


def _stalled(ctx: _Context) -> _Finding:
    f, found = ctx.facts, _Finding()
    stuck = [c for c in f.calls.values() if c.response is None or c.cut]
    if not stuck or f.first_byte is not None:
        return found
    call = stuck[0]
    started = f" started at {ctx.at(call.start)}" if call.start else ""
    if call.response is None:
        fate = "was never answered"
    else:
        fate = f"was cut by {call.error_class or call.outcome} after {ms(call.latency_ms)}"
    beats = ""
    if call.heartbeats:
        beats = f" ({call.heartbeats} heartbeats, the last at {ms(call.max_elapsed_ms)})"
    end, end_refs = _request_end(ctx)
    found.add(
        f"LLM call {call.label}{started} {fate}{beats}, and no byte reached the client: {end}",
        [*call.refs(), *end_refs],
        llm_call=_call_json(call),
        first_byte_ms=None,
        unanswered_calls=len(stuck),
    )
    return found


def _call_json(call: Call) -> dict[str, Any]:
    return {
        "span_id": call.span_id,
        "provider": call.provider,
        "model": call.model,
        "answered": call.response is not None,
        "outcome": call.outcome,
        "error_class": call.error_class,
        "latency_ms": call.latency_ms,
        "first_token_delta_ms": call.first_token_ms,
        "response_token_count": call.tokens,
        "heartbeats": call.heartbeats,
        "max_elapsed_ms": call.max_elapsed_ms,
    }


def _slow(ctx: _Context) -> _Finding:
    f, found, limit = ctx.facts, _Finding(), ctx.timeout_ms
    facts: dict[str, Any] = {"first_token_timeout_s": limit / 1000}
    if f.first_byte is not None and f.first_byte[0] is not None and f.first_byte[0] > limit:
        delta, ref = f.first_byte
        found.add(f"the first byte left {ms(delta)} after ingress, past {ctx.timeout()}", [ref])
        facts["first_byte_ms"] = delta
    for call in f.calls.values():
        # A streamed call is judged on its first token, never on how long its stream lasted.
        if call.first_token_ms is not None:
            if call.first_token_ms > limit:
                found.add(
                    f"LLM call {call.label} sent its first token after"
                    f" {ms(call.first_token_ms)}, past {ctx.timeout()}",
                    call.refs(),
                )
                facts["llm_call"] = _call_json(call)
                break
        elif call.latency_ms is not None and call.latency_ms > limit:
            found.add(
                f"LLM call {call.label} answered after {ms(call.latency_ms)}, past {ctx.timeout()}",
                call.refs(),
            )
            facts["llm_call"] = _call_json(call)
            break
    for call in f.calls.values():
        if call.max_elapsed_ms is not None and call.max_elapsed_ms > limit:
            found.add(
                f"LLM call {call.label} was still waiting after {ms(call.max_elapsed_ms)}"
                f" ({call.heartbeats} heartbeats), past {ctx.timeout()}",
                call.refs(),
            )
            facts.setdefault("llm_call", _call_json(call))
            break
    if found.reasons:
        # The later signs follow from the first (a late answer means a late first byte): the
        # reason names the first, the evidence keeps them all.
        found.reasons = found.reasons[:1]
        found.facts.update(facts)
    return found


def _provider_empty(ctx: _Context) -> _Finding:
    f, found = ctx.facts, _Finding()
    answered = [c for c in f.calls.values() if c.ok]
    empty = [c for c in answered if not c.tokens]
    if not empty or any(c.tokens for c in f.calls.values()):
        return found
    if f.silent is None:
        return found
    call, done = empty[0], f.silent
    tokens = "no token count" if call.tokens is None else "0 tokens"
    found.add(
        f"LLM call {call.label} answered ok with {tokens}, and the response completed with"
        f" 0 events ({done.ref.summary})",
        [*call.refs(), done.ref],
        llm_call=_call_json(call),
        sse_event_count=0,
        http_status=done.status,
    )
    return found


def _client_abort(ctx: _Context) -> _Finding:
    f, found = ctx.facts, _Finding()
    by_client = [(kind, ref) for kind, ref in f.aborts if kind in CLIENT_ABORTS]
    if not by_client or any(c.response is None for c in f.calls.values()):
        return found
    kind, ref = by_client[0]
    calls = ""
    if f.calls:
        calls = (
            " and its LLM call had ended"
            if len(f.calls) == 1
            else (f" and all {len(f.calls)} LLM calls had ended")
        )
    found.add(
        f"the client ended the stream ({ref.summary}) at {ctx.at(ref)}{calls}",
        [ref],
        termination_kind=kind,
        llm_calls=len(f.calls),
    )
    return found


def _healthy(ctx: _Context) -> _Finding:
    f, found = ctx.facts, _Finding()
    done = f.last_completion
    if done is None or f.abort_count or f.failed_count:
        return found
    first_byte = f.first_byte[0] if f.first_byte else None
    many = f" ({f.completion_count} requests)" if f.completion_count > 1 else ""
    found.add(
        f"completed ok{many}: {done.ref.summary}",
        [done.ref],
        http_status=done.status,
        sse_event_count=done.events,
        first_byte_ms=first_byte,
        requests=f.completion_count,
    )
    return found


_RULES: Final[tuple[tuple[str, Callable[[_Context], _Finding]], ...]] = (
    ("edge-interference", _edge),
    ("backend-error", _backend_error),
    ("stalled-backend", _stalled),
    ("slow-first-token", _slow),
    ("provider-empty", _provider_empty),
    ("client-abort", _client_abort),
    ("healthy", _healthy),
)


def classify(facts: Facts, *, first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT) -> Verdict:
    """The first class whose rule holds, with its reason and evidence."""
    ctx = _Context(facts, first_token_timeout)
    for name, rule in _RULES:
        found = rule(ctx)
        if found.reasons:
            return Verdict(facts.test_id, name, "; ".join(found.reasons), _evidence(ctx, found))
    return Verdict(facts.test_id, "unclassified", _unclassified(ctx), _evidence(ctx, _Finding()))


def _unclassified(ctx: _Context) -> str:
    f = ctx.facts
    if f.aborts:
        kind, ref = f.aborts[0]
        return f"no rule matched: the stream was aborted ({kind}) at {ctx.at(ref)}"
    if f.failed is not None:
        return (
            f"no rule matched: the request completed with outcome {f.failed.outcome}"
            f" ({f.failed.ref.summary})"
        )
    return f"no rule matched: no request completion among {f.count} envelopes"


def _evidence(ctx: _Context, found: _Finding) -> dict[str, Any]:
    f = ctx.facts
    seen: set[tuple[str, tuple[str, int]]] = set()
    refs = []
    for ref in sorted(found.refs, key=lambda r: r.key):
        if (ref.where, ref.key) not in seen:
            seen.add((ref.where, ref.key))
            refs.append(ref)
    return {
        **found.facts,
        "envelope_count": f.count,
        "envelopes": [
            {
                "boundary": ref.boundary,
                "offset_ms": round(ctx.offset(ref), 3),
                "source": ref.where,
                "summary": ref.summary,
            }
            for ref in refs
        ],
    }
