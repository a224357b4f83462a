"""The rules about time and the client: stalled, slow, empty, aborted, healthy.

They reason from each LLM call's state when the request ended (``Context.state``), never from
the first byte alone: an AG-UI stream sends ``RUN_STARTED`` before any call answers, so a first
byte says nothing about a call that started after it.
"""

from __future__ import annotations

from typing import Any

from cvdiag.diagnosis.calls import Call, Ref
from cvdiag.diagnosis.calls_then import calls_then, count, error_of, went_on
from cvdiag.diagnosis.describe import ms, text
from cvdiag.diagnosis.edge import idle_abort, idle_said
from cvdiag.diagnosis.rules import Context, Finding
from cvdiag.diagnosis.timeline import Clock
from cvdiag.diagnosis.vocabulary import FOUND_GONE, finish_cause
from cvdiag.schema.vocabulary import Tier


def request_end(ctx: Context) -> tuple[str, list[Ref]]:
    f = ctx.facts
    if f.aborts:
        abort = f.aborts[0]
        return f"the stream was aborted ({abort.termination}) at {ctx.at(abort.ref)}", [abort.ref]
    end = f.ended
    if end is not None:
        return f"the request ended ({end.summary}) at {ctx.at(end)}", [end]
    return "the log ends before the request does", []


def _fate(ctx: Context, call: Call, end: Ref | None) -> str:
    response = call.response
    if response is None:
        return "was never answered"
    if end is None or ctx.offset(response) <= ctx.offset(end):
        return f"was cut by {call.error_class or call.outcome} after {ms(call.latency_ms)}"
    late = f"{ms(ctx.offset(response) - ctx.offset(end))} later"
    if call.cut:
        return f"was still waiting when the request ended (cut by {call.error_class} {late})"
    return f"had not answered when the request ended (its response came {late})"


def stalled(ctx: Context) -> Finding:
    """A call was still waiting (no answer, no sign of its tokens) when the request ended."""
    f, found = ctx.facts, Finding()
    end = f.ended
    waiting = [c for c in f.calls.values() if ctx.state(c, end) == "waiting"]
    # A call cut by a timeout and reported in-band, or with no call answering at all, leaves
    # a request that "completed ok" without an answer: the wait is still what happened.
    unanswered = not any(c.ok for c in f.calls.values())
    if not waiting:
        found = _found_gone(ctx)
        return found if found.reasons else _busy(ctx)
    if not (f.ended_badly or f.first_byte is None or end is None or f.error_events or unanswered):
        return found
    call = waiting[0]
    start = ctx.started(call)
    started = f" started at {ctx.at(start)}" if start is not None else ""
    before = ctx.quiet_before(call, end)
    if before is not None:
        started += f" (the client had got nothing for {ms(before)} already)"
    beats = ""
    if call.heartbeats:
        beats = f" ({call.heartbeats} heartbeats, the last at {ms(call.max_elapsed_ms)})"
    fate = _fate(ctx, call, end)
    silent = ctx.silence(call, end)
    if silent is not None:
        beat, quiet = silent
        fate = (
            f"streamed its first tokens, then waited {ms(quiet)} for the next chunk"
            f" (heartbeat at {ctx.at(beat)})"
        )
        client = "the stream stalled mid-way"
    elif f.first_byte is None:
        client = "no byte reached the client"
    elif f.keepalive_first and call.flow(f.tier) is None:
        client = "the first byte was a keep-alive comment, and no sign of its tokens followed"
    elif f.first_content is None and f.tier >= Tier.DEBUG:
        client = "the stream carried no model output"
    else:
        client = "no sign of its tokens reached the stream"
    ending, end_refs = request_end(ctx)
    more = ""
    if len(waiting) > 1:  # the SDK's retries, or calls side by side
        others = len(waiting) - 1
        more = f" ({others} more LLM call{'s' if others > 1 else ''} waited likewise)"
    found.add(
        f"LLM call {call.label}{started}{beats} {fate}{more}, and {client}: {ending}",
        [*call.refs(), *end_refs],
        llm_call=call.to_json(),
        first_byte_ms=f.first_byte[0] if f.first_byte else None,
        waiting_calls=len(waiting),
        **({"quiet_before_call_ms": round(before, 3)} if before is not None else {}),
    )
    return found


def _found_gone(ctx: Context) -> Finding:
    """A WebSocket app busy on its model does not receive, so a client that left is found
    gone only when the app next sends (``send_failed``); a plain HTTP endpoint likewise, as its
    response starts (``left_before_response``). When that came within one heartbeat interval of
    the answer to a call that had kept the backend waiting a whole interval or more, the client
    left while the backend waited, or just after: a stall."""
    f, found = ctx.facts, Finding()
    gone = [a for a in f.client_aborts if a.termination.cause in FOUND_GONE]
    if not gone:
        return found
    abort = gone[0]
    at = ctx.offset(abort.ref)
    for call in f.calls.values():
        interval, waited = call.beat_interval, call.waited_before_token_ms
        if interval is None or waited is None:
            continue
        sign = ctx.first_token_at(call)
        what = "its first token"
        if sign is None and call.response is not None and not call.cut:
            sign, what = ctx.offset(call.response), "it answered"
        if sign is None or not 0 <= at - sign <= interval:
            continue
        ending, end_refs = request_end(ctx)
        found.add(
            f"LLM call {call.label} kept the backend waiting {ms(waited)}"
            f" ({call.beats_before_token} heartbeats)"
            f" before {what} at +{sign:.0f} ms, and the client was found gone at the next"
            f" send: {ending}; it left while the backend waited, or just after",
            [*call.refs(), *end_refs],
            llm_call=call.to_json(),
            found_gone_ms=round(at - sign, 3),
        )
        return found
    return found


def _busy(ctx: Context) -> Finding:
    """The client left while the backend, its LLM calls all answered, sent it nothing: it was
    at work on something else (a tool, retrieval, its own processing). Two ways the log can
    show "nothing sent": no first byte at all (the verbose tier writes it), or, at the debug
    tier, no event for at least a heartbeat interval before the client left, or (no call beat)
    for longer than the request had run before it fell quiet (an AG-UI stream sends
    ``RUN_STARTED`` at once, so its first byte says nothing)."""
    f, found = ctx.facts, Finding()
    if f.tier < Tier.VERBOSE or not f.client_aborts:
        return found
    abort = f.client_aborts[0]
    states = {c.span_id: ctx.state(c, abort.ref) for c in f.calls.values()}
    answered = [c for c in f.calls.values() if states[c.span_id] == "answered" and c.ok]
    if not answered or any(s in ("waiting", "flowing") for s in states.values()):
        return found
    call = _latest(answered)
    assert call.response is not None
    left = ctx.offset(abort.ref)
    if f.first_byte is None and abort.bytes_before in (0, None):
        quiet = left - ctx.offset(call.response)
        sent = f"no byte reached the client in the {ms(quiet)} after it"
    else:
        last_event = f.last_event_key
        if f.tier < Tier.DEBUG or last_event is None:
            return found
        since = max(ctx.offset(call.response), ctx.offset_key(last_event))
        quiet = left - since
        # Quiet for a whole heartbeat interval, or for longer than the request had run before
        # it fell quiet: more than the pause between two events of a stream still going.
        interval = ctx.beat_interval()
        if quiet < (interval if interval is not None else max(since, 1.0)):
            return found
        sent = (
            f"the stream sent nothing in the {ms(quiet)} after it (its last event at"
            f" +{ctx.offset_key(last_event):.0f} ms)"
        )
    ending, end_refs = request_end(ctx)
    found.add(
        f"LLM call {call.label} answered at {ctx.at(call.response)}, yet {sent}: the backend"
        f" was still at work (a tool, retrieval, its own processing) when the client left:"
        f" {ending}",
        [*call.refs(), *end_refs],
        llm_call=call.to_json(),
        quiet_after_answer_ms=round(quiet, 3),
    )
    return found


def slow(ctx: Context) -> Finding:
    """The first byte, a call's first token or the stream's first content came too late."""
    f, found, limit = ctx.facts, Finding(), ctx.timeout_ms
    facts: dict[str, Any] = {"first_token_timeout_s": limit / 1000}
    first_byte = f.first_byte if not f.keepalive_first else None  # a ping: no token
    if first_byte is not None and first_byte[0] is not None and first_byte[0] > limit:
        delta, ref = first_byte
        found.add(f"the first byte left {ms(delta)} after ingress, past {ctx.timeout()}", [ref])
        facts["first_byte_ms"] = delta
    for call in f.calls.values():
        reason = _slow_call(ctx, call)
        if reason is not None:
            found.add(reason, call.refs())
            facts.setdefault("llm_call", call.to_json())
    if f.first_content is not None:
        content, ingress = f.first_content
        if ingress is not None:
            delta = Clock(ingress.key).offset_ms(content.key)
            if delta > limit:
                found.add(
                    f"the first content event ({content.summary}) left {ms(delta)} after"
                    f" ingress, past {ctx.timeout()}",
                    [content],
                )
                facts["first_content_ms"] = round(delta, 3)
    if found.reasons:
        # The later signs follow from the first (a late token means a late first byte): the
        # reason names the first, the evidence keeps them all.
        found.reasons = found.reasons[:1]
        found.facts.update(facts)
    return found


def _slow_call(ctx: Context, call: Call) -> str | None:
    """Why this call's first token was late, judged on its time to first token, never on how
    long the whole call (a stream) took."""
    limit, tier = ctx.timeout_ms, ctx.facts.tier
    if call.first_token_ms is not None:
        if call.first_token_ms > limit:
            return (
                f"LLM call {call.label}'s first token came {ms(call.first_token_ms)} after it"
                f" started, past {ctx.timeout()}"
            )
        return None
    start, flow = ctx.started(call), call.flow(tier)
    if start is not None and flow is not None:
        delta = ctx.offset(flow) - ctx.offset(start)
        if delta > limit:
            return (
                f"LLM call {call.label}'s first output reached the stream {ms(delta)} after it"
                f" started ({flow.boundary}), past {ctx.timeout()}"
            )
    waited = call.waited_ms(tier)
    if waited is not None and waited > limit:
        return (
            f"LLM call {call.label} was still waiting after {ms(waited)}"
            f" ({call.heartbeats} heartbeats, no sign of its tokens yet), past {ctx.timeout()}"
        )
    return None


def provider_empty(ctx: Context) -> Finding:
    """The answer the app was to send was empty, and nothing was sent: judged on the last call
    that answered ok before the silent completion (a tool loop's final answer), unless a call
    with tokens answered after it began (calls side by side: that answer may be the one used).
    An unknown count is trusted as empty only when no call of the test id reported tokens."""
    f, found = ctx.facts, Finding()
    done = f.silent
    if done is None:
        return found
    answered = [
        c
        for c in f.calls.values()
        if c.ok and c.response is not None and c.response.key <= done.ref.key
    ]
    if not answered:
        return found
    call = _latest(answered)
    if call.tokens is None and any(c.tokens for c in f.calls.values()):
        return found
    began = ctx.started(call)
    if call.tokens or any(
        c.tokens and c.response is not None and began is not None and c.response.key > began.key
        for c in answered
        if c is not call
    ):
        return found
    tokens = "no token count" if call.tokens is None else "0 tokens"
    stopped = finish_cause(call.finish_reasons)
    why = ""
    if stopped is not None:
        what, written = stopped
        why = f" (finish reason {text(written, 40)}: {what} stopped the answer)"
    found.add(
        f"LLM call {call.label} answered ok with {tokens}{why}, and the response completed with"
        f" 0 events ({done.ref.summary})",
        [*call.refs(), done.ref],
        llm_call=call.to_json(),
        sse_event_count=0,
        http_status=done.status,
    )
    return found


def client_abort(ctx: Context) -> Finding:
    f, found = ctx.facts, Finding()
    by_client = f.client_aborts
    if not by_client or any(c.response is None for c in f.calls.values()):
        return found
    abort = by_client[0]
    states = [ctx.state(c, abort.ref) for c in f.calls.values()]
    if "waiting" in states:
        return found
    gone = abort.termination.cause in FOUND_GONE
    left = ctx.client.left_ms if ctx.client is not None else None
    if gone:
        head = f"the client was found gone ({abort.ref.summary}) at {ctx.at(abort.ref)}; " + (
            f"its own side says it left at +{ctx.at_ms(left):.0f} ms"
            if left is not None
            else "it had left before then, when is unknown"
        )
    else:
        head = f"the client ended the stream ({abort.ref.summary}) at {ctx.at(abort.ref)}"
    outlived = [c for c in f.calls.values() if c.after_request_end_ms is not None]
    idle = idle_abort(ctx)
    silent = f"; {idle_said(idle[1])}" if idle is not None and idle[0] is abort else ""
    then = calls_then(ctx, abort.ref, by_then=gone and left is None)
    found.add(
        head + then + went_on(outlived) + silent,
        [abort.ref, *(c.response for c in outlived[:1] if c.response is not None)],
        termination_kind=abort.termination.kind,
        termination_cause=abort.termination.cause,
        llm_calls=len(f.calls),
        **({"calls_after_client_left": len(outlived)} if outlived else {}),
        **({"via": text(f.proxies[0][0], 60)} if f.proxies else {}),
    )
    return found


def healthy(ctx: Context) -> Finding:
    f, found = ctx.facts, Finding()
    done = f.last_completion
    if done is None and not f.ingresses and not f.abort_count and f.run is not None:
        return _background_run(ctx)
    if done is None or f.abort_count or f.failed_count or f.error_status is not None:
        return found
    first_byte = f.first_byte[0] if f.first_byte else None
    many = f" ({f.completion_count} requests)" if f.completion_count > 1 else ""
    failed = [c for c in f.calls.values() if c.response is not None and not c.ok]
    during = [c for c in failed if ctx.during(c)]
    later = [c for c in failed if not ctx.during(c)]
    note = ""
    if during:
        way = "on the way" if ctx.recovered(during) else "and no call answered ok after it"
        note = f"; {count(during)} ended {error_of(during[0])} {way}"
    if later:
        note += f"; {count(later)} begun after the response ended {error_of(later[0])}"
    found.add(
        f"completed ok{many}: {done.ref.summary}{note}",
        [done.ref],
        http_status=done.status,
        sse_event_count=done.events,
        first_byte_ms=first_byte,
        requests=f.completion_count,
        **({"via": text(f.proxies[0][0], 60)} if f.proxies else {}),
    )
    return found


def _latest(answered: list[Call]) -> Call:
    """The call whose response came last (every one of ``answered`` has one)."""
    return max(answered, key=lambda c: c.response.key if c.response is not None else ("", 0))


def _background_run(ctx: Context) -> Finding:
    """A run with no request of its own (its request sent no test id: the run's envelopes are
    under its run id): no request failed. Healthy when its every LLM call answered ok; a failed
    call was named by the provider rules before this one."""
    f, found = ctx.facts, Finding()
    calls = list(f.calls.values())
    if f.errors or any(c.response is None or not c.ok for c in calls):
        return found
    starts = [c.start for c in calls if c.start is not None]
    found.add(
        f"a background run ({f.run}) with no request of its own:"
        f" {count(calls) if calls else 'no LLM call'} answered ok",
        starts[:1],
        run_id=f.run,
        requests=0,
    )
    return found


def unclassified(ctx: Context) -> str:
    f = ctx.facts
    if f.aborts:
        abort = f.aborts[0]
        return (
            f"no rule matched: the stream was aborted ({abort.termination}) at {ctx.at(abort.ref)}"
        )
    if f.failed is not None:
        return (
            f"no rule matched: the request completed with outcome {f.failed.outcome}"
            f" ({f.failed.ref.summary})"
        )
    if f.error_status is not None:
        return f"no rule matched: the request completed with {f.error_status.ref.summary}"
    return f"no rule matched: no request completion among {f.count} envelopes"
