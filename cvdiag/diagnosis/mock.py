"""The classifier's rules about a mock LLM provider: from the backend's view of it, and from
the mock's own record where the log holds it (``aimock.*`` lines, read from CopilotKit aimock's
journal: ``cvdiag.layers.mock``).

Agent showcases are tested against a mock LLM server (CopilotKit's aimock and the like) that
answers from recorded fixtures. A request no fixture matches is refused with an error whose body
says so: ``404 {"error": {"message": "No fixture matched", "code": "no_fixture_match"}}`` (a
strict mock may answer 503). Read as the backend's error or the provider's, it sends a person
to the backend; the fix is in the test's fixtures.

The mock's record settles more than the backend can tell: the request no fixture matched (what
it carried), a stream the mock cut as its fixture said (``provider-error``, in the mock's
words: the provider layer ended it), a mock slow by its fixture's ``latency`` (``slow-first-
token``: the provider's pace, not the backend), and a call the backend began that never reached
the mock (no entry of its). Without the mock's lines every verdict is as before.
"""

from __future__ import annotations

import re
from typing import Any, Final

from cvdiag.diagnosis.calls import Call, Ref
from cvdiag.diagnosis.describe import text
from cvdiag.diagnosis.rules import Context, Finding, _end_refs, _outcome
from cvdiag.diagnosis.vocabulary import CUT
from cvdiag.layers.mock import Entry, MockView

#: Error codes (``provider_error_code``, lowercased) a mock provider answers a request no
#: fixture matched with (docs/troubleshooting.md lists them).
MOCK_CODES: Final = frozenset(
    {"no_fixture_match", "no_fixture_matched", "no_matching_fixture", "fixture_not_found"}
)
#: The same in a message: a caught SDK exception's (the openai SDK puts the body in it), or a
#: provider error's that names no code.
_IN_TEXT: Final = re.compile(
    r"no[ _-]?fixture[ _-]?match|no[ _-]matching[ _-]fixture|fixture[ _-]not[ _-]found",
    re.IGNORECASE,
)


def is_mismatch(code: str | None, message: str | None) -> bool:
    """Whether a provider's error code, or failing that its message, says no fixture matched."""
    if code is not None and code.lower() in MOCK_CODES:
        return True
    return message is not None and _IN_TEXT.search(message[:512]) is not None


def mock_mismatch(ctx: Context) -> Finding:
    f, found = ctx.facts, Finding()
    view = f.join.mock.view()
    if view is not None and _journal_mismatch(ctx, view, found):
        return found
    refused = [
        c
        for c in f.calls.values()
        if c.response is not None and ctx.during(c) and is_mismatch(c.error_code, c.error_message)
    ]
    if refused and not ctx.recovered(refused):
        call = refused[-1]
        found.add(
            f"the mock LLM provider matched no fixture for LLM call {call.label}"
            f" ({_said(call)}) at {ctx.at(call.response or call.refs()[-1])}, and no call"
            f" answered ok after it: the test's fixtures lack this request, not the backend;"
            f" {_outcome(ctx)}",
            [r for c in refused for r in c.refs()] + _end_refs(ctx),
            mock_calls=len(refused),
            model=call.model,
            mock_error_code=call.error_code,
            mock_message=call.error_message,
        )
        return found
    for meta, ref in f.error_refs:
        message = text(meta.get("message_scrubbed"), 200)
        if is_mismatch(None, message):
            found.add(
                f"the backend caught {text(meta.get('exception_type'), 60)} at {ctx.at(ref)}:"
                f" the mock LLM provider matched no fixture ({message}): the test's fixtures"
                " lack this request, not the backend",
                [ref, *_end_refs(ctx)],
                exception_type=meta.get("exception_type"),
                mock_message=message,
            )
            break
    return found


def _refs(ctx: Context, entry: Entry) -> list[Ref]:
    return [ctx.facts.ref_of(r) for r in entry.records]


def _mock_facts(view: MockView, entry: Entry) -> dict[str, Any]:
    return {
        "mock_request": entry.request,
        "mock_status": entry.status,
        "mock_fixture": entry.fixture,
        "mock_request_id": entry.request_id,
        "mock_alignment": view.offset.said(),
    }


def _journal_mismatch(ctx: Context, view: MockView, found: Finding) -> bool:
    refused = [e for e in view.entries if e.decided and not e.matched]
    if not refused:
        return False
    last = refused[-1]
    if any(e.matched and not e.interrupted and e.at_ms > last.at_ms for e in view.entries):
        return False  # a later request matched: the refusal was not the end of the story
    matched = sorted({e.fixture for e in view.entries if e.fixture})
    seen = (
        f"the fixtures it matched for this test: {'; '.join(matched)}"
        if matched
        else "it matched no request of this test (the fixture set it searched is not in its"
        " journal)"
    )
    found.add(
        f"the mock LLM provider's journal: no fixture matched {last.request}"
        f" (it answered {_status(last)}) at {ctx.at_ms(last.at_ms):+.0f} ms; {seen}: the"
        f" test's fixtures lack this request, not the backend; {_outcome(ctx)}",
        _refs(ctx, last) + _end_refs(ctx),
        **_mock_facts(view, last),
        mock_refused=len(refused),
        mock_last_user_message=last.last_user_message,
        mock_fixtures_matched=matched,
    )
    return True


def _status(entry: Entry) -> str:
    return f"{entry.status:.0f}" if entry.status is not None else "an error"


def mock_cut(ctx: Context) -> Finding:
    """The mock cut its stream (``interrupted``), as its fixture said, and the test ended badly
    for it: ``provider-error``, the provider layer's end, in the mock's words."""
    f, found = ctx.facts, Finding()
    view = f.join.mock.view()
    if view is None:
        return found
    cut = [e for e in view.entries if e.interrupted]
    if not cut or not (f.ended_badly or _call_failed(ctx, cut[-1])):
        return found
    entry = cut[-1]
    call = f.calls.get(entry.call) if entry.call else None
    ended = (
        f"; LLM call {call.label} ended {call.error_class or call.outcome or 'unanswered'}"
        if call is not None
        else ""
    )
    found.add(
        f"the mock LLM provider cut its stream for {entry.request} (aimock's"
        f" interruptReason {entry.interrupted}; its fixture {entry.fixture or '?'} says"
        f" {entry.timing() or 'so'}), decided at {ctx.at_ms(entry.at_ms):+.0f} ms{ended}: the"
        f" stream's end was the mock's, as its fixture told it, not the backend's or the"
        f" network's; {_outcome(ctx)}",
        _refs(ctx, entry) + (call.refs() if call is not None else []) + _end_refs(ctx),
        **_mock_facts(view, entry),
        mock_interrupt_reason=entry.interrupted,
        error_class=call.error_class if call is not None else None,
    )
    return found


def mock_slow(ctx: Context) -> Finding:
    """The mock held its answer by its fixture's pace (``latency`` before each chunk, the
    first one too, or a ``streamingProfile``), and the call it answered was still waiting, or
    timed out, when the test ended badly: the provider's pace, not the backend's."""
    f, found = ctx.facts, Finding()
    view = f.join.mock.view()
    if view is None or not f.ended_badly:
        return found
    for entry in view.entries:
        call = f.calls.get(entry.call) if entry.call else None
        if call is None or not (entry.latency_ms or entry.streaming_profile):
            continue
        state = ctx.state(call, f.ended)
        if not (call.cut or state in ("waiting", "brief")) or entry.interrupted:
            continue
        started = ctx.started(call)
        waited = (
            f"; the call waited {ctx.offset(f.ended) - ctx.offset(started):.0f} ms before the"
            " test's request ended"
            if started is not None and f.ended is not None
            else ""
        )
        how = "was cut by " + (call.error_class or "a timeout") if call.cut else "never answered"
        found.add(
            f"the mock LLM provider was slow by its fixture: {entry.fixture or '?'} paces its"
            f" answer ({entry.timing()}, the first chunk too); it took {entry.request} at"
            f" {ctx.at_ms(entry.at_ms):+.0f} ms, and LLM call {call.label} {how}{waited}: the"
            " wait was the mock's pace, not the backend's",
            _refs(ctx, entry) + call.refs() + _end_refs(ctx),
            **_mock_facts(view, entry),
            mock_latency_ms=entry.latency_ms,
            error_class=call.error_class,
        )
        return found
    return found


def never_reached(ctx: Context) -> Finding:
    """A call the backend began that the mock's journal holds no request of, in a test the
    journal holds requests of: it never reached the mock. A failed call names the provider
    side of the backend (``provider-error``: a refused connection, a wrong base URL)."""
    return _unseen(ctx, waiting=False)


def never_reached_waiting(ctx: Context) -> Finding:
    """As ``never_reached``, for a call still waiting when the test ended badly: the mock never
    had it to answer, so the wait was the backend's or the network's (``stalled-backend``)."""
    return _unseen(ctx, waiting=True)


def _unseen(ctx: Context, *, waiting: bool) -> Finding:
    f, found = ctx.facts, Finding()
    view = f.join.mock.view()
    if view is None or not view.unseen_calls or not f.ended_badly:
        return found
    for span in view.unseen_calls:
        call = f.calls.get(span)
        if call is None or call.ok:
            continue
        if waiting and not (call.cut or ctx.state(call, f.ended) in ("waiting", "brief")):
            continue
        if not waiting and (call.response is None or call.kind == CUT):
            continue
        start = ctx.started(call)
        ended = call.error_class or call.outcome or "unanswered"
        found.add(
            f"the backend began LLM call {call.label}"
            f"{f' at {ctx.at(start)}' if start is not None else ''}, and it ended {ended}, but"
            f" the mock LLM provider's journal holds no request of it (it holds"
            f" {len(view.entries)} of this test): the request never reached the mock;"
            f" {_outcome(ctx)}",
            call.refs() + _end_refs(ctx),
            mock_requests=len(view.entries),
            mock_alignment=view.offset.said(),
            error_class=call.error_class,
            model=call.model,
        )
        return found
    return found


def backend_after(ctx: Context, name: str) -> str | None:
    """For a wait the backend's rules name (``stalled-backend``, ``slow-first-token``): the
    mock's journal showing it answered at once (no fixture pace, no cut) and the call answering
    ok, so the time after was the backend's, not the mock's. None when the journal says
    otherwise, or is not there."""
    f = ctx.facts
    view = f.join.mock.view() if name in ("stalled-backend", "slow-first-token") else None
    if view is None or any(e.latency_ms or e.streaming_profile for e in view.entries):
        return None
    answered = [
        (e, call)
        for e in view.entries
        if e.call and e.matched and not e.interrupted and (call := f.calls.get(e.call)) and call.ok
    ]
    if not answered:
        return None
    entry, call = answered[-1]
    done = (
        f" and LLM call {call.label} answered ok at {ctx.at(call.response)}"
        if call.response
        else ""
    )
    return (
        f"the mock's journal: it answered {entry.request} at {ctx.at_ms(entry.at_ms):+.0f} ms"
        f" with no pace of its fixture's ({entry.fixture}){done}: the time after was the"
        " backend's, not the mock's"
    )


def _call_failed(ctx: Context, entry: Entry) -> bool:
    call = ctx.facts.calls.get(entry.call) if entry.call else None
    return call is not None and call.response is not None and not call.ok


def _said(call: Call) -> str:
    parts = [call.error_class or call.outcome or "?", call.error_code or ""]
    if call.error_message:
        parts.append(f'"{text(call.error_message, 120)}"')
    return " ".join(p for p in parts if p)
