"""``_RequestCtx``: the showcase's per-request identity, over cvdiag's ``RequestContext``.

The showcase's endpoints read it as ``request.state.cvdiag`` and hand it to its helpers; its
tests also build one by hand, outside any request. Either way it carries the cvdiag context its
envelopes are emitted under.
"""

from __future__ import annotations

import re
import time
from typing import Final

from cvdiag.core.context import RequestContext, current_context
from cvdiag.schema.ids import new_uuid7, sanitize_slug

__all__ = ["_RequestCtx", "showcase_test_id"]

_UUID7: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def showcase_test_id(raw: str | bytes | None) -> str:
    """The showcase's rule: a UUIDv7 kept (lowercased), anything else replaced by a fresh one.

    cvdiag's own middleware keeps other ids as join keys (``d4-<slug>-<run>``); the showcase's
    readers expect a UUIDv7 in every envelope, so the face mints one instead.
    """
    if isinstance(raw, bytes):
        raw = raw.decode("latin-1")
    if isinstance(raw, str):
        candidate = raw.strip().lower()
        if len(candidate) == 36 and _UUID7.fullmatch(candidate):
            return candidate
    return new_uuid7()


class _RequestCtx:
    """One request's test id, slug and demo, as the showcase's helpers take them.

    Built by hand (``_RequestCtx(test_id=..., slug=..., demo="default")``) it makes a context of
    its own; the middleware builds it from the request's (``from_context``).
    """

    __slots__ = ("context", "ingress_mono_ns")

    def __init__(self, *, test_id: str, slug: str, demo: str = "default") -> None:
        tid = showcase_test_id(test_id)
        self.context = RequestContext(
            test_id=tid,
            trace_id=tid,  # as the showcase's emitter stamps it
            slug=sanitize_slug(slug) or "unknown",
            demo=sanitize_slug(demo) or "default",
        )
        self.ingress_mono_ns = time.monotonic_ns()

    @classmethod
    def from_context(cls, context: RequestContext) -> _RequestCtx:
        ctx = cls.__new__(cls)
        ctx.context = context
        ctx.ingress_mono_ns = time.monotonic_ns()
        return ctx

    @property
    def test_id(self) -> str:
        return self.context.test_id

    @property
    def slug(self) -> str:
        return self.context.slug

    @property
    def demo(self) -> str:
        return self.context.demo

    def __repr__(self) -> str:
        return f"_RequestCtx(test_id={self.test_id!r}, slug={self.slug!r}, demo={self.demo!r})"

    def in_force(self) -> RequestContext:
        """The context to emit under: the current one when it is this request's (it may be a
        scope's inside it, whose span the envelope then hangs under), else this one's."""
        current = current_context()
        if current is not None and current.test_id == self.context.test_id:
            return current
        return self.context
