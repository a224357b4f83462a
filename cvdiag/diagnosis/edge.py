"""The classifier's rule about the edge, and the silence before a stream ended.

A proxy in the path (a ``via`` header, an edge's ids) is context, not a cause: behind one, every
request carries its header, healthy or not. It changes the class only with evidence of the edge
acting: Cloudflare's own mitigation or ``retry-after`` on a failure, a status the client got that
the app did not send, a response the app completed that never reached the client whole, or a
connection closed after a silence as long as a proxy's idle timeout.
"""

from __future__ import annotations

from typing import Final

from cvdiag.diagnosis.describe import text
from cvdiag.diagnosis.facts import Abort
from cvdiag.diagnosis.rules import Context, Finding
from cvdiag.diagnosis.vocabulary import RATE_LIMITED

#: A stream silent this long when its connection closed may have met an idle timeout: shorter
#: silences are any client's pace (proxies' idle timeouts are seconds: nginx 60 s by default,
#: many load balancers 30 to 100 s, a tight one 1 or 2 s).
IDLE_MIN_MS: Final = 1000.0
#: Statuses a proxy answers on its own when its upstream fails it (bad gateway, unavailable,
#: gateway timeout): the client's when the app's own terminal says otherwise.
PROXY_STATUSES: Final = frozenset({502.0, 503.0, 504.0})


def silence_ms(ctx: Context, abort: Abort) -> float | None:
    """How long the stream had been silent when ``abort`` ended it, as far as the tier shows."""
    if abort.silence_ms is not None:
        return abort.silence_ms
    if abort.quiet_since is None:
        return None
    return max(0.0, ctx.offset(abort.ref) - ctx.offset_key(abort.quiet_since))


def idle_said(silence: float) -> str:
    """The words for a connection closed after ``silence`` ms without a byte."""
    return (
        f"the connection was closed after {silence / 1000:.1f} s without a byte; with a proxy"
        " in the path this is its idle timeout (nginx `proxy_read_timeout` is 60 s by default)"
    )


def idle_abort(ctx: Context) -> tuple[Abort, float] | None:
    """The first abort by the peer after a silence long enough to be an idle timeout."""
    for abort in ctx.facts.client_aborts[:1]:
        silence = silence_ms(ctx, abort)
        if silence is not None and silence >= IDLE_MIN_MS:
            return abort, silence
    return None


def edge(ctx: Context) -> Finding:
    f, found = ctx.facts, Finding()
    for value, ref in f.mitigations[:1]:
        found.add(f"Cloudflare answered with cf-mitigated: {value}", [ref], cf_mitigated=value)
    explained = any(c.kind == RATE_LIMITED for c in f.calls.values() if c.response)
    if f.retry_after and not explained and (f.error_status is not None or f.bad_outcome):
        value, ref = f.retry_after[0]
        if f.error_status is not None and f.error_status.status is not None:
            failed, other = f"HTTP {f.error_status.status:g}", f.error_status.ref
        else:
            assert f.bad_outcome is not None
            failed, other = f"outcome {f.bad_outcome.outcome}", f.bad_outcome
        found.add(f"retry-after: {text(value, 20)} with {failed}", [ref, other], retry_after=value)
    via = [(text(value, 60), ref) for value, ref in f.proxies[:1]]
    through = f" through the proxy in the path (via: {via[0][0]})" if via else ""
    _client_saw(ctx, found, through)
    # A silence the backend explains (an exception it caught, an LLM call it left waiting) is
    # its own story: the stalled or error rules tell it.
    waiting = any(ctx.state(c, f.ended) == "waiting" for c in f.calls.values())
    if via and not f.errors and not waiting:
        idle = idle_abort(ctx)
        if idle is not None:
            abort, silence = idle
            found.add(
                f"{idle_said(silence)} (via: {via[0][0]}): {abort.ref.summary} at"
                f" {ctx.at(abort.ref)}",
                [abort.ref, via[0][1]],
                via=via[0][0],
                silence_ms=round(silence, 1),
            )
    if len(f.rays) > 1:
        found.add(
            f"{len(f.rays)} distinct cf-ray ids across the requests (the edge retried or split)",
            f.rays.values(),
            cf_rays=list(f.rays),
        )
    return found


def _client_saw(ctx: Context, found: Finding, through: str) -> None:
    """What the client got that the app did not send: a proxy's own status, or a response the
    app completed cut on the client's side."""
    f = ctx.facts
    done = f.last_completion
    app = done.status if done is not None else None
    for status, ref in f.client_statuses:
        if status in PROXY_STATUSES and status != app:
            said = (
                f"the app answered {done.ref.summary}"
                if done is not None
                else "the app's own terminal says otherwise"
                if f.aborts
                else "the app wrote no terminal"
            )
            found.add(
                f"the client got HTTP {status:g}{through}, a status the app did not send: {said}",
                [ref, *(r for r in [done.ref if done else None] if r is not None)],
                client_status=status,
                app_status=app,
            )
            return
    cut = f.client_cut
    if cut is not None and done is not None and not done.bad and not f.aborts:
        found.add(
            f"the app completed the response ({done.ref.summary}) but the client's stream was cut"
            f"{through} ({cut.summary} at {ctx.at(cut)}): it never reached the client whole",
            [done.ref, cut],
            client_cut=True,
        )
