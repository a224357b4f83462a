"""The rules that need the client's layer (``probe`` lines, or a runner's words): what the test
saw, read on the backend's clock (``cvdiag.layers``), set beside what the backend did.

- the client's own timeout ran out while an LLM call was outstanding: the call answered later
  (``slow-first-token``: the backend was alive, the client's timeout was shorter than the call)
  or never (``stalled-backend``: both sides agree);
- the stream was held between the backend and the client: the backend had sent its first byte
  and more before the client saw its first event (``edge-interference``);
- a passing test that closed its stream on purpose (``left-early``) is no failure;
- the probe started and never exited, with a request the client saw no end of
  (``probe-runner-crash``);
- the backend completed, SSE reached the page, no first token: a console error
  (``frontend-hydration``), or other content in its place (``strict-harness``).

Each returns nothing without the client's layer: a backend-only log is told what it was.
"""

from __future__ import annotations

from typing import Any, Final

from cvdiag.diagnosis.calls import Call
from cvdiag.diagnosis.describe import ms, text
from cvdiag.diagnosis.rules import Context, Finding
from cvdiag.layers.client import (
    CLIENT_TIMEOUT,
    COMPLETE,
    LEFT_EARLY,
    NETWORK_ERROR,
    ClientView,
    Request,
)
from cvdiag.layers.join import JUNIT
from cvdiag.layers.runner import said as runner_said

#: The client saw the stream's first event at least this long after the backend sent its
#: first byte, beyond the clocks' uncertainty, *and* after the backend had sent more: held on
#: the way (a buffering proxy), not a slow network (loopback and LANs take microseconds to
#: milliseconds) nor a slow reader: a browser's page on a loaded CI runner (two cores, four
#: test workers) read its first event 258 ms after the backend sent it, so 250 called that a
#: held stream. A proxy's hold lasts the whole stream or a buffer's worth, far longer.
HELD_MS: Final = 500.0


def _source(view: ClientView) -> str:
    """What the client's side rests on, for a reason."""
    if view.source == JUNIT:
        request = view.requests[0] if view.requests else None
        return runner_said(request.timeout_ms if request else None, view.words or "")
    return f"the probe's lines, {view.offset.said()}"


def _facts(view: ClientView, **more: Any) -> dict[str, Any]:
    return {"client": view.source, "alignment": view.offset.to_json(), **more}


def _outstanding(ctx: Context, left: float) -> list[Call]:
    """LLM calls begun by ``left`` with neither an answer nor a first token by then."""
    found = []
    for call in ctx.facts.calls.values():
        start = ctx.started(call)
        if start is None or ctx.offset(start) > left:
            continue
        if call.response is not None and ctx.offset(call.response) <= left and not call.cut:
            continue
        first = ctx.first_token_at(call)
        if first is not None and first <= left:
            continue
        found.append(call)
    return found


def _gave_up(ctx: Context) -> tuple[ClientView, Request, float, Call] | None:
    view = ctx.client
    if view is None:
        return None
    for request in view.ended(CLIENT_TIMEOUT):
        if request.end_ms is None:
            continue
        left = ctx.at_ms(request.end_ms)
        calls = _outstanding(ctx, left)
        if calls:
            return view, request, left, calls[0]
    return None


def _waited(request: Request) -> str:
    if request.timeout_ms is not None:
        return f"its own {request.timeout_ms / 1000:g} s timeout"
    waited = request.waited_ms
    return f"its own timeout, after {ms(waited)}" if waited is not None else "its own timeout"


def gave_up_answered_later(ctx: Context) -> Finding:
    """The client's timeout ran out while an LLM call was outstanding, and the call answered
    later: ``slow-first-token``."""
    found = Finding()
    seen = _gave_up(ctx)
    if seen is None:
        return found
    view, request, left, call = seen
    if not call.ok or call.response is None:
        return found
    start = ctx.started(call)
    began = ctx.offset(start) if start is not None else None
    answered = ctx.offset(call.response)
    took = (
        call.latency_ms
        if call.latency_ms is not None
        else (answered - began if began is not None else None)
    )
    found.add(
        f"the client gave up on {_what(request)} at {_when(left)} ({_waited(request)}) while"
        f" LLM call {call.label}{_began(began)} was outstanding; the call answered at"
        f" {_when(answered)}, {ms(took)} after it began: the backend was alive, the client's"
        f" timeout was shorter than the call ({_source(view)})",
        call.refs(),
        **_facts(
            view,
            client_left_ms=round(left, 3),
            client_timeout_ms=request.timeout_ms,
            llm_call=call.to_json(),
            call_took_ms=took,
        ),
    )
    return found


def gave_up_unanswered(ctx: Context) -> Finding:
    """The client's timeout ran out while an LLM call was outstanding that never answered:
    ``stalled-backend``, both sides agreeing."""
    found = Finding()
    seen = _gave_up(ctx)
    if seen is None:
        return found
    view, request, left, call = seen
    if call.ok:
        return found
    start = ctx.started(call)
    began = ctx.offset(start) if start is not None else None
    fate = (
        "was never answered"
        if call.response is None
        else f"was cut ({call.error_class or call.outcome}) at {_when(ctx.offset(call.response))}"
        " without an answer"
    )
    found.add(
        f"the client gave up on {_what(request)} at {_when(left)} ({_waited(request)}) while"
        f" LLM call {call.label}{_began(began)} was outstanding, and the call {fate}: both"
        f" sides agree the backend was waiting on its model ({_source(view)})",
        call.refs(),
        **_facts(
            view,
            client_left_ms=round(left, 3),
            client_timeout_ms=request.timeout_ms,
            llm_call=call.to_json(),
        ),
    )
    return found


def _when(at: float) -> str:
    """An offset as the reasons write it: ``+2000 ms``, ``-8 ms`` (before the first request)."""
    return f"+{at:.0f} ms" if at >= 0 else f"{at:.0f} ms"


def _what(request: Request) -> str:
    method = f"{request.method} " if request.method else ""
    url = text(request.url, 60) if request.url else f"request #{request.index}"
    return f"{method}{url}"


def _began(began: float | None) -> str:
    return f" (begun at {_when(began)})" if began is not None else ""


def held(ctx: Context) -> Finding:
    """The backend sent its first byte and more before the client saw its first event."""
    found, view = Finding(), ctx.client
    if view is None or view.source == JUNIT:
        return found
    slack = HELD_MS + (view.offset.half_width_ms or 0.0)
    for request in view.requests:
        first, sent = request.first_event_ms, request.backend_first_byte_ms
        if first is None or sent is None:
            continue
        more = request.backend_second_event_ms
        done = request.backend_end_ms
        # A stream that reached the client at once was held, whatever the clocks' offset.
        bunched = _bunched(request, view)
        after = (more is not None and more <= first) or (done is not None and done <= first)
        if bunched is None and (first - sent < slack or not after):
            continue
        sent_at, seen_at = ctx.at_ms(sent), ctx.at_ms(first)
        then = (
            f"and completed at {_when(ctx.at_ms(done))}"
            if done is not None and (done <= first or bunched is not None)
            else f"its second event at {_when(ctx.at_ms(more))}"
            if more is not None
            else ""
        )
        via = ctx.facts.proxies[0][0] if ctx.facts.proxies else None
        where = f" (via: {text(via, 60)})" if via else ""
        found.add(
            f"the backend sent its first byte at {_when(sent_at)} {then}, but the client's first"
            f" event came at {_when(seen_at)}, {ms(first - sent)} later"
            + (
                f" and its end within {ms(bunched)} of it: the backend's {ms(done - sent)} of"
                " stream reached the client at once"
                if bunched is not None and done is not None
                else ""
            )
            + ": the stream was held"
            f" between the backend and the client{where}, as a buffering proxy does"
            f" ({_source(view)})",
            [],
            **_facts(
                view,
                backend_first_byte_ms=round(sent_at, 3),
                client_first_event_ms=round(seen_at, 3),
                held_ms=round(first - sent, 3),
            ),
        )
        return found
    return found


def _bunched(request: Request, view: ClientView) -> float | None:
    """How long the client took from the stream's first event to its end, when that was at
    least ``HELD_MS`` shorter than the backend took from its first byte to its end: the stream
    reached the client at once. Both spans are one clock's differences, so this holds whatever
    the offset between the clocks (a held response also bounds that offset loosely: its own
    head is the late answer). A complete request's end is at most the probe's exit."""
    first, sent, done = (
        request.first_event_ms,
        request.backend_first_byte_ms,
        request.backend_end_ms,
    )
    end = request.end_ms if request.end_ms is not None else view.exit_ms
    if request.end != COMPLETE or first is None or sent is None or done is None or end is None:
        return None
    span = end - first
    return span if (done - sent) - span >= HELD_MS else None


def left_early(ctx: Context) -> Finding:
    """A passing test that closed its stream on purpose after what it needed: no failure."""
    found, view, f = Finding(), ctx.client, ctx.facts
    if view is None or view.source == JUNIT or not view.passed:
        return found
    if view.ended(CLIENT_TIMEOUT) or view.ended(NETWORK_ERROR):
        return found
    if f.errors or f.failed_count or f.error_status is not None:
        return found
    if any(not a.termination.by_client for a in f.aborts):
        return found
    backend = f"; the backend saw it leave ({f.aborts[0].ref.summary})" if f.aborts else ""
    early = view.ended(LEFT_EARLY)
    if not early:
        # No cause written (a page closed once its assertion held cuts its fetch unseen): the
        # backend's abort is still no failure of a test that passed, unless a call was waiting.
        end = f.aborts[0].ref if f.aborts else None
        if end is None or any(ctx.state(c, end) == "waiting" for c in f.calls.values()):
            return found
        found.add(
            f"the test passed, and its client left the stream before its end{backend}: a test"
            f" that closes its page or stream once it has what it needs, not a failure"
            f" ({_source(view)})",
            [end],
            **_facts(view, left_early=0, test_outcome="passed"),
        )
        return found
    request = early[0]
    at = ctx.at_ms(request.end_ms) if request.end_ms is not None else None
    when = f" at {_when(at)}" if at is not None else ""
    found.add(
        f"the test passed and closed its stream on purpose after what it needed"
        f" ({_what(request)} left early{when}){backend}: not a failure ({_source(view)})",
        [a.ref for a in f.aborts[:1]],
        **_facts(view, left_early=len(early), test_outcome="passed"),
    )
    return found


def runner_crash(ctx: Context) -> Finding:
    """The probe started and never wrote its exit, and a request has no end the client saw."""
    found, view = Finding(), ctx.client
    if view is None or view.source == JUNIT or not view.started or view.exited:
        return found
    open_ = [r for r in view.requests if r.end is None]
    if not open_:
        return found
    request = open_[0]
    f = ctx.facts
    backend = (
        f"; the backend then found the client gone ({f.aborts[0].ref.summary} at"
        f" {ctx.at(f.aborts[0].ref)})"
        if f.aborts
        else "; the backend's side " + ("completed" if f.last_completion else "has no end")
    )
    sent = f" sent at {_when(ctx.at_ms(request.sent_ms))}" if request.sent_ms is not None else ""
    found.add(
        f"the probe started at {_when(ctx.at_ms(view.start_ms or 0))} and never wrote its exit:"
        f" the test runner died; {_what(request)}{sent} has no end the client saw{backend}"
        f" ({_source(view)})",
        [a.ref for a in f.aborts[:1]],
        **_facts(view, probe_exited=False, open_requests=len(open_)),
    )
    return found


def _page(ctx: Context) -> tuple[ClientView, str] | None:
    """A failed browser test whose backend completed ok and whose page got SSE but showed no
    first token: the view and how the backend's side ended."""
    view, f = ctx.client, ctx.facts
    if view is None or view.source == JUNIT or view.first_token_ms is not None:
        return None
    if not view.failed or view.first_event_ms is None:
        return None
    done = f.last_completion
    if done is None or f.abort_count or f.failed_count or f.error_status is not None:
        return None
    return view, f"the backend completed ok ({done.ref.summary}) and SSE reached the client"


def hydration(ctx: Context) -> Finding:
    found, seen = Finding(), _page(ctx)
    if seen is None or not seen[0].console_errors:
        return found
    view, backend = seen
    error = view.console_errors[0]
    found.add(
        f"{backend}, yet no first token appeared in the page, and it logged a console error at"
        f" {_when(ctx.at_ms(error.at_ms))}: {text(error.message, 160)}"
        f" ({view.console_error_count} in all; {_source(view)})",
        [],
        **_facts(view, console_errors=view.console_error_count),
    )
    return found


def strict(ctx: Context) -> Finding:
    found, seen = Finding(), _page(ctx)
    if seen is None or not seen[0].alternate_content:
        return found
    view, backend = seen
    found.add(
        f"{backend}, yet the page showed no first token, only other content in its place: the"
        f" harness waited for what this page does not render ({_source(view)})",
        [],
        **_facts(view, alternate_content=True),
    )
    return found


def browser_only(ctx: Context) -> Finding:
    """Every request of the test id was the browser's own (an icon): nothing of the test's
    failed."""
    f, found = ctx.facts, Finding()
    if not f.browser_own or f.requests or f.errors:
        return found
    found.add(
        f"only the browser's own requests (an icon, robots.txt: {f.browser_own} envelopes),"
        " which the test never asked for: not the test's",
        [],
        browser_own_envelopes=f.browser_own,
        requests=0,
    )
    return found
