"""The facts of the client's layer, gathered beside the backend's (``facts.Facts.add``): each
probe line handed to the layers' ``Join`` (the client's view, read on the backend's clock when
a rule asks), an HTTP status the client got, a stream the network cut on its side; and the
backend's envelopes of a browser's own requests (an icon) set aside, as not the test's.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from cvdiag.diagnosis.calls import Ref
from cvdiag.diagnosis.describe import number
from cvdiag.layers.join import Join
from cvdiag.layers.split import browser_own as browser_url
from cvdiag.logs.reading import Record

#: Kept per kind, as ``facts.KEEP``.
_KEEP: Final = 8
#: The backend's envelopes the join reads (besides the ingress): what the client received
#: after, and when each request ended.
_ANCHORS: Final = frozenset(
    {
        "backend.sse.first_byte",
        "backend.sse.event",
        "backend.response.complete",
        "backend.sse.aborted",
        # The mock provider's entries pair with these (``layers.mock``).
        "backend.llm.call.start",
        "backend.llm.call.response",
    }
)
#: A client's own ends of a stream: never the network's cut.
_OWN_ENDS: Final = frozenset({"client-timeout", "left-early"})


class Holder(Protocol):
    join: Join
    client_cut: Ref | None
    client_statuses: list[tuple[float, Ref]]
    browser_own: int

    def ref_of(self, record: Record) -> Ref: ...


def add_probe(facts: Holder, record: Record, boundary: str, meta: dict[str, Any]) -> None:
    facts.join.add(record)
    if boundary.startswith("aimock.") or browser_url(meta.get("url")):
        return
    if boundary == "probe.sse.aborted":
        own = meta.get("cause") in _OWN_ENDS or meta.get("termination_kind") == "timeout"
        if not own:
            facts.client_cut = facts.client_cut or facts.ref_of(record)
        return
    key = "status" if boundary == "probe.network.response" else "response_status"
    status = number(meta.get(key)) if boundary.startswith("probe.network.") else None
    if status is not None and len(facts.client_statuses) < _KEEP:
        facts.client_statuses.append((status, facts.ref_of(record)))


def browser_own(facts: Holder, record: Record) -> bool:
    """Whether ``record`` is the backend's of a browser's own request (its ingress, or an
    envelope under it): counted, handed to the join, and not the test's story."""
    env = record.envelope
    join = facts.join
    boundary = env["boundary"]
    if boundary == "backend.request.ingress":
        join.add(record)
        own = env["span_id"] in join.browser_own_requests
    else:
        # Most logs have no browser's own request: one truth test, no lookup.
        own = bool(join.browser_own_requests) and (
            env.get("parent_span_id") in join.browser_own_requests
        )
        if not own and boundary in _ANCHORS:
            join.add(record)
    facts.browser_own += own
    return own
