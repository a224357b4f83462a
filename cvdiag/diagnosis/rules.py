"""The rules of ``cvdiag classify``, one function per class, each returning its findings.

A rule states only what the envelopes show: a call "answered" only when its response says so, a
call "was waiting" only when nothing showed its tokens by the time the request ended. Where a
rule rests on the absence of a sign, the reason says which sign was absent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Final

from cvdiag.diagnosis.calls import Call, Key, Ref
from cvdiag.diagnosis.describe import text
from cvdiag.diagnosis.facts import Facts
from cvdiag.diagnosis.timeline import Clock
from cvdiag.diagnosis.vocabulary import CUT, FAILED, OTHER, RATE_LIMITED, error_kind, is_refusal
from cvdiag.logs.reading import key_millis

#: An unanswered call, with no heartbeat, that the client had waited on less than this long
#: when the request ended did not keep the client waiting: a client gone within half a second
#: left for its own reasons (the middleware's probe for a client gone before a late response
#: waits as long). The wait counts from the last thing the client got before the call began
#: (its request's start, a byte, an event), not from the call's start: silence before a call
#: (a framework's own work, a tool) is waiting too.
BRIEF_MS: Final = 500.0


@dataclasses.dataclass(slots=True)
class Finding:
    reasons: list[str] = dataclasses.field(default_factory=list)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    refs: list[Ref] = dataclasses.field(default_factory=list)

    def add(self, reason: str, refs: Iterable[Ref], **facts: Any) -> None:
        self.reasons.append(reason)
        self.facts.update(facts)
        self.refs.extend(refs)


class Context:
    """Helpers shared by the rules: offsets from the test id's first envelope, units."""

    def __init__(self, facts: Facts, timeout_s: float) -> None:
        self.facts = facts
        self.timeout_ms = timeout_s * 1000.0
        #: What the client saw, on the backend's clock (``cvdiag.layers``); None: no probe.
        self.client = facts.join.view()
        anchor = facts.backend_first or facts.first
        self.clock = Clock(anchor) if anchor is not None else None
        #: Offsets count from the test id's first request's start: its ingress, or, in a log
        #: without one (the default tier), a terminal's ``duration_ms`` back from it.
        self.shift = facts.lead_ms(self.clock) if self.clock is not None else 0.0
        self._anchor_ms = key_millis(anchor[0]) if anchor is not None else None

    def at(self, ref: Ref) -> str:
        return f"+{self.offset(ref):.0f} ms"

    def offset(self, ref: Ref) -> float:
        return self.offset_key(ref.key)

    def offset_key(self, key: Key) -> float:
        return self.clock.offset_ms(key) + self.shift if self.clock is not None else 0.0

    def at_ms(self, epoch_ms: float) -> float:
        """The offset of a moment on the backend's clock (ms since the epoch), as ``offset``."""
        if self._anchor_ms is None:
            return 0.0
        return epoch_ms - self._anchor_ms + self.shift

    def beat_interval(self) -> float | None:
        """The heartbeat interval the log shows (beats come at whole intervals from a call's
        start), or None when no call waited long enough to beat."""
        intervals = [c.beat_interval for c in self.facts.calls.values()]
        return min((i for i in intervals if i is not None), default=None)

    def timeout(self) -> str:
        return f"the {self.timeout_ms / 1000:g} s first-token timeout"

    # -- what an LLM call had done when the request ended -------------------------------------

    def started(self, call: Call) -> Ref | None:
        return call.start or call.last_heartbeat or call.response

    def first_token_at(self, call: Call) -> float | None:
        """The offset of the call's first token, as far as the log shows it."""
        start = self.started(call)
        if call.first_token_ms is not None and start is not None:
            return self.offset(start) + call.first_token_ms
        flow = call.flow(self.facts.tier)
        if flow is not None:
            return self.offset(flow)
        return None

    def state(self, call: Call, end: Ref | None) -> str:
        """``answered``, ``flowing``, ``waiting``, ``brief`` (unanswered, no heartbeat, and the
        client had got nothing for less than ``BRIEF_MS`` by ``end``, counted from
        ``quiet_from``: no wait a client gives up on), or ``later`` (started after ``end``)."""
        start = self.started(call)
        horizon = self.offset(end) if end is not None else float("inf")
        if start is not None and self.offset(start) > horizon:
            return "later"
        response = call.response
        if response is not None and self.offset(response) <= horizon and not call.cut:
            return "answered"  # checked first: a finished call is not "streaming" any more
        first = self.first_token_at(call)
        if (first is not None and first <= horizon) or (
            # a usage count before the cut: tokens had come
            call.cut and call.tokens and (response is None or self.offset(response) <= horizon)
        ):
            return "waiting" if self.silence(call, end) is not None else "flowing"
        if start is not None and not call.heartbeats and horizon - self.quiet_from(call) < BRIEF_MS:
            return "brief"
        return "waiting"

    def quiet_from(self, call: Call) -> float:
        """The offset since which the client had got nothing when ``call`` began: the last
        byte, event or request start the log shows before it, or the call's own start when
        bytes had gone out that the log does not time (a first byte, no events)."""
        start = self.started(call)
        began = self.offset(start) if start is not None else 0.0
        if call.quiet_unknown:
            return began
        since = self.offset_key(call.quiet_since) if call.quiet_since is not None else 0.0
        return min(since, began)

    def quiet_before(self, call: Call, end: Ref | None) -> float | None:
        """How long the client had got nothing before ``call`` began, when that silence is what
        made the wait a long one (the call, unanswered, ran under ``BRIEF_MS`` by ``end``)."""
        start = self.started(call)
        if start is None or end is None or call.heartbeats:
            return None
        began = self.offset(start)
        if self.offset(end) - began >= BRIEF_MS:
            return None
        quiet = began - self.quiet_from(call)
        return quiet if quiet > 0 else None

    def during(self, call: Call) -> bool:
        """Whether the call began before the test id's story ended: not background work that
        ran after the response (a ``BackgroundTasks`` job)."""
        return self.state(call, self.facts.ended) != "later"

    def recovered(self, failed: list[Call]) -> bool:
        """Whether a call answered ok after the last of ``failed`` began: a retry that worked,
        or a call run side by side whose answer the app used (concurrent calls finish in any
        order, so the failure's own end is no measure)."""
        starts = [ref.key for c in failed if (ref := self.started(c)) is not None]
        if not starts:
            return False
        last = max(starts)
        return any(
            c.ok and c.response is not None and c.response.key > last
            for c in self.facts.calls.values()
        )

    def silence(self, call: Call, end: Ref | None) -> tuple[Ref, float] | None:
        """Where a streaming call had gone silent by ``end``: its latest heartbeat before then
        says its stream had waited on the provider for a whole heartbeat interval
        (``chunk_wait_ms``). That beat and the wait; None while chunks kept coming."""
        last = call.stream_beat if end is None else call.beat_at_end.get(end.key)
        if last is None:
            return None
        beat, quiet, interval = last
        return (beat, quiet) if interval > 0 and quiet >= interval else None


# --- provider failures ----------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Failures:
    calls: list[Call]
    caught: list[tuple[dict[str, Any], Ref]]
    last_kind: str | None
    mattered: bool


def _failures(ctx: Context) -> _Failures:
    """The provider's failures (calls answered 429, 5xx or a transport error, and caught
    provider exceptions), and whether they decided the outcome: the request did not end well,
    the stream carried an error event, or no LLM call answered ok after the last failure."""
    f = ctx.facts
    calls = [
        c
        for c in f.calls.values()
        if c.kind in (RATE_LIMITED, FAILED) and c.response and ctx.during(c)
    ]
    caught = [
        (meta, ref)
        for meta, ref in f.error_refs
        if error_kind(text(meta.get("exception_type"), 80)) in (RATE_LIMITED, FAILED)
    ]
    if not calls and not caught:
        return _Failures([], [], None, False)
    last = max(
        [(c.response.key, c.kind) for c in calls if c.response is not None]
        + [(ref.key, error_kind(text(meta.get("exception_type"), 80))) for meta, ref in caught]
    )
    recovered = bool(calls) and ctx.recovered(calls)
    mattered = bool(caught) or f.ended_badly or bool(f.error_events) or not recovered
    return _Failures(calls, caught, last[1], mattered)


def _provider(ctx: Context, wanted: str) -> Finding:
    f, found = ctx.facts, Finding()
    failures = _failures(ctx)
    if not failures.mattered or failures.last_kind != wanted:
        return found
    refs: list[Ref] = []
    parts: list[str] = []
    if failures.calls:
        by_kind: dict[str, int] = {}
        for call in failures.calls:
            by_kind[call.error_class or call.outcome or "?"] = (
                by_kind.get(call.error_class or call.outcome or "?", 0) + 1
            )
            refs.extend(call.refs())
        answered = sum(1 for c in f.calls.values() if c.response is not None)
        kinds = ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in by_kind.items())
        call = failures.calls[-1]
        counted = (
            "its one LLM call failed"
            if answered == 1
            else f"{len(failures.calls)} of {answered} LLM calls failed"
        )
        parts.append(
            f"{counted} ({call.label}: {kinds}, the last at"
            f" {ctx.at(call.response or call.refs()[-1])})"
        )
    if failures.caught:
        meta, ref = failures.caught[0]
        parts.append(f"the backend caught {text(meta.get('exception_type'), 60)} at {ctx.at(ref)}")
        refs.append(ref)
    if f.error_events:
        kind, ref = f.error_events[0]
        parts.append(f"the stream reported it in-band ({text(kind, 40)} at {ctx.at(ref)})")
        refs.append(ref)
    parts.append(_outcome(ctx))
    refs.extend(_end_refs(ctx))
    found.add(
        "; ".join(parts),
        refs,
        failed_calls=len(failures.calls),
        error_classes=sorted({c.error_class or "?" for c in failures.calls}),
        caught=[meta.get("exception_type") for meta, _ in failures.caught],
        error_events=[kind for kind, _ in f.error_events],
    )
    return found


def rate_limited(ctx: Context) -> Finding:
    return _provider(ctx, RATE_LIMITED)


def provider_error(ctx: Context) -> Finding:
    return _provider(ctx, FAILED)


def _outcome(ctx: Context) -> str:
    """How the test id's requests ended, for a provider failure's reason."""
    f = ctx.facts
    if f.aborts:
        abort = f.aborts[0]
        return f"the stream was aborted ({abort.termination}) at {ctx.at(abort.ref)}"
    bad = f.error_status or f.failed
    if bad is not None:
        return f"the backend answered {bad.ref.summary}"  # the summary shows its edge headers
    if f.last_completion is not None:
        return f"yet the request completed ok ({f.last_completion.ref.summary})"
    return "the log ends before the request does"


def _end_refs(ctx: Context) -> list[Ref]:
    f = ctx.facts
    if f.aborts:
        return [f.aborts[0].ref]
    bad = f.error_status or f.failed or f.last_completion
    return [bad.ref] if bad is not None else []


# --- the backend -----------------------------------------------------------------------


def stall_explains(ctx: Context) -> bool:
    """Whether an LLM call left waiting explains the failure (``waiting.stalled`` names it): a
    call was still waiting when the request ended and none answered ok. Then a caught timeout
    or cancellation, and an error the stream reported in-band, are that wait's consequence."""
    f = ctx.facts
    calls = f.calls.values()
    end = f.ended
    return not any(c.ok for c in calls) and any(ctx.state(c, end) == "waiting" for c in calls)


def refused_calls(ctx: Context) -> list[Call]:
    """Calls the provider refused with a 4xx other than 429 (a bad key, model or payload: the
    request the backend built) or that ended in another error of the app's, with no call
    answering ok after the last of them: then the refusal decided the outcome, as a provider
    failure does (``_failures``), whatever the app made of it."""
    f = ctx.facts
    refused = [
        c for c in f.calls.values() if c.response is not None and c.kind == OTHER and ctx.during(c)
    ]
    if not refused or ctx.recovered(refused):
        return []
    return refused


def backend_error(ctx: Context) -> Finding:
    f, found = ctx.facts, Finding()
    stalled = stall_explains(ctx)
    errors = [
        (meta, ref)
        for meta, ref in f.error_refs
        if not (stalled and error_kind(text(meta.get("exception_type"), 80)) == CUT)
    ]
    refused = refused_calls(ctx)
    if errors:
        meta, ref = errors[0]
        more = f" (and {f.errors - 1} more)" if f.errors > 1 else ""
        found.add(
            f"the backend caught {text(meta.get('exception_type'), 60)}:"
            f" {text(meta.get('message_scrubbed'), 120)}{more} at {ctx.at(ref)}",
            [r for _, r in errors],
            errors=f.errors,
            exception_type=meta.get("exception_type"),
            message_scrubbed=meta.get("message_scrubbed"),
        )
    elif refused:
        rejected = [c for c in refused if is_refusal(c.error_class)]
        named = rejected or refused
        call = named[-1]
        kinds = ", ".join(sorted({c.error_class or c.outcome or "?" for c in named}))
        many = f" ({len(named)} calls)" if len(named) > 1 else ""
        at = ctx.at(call.response or call.refs()[-1])
        what = (
            f"was refused with {text(kinds, 60)}{many} at {at}, and no call answered ok after"
            " it: the request the backend sent was rejected"
            if rejected
            else f"failed in the backend with {text(kinds, 60)}{many} at {at}, before any"
            " answer of the provider, and no call answered ok after it"
        )
        found.add(
            f"LLM call {call.label} {what}; {_outcome(ctx)}",
            [r for c in refused for r in c.refs()] + _end_refs(ctx),
            refused_calls=len(refused),
            error_classes=sorted({c.error_class or "?" for c in refused}),
        )
    elif f.error_events and not stalled:
        kind, ref = f.error_events[0]
        more = f" (and {f.error_event_count - 1} more)" if f.error_event_count > 1 else ""
        found.add(
            f"the stream reported an error in-band: {text(kind, 40)}{more} at {ctx.at(ref)},"
            f" and {_calls_said(ctx)}",
            [r for _, r in f.error_events],
            error_events=f.error_event_count,
        )
    return found


def _calls_said(ctx: Context) -> str:
    """What the LLM calls of the log say about an in-band error no rule explained."""
    calls = list(ctx.facts.calls.values())
    if not calls:
        return "no LLM call is in the log"
    if all(c.ok for c in calls):
        return "every LLM call answered ok" if len(calls) > 1 else "its LLM call answered ok"
    ended = sorted({c.error_class or c.outcome or "?" for c in calls if c.response and not c.ok})
    if not ended:
        return "no LLM call had answered"
    return f"LLM calls ended {text(', '.join(ended), 60)}"
