"""Test helpers for code that runs inside a request, and for reading what a sink received."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from cvdiag import MemorySink, RequestContext
from cvdiag.core.context import reset_context, set_context
from cvdiag.schema.ids import new_span_id, new_uuid7

Envelope = Mapping[str, Any]


@contextlib.contextmanager
def in_request(test_id: str = "req-1", slug: str = "demo-app") -> Iterator[RequestContext]:
    """What the middleware does for a request: a context whose span is the ingress span."""
    ctx = RequestContext(test_id=test_id, trace_id=new_uuid7(), slug=slug, span_id=new_span_id())
    token = set_context(ctx)
    try:
        yield ctx
    finally:
        reset_context(token)


def of(sink: MemorySink, boundary: str) -> list[Envelope]:
    """The envelopes of ``boundary`` (a snapshot: the heartbeat thread may still append)."""
    return [env for env in list(sink.envelopes) if env["boundary"] == boundary]


def one(sink: MemorySink, boundary: str) -> Envelope:
    found = of(sink, boundary)
    assert len(found) == 1, [env["boundary"] for env in list(sink.envelopes)]
    return found[0]
