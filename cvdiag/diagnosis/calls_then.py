"""What the LLM calls had done when the client left, and what they did after: the words
``client-abort`` and ``healthy`` use for the calls of a story."""

from __future__ import annotations

from cvdiag.diagnosis.calls import Call, Ref
from cvdiag.diagnosis.describe import ms, text
from cvdiag.diagnosis.rules import Context


def went_on(outlived: list[Call]) -> str:
    """A call that went on after the client left: the model kept generating, and billing."""
    if not outlived:
        return ""
    call = outlived[0]
    tokens = f", {call.tokens:.0f} tokens" if call.tokens is not None else ""
    more = f" (and {len(outlived) - 1} more)" if len(outlived) > 1 else ""
    return (
        f"; LLM call {call.label} went on {ms(call.after_request_end_ms or 0.0)} after the client"
        f" left ({error_of(call)}{tokens}): the model kept generating{more}"
    )


def calls_then(ctx: Context, end: Ref, *, by_then: bool = False) -> str:
    """What the LLM calls had done when the client left, as the envelopes show it; ``by_then``:
    only by ``end``, when the client was found gone, not when it left (unknown)."""
    calls = [c for c in ctx.facts.calls.values() if ctx.state(c, end) != "later"]
    if not calls:
        return ""
    answered = sum(1 for c in calls if ctx.state(c, end) == "answered")
    flowing = [c for c in calls if ctx.state(c, end) == "flowing"]
    parts = []
    if answered:
        if len(calls) == 1:
            parts.append("its LLM call had answered")
        else:
            parts.append(f"{answered} of {len(calls)} LLM calls had answered")
    for call in flowing[:1]:
        first = ctx.first_token_at(call)
        when = f" (first token at +{first:.0f} ms)" if first is not None else ""
        parts.append(f"LLM call {call.label} was streaming{when}")
    for call in [c for c in calls if ctx.state(c, end) == "brief"][:1]:
        start = ctx.started(call)
        waited = ctx.offset(end) - ctx.offset(start) if start is not None else 0.0
        parts.append(f"LLM call {call.label} had begun only {ms(waited)} before, unanswered")
    if not parts:
        return ""
    said = " and ".join(parts)
    return f"; by then (not necessarily when it left) {said}" if by_then else f"; {said}"


def count(calls: list[Call]) -> str:
    return "1 LLM call" if len(calls) == 1 else f"{len(calls)} LLM calls"


def error_of(call: Call) -> str:
    return text(call.error_class or call.outcome, 40)
