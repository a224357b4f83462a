"""The classifier's rule about a stream that broke its protocol (``protocol.py`` follows it).

Checked after the rules that explain a failure (a provider's, the backend's, a stall, a client
gone): a run that lost its terminal event because its LLM call was left waiting is that stall.
What is left is the app's stream itself: it answered 200 and closed without ``RUN_FINISHED`` /
``response.completed`` (the frontend waits forever, or shows nothing), or sent after it.
"""

from __future__ import annotations

from cvdiag.diagnosis.describe import text
from cvdiag.diagnosis.protocol import TERMINALS
from cvdiag.diagnosis.rules import Context, Finding


def protocol_incomplete(ctx: Context) -> Finding:
    found = Finding()
    breach = ctx.facts.protocol.breach
    if breach is None:
        return found
    event = text(breach.event, 60) if breach.event else None
    ends = " or ".join(sorted(TERMINALS[breach.protocol]))
    at = ctx.at(breach.refs[-1])
    if breach.how == "after-terminal":
        reason = (
            f"the {breach.protocol} sent {event} at {at} after its terminal event"
            f" ({breach.refs[0].summary}): a client stops reading at {ends}"
        )
    else:
        last = f"its last event was {event}" if event else "it sent no event"
        reason = (
            f"the {breach.protocol}'s response completed ({breach.refs[-1].summary}) without"
            f" {ends}: {last}; the frontend waits for an end that never comes"
        )
    found.add(reason, breach.refs, protocol=breach.protocol, breach=breach.how, last_event=event)
    return found
