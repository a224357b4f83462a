"""The forms of the middleware's own envelopes, serialized once per process
(cvdiag/pipeline/template.py fills them in).

Each boundary's envelope is built and serialized by the one path every envelope takes
(``envelope.build``, ``orjson``) with markers where values vary, and the markers are then
replaced by ``%`` slots. The event's form has two levels: the context's ``%s`` (a request fills
them once) and the event's own ``%%…``. The others are written once per request and are used at
one level (``*_ONCE``): every value in the envelope's key order, in one ``bytes %``.
"""

from __future__ import annotations

from typing import Final

import orjson

from cvdiag.core.context import RequestContext
from cvdiag.pipeline import envelope as _envelope

#: Fields the request fills in once, in the envelope's key order.
_CONTEXT: Final = ("test_id", "trace_id", "parent_span_id", "slug", "demo")


def _marker(name: str) -> str:
    # Never in a serialized envelope otherwise: orjson writes NUL as \u0000.
    return f"\x00cvdiag-slot:{name}\x00"


def _format(
    boundary: str,
    *,
    duration: bool,
    outcome: str | None,
    metadata: tuple[tuple[str, bytes], ...],
    span: bytes = b'"%%016x"',
) -> bytes:
    """``boundary``'s envelope with two levels of slots: the context's (``%s``, filled once per
    request) and the envelope's own (``%%…``, left for each envelope). ``outcome`` None is a
    slot too; a string is the boundary's one outcome."""
    fields: dict[str, bytes] = dict.fromkeys(_CONTEXT, b"%s")
    fields |= {"span_id": span, "ts": b'"%%s"', "mono_ns": b"%%d"}
    if duration:
        fields["duration_ms"] = b"%%d"
    if outcome is None:
        fields["outcome"] = b'"%%s"'
    fields["edge_headers"] = b"%%s"
    fields |= {key: b"%" + slot for key, slot in metadata}
    env = _envelope.build(
        boundary,
        outcome=_marker("outcome") if outcome is None else outcome,
        metadata={key: _marker(key) for key, _ in metadata},
        duration_ms=None,
        context=RequestContext(
            test_id=_marker("test_id"),
            trace_id=_marker("trace_id"),
            slug=_marker("slug"),
            demo=_marker("demo"),
        ),
        span_id=_marker("span_id"),
        parent_span_id=_marker("parent_span_id"),
        edge_headers={},
    )
    env |= {"ts": _marker("ts"), "mono_ns": _marker("mono_ns")}
    env["edge_headers"] = _marker("edge_headers")
    if duration:
        env["duration_ms"] = _marker("duration_ms")
    # Constant text is escaped for both levels of formatting.
    text = orjson.dumps(env).replace(b"%", b"%%%%")
    at = {}
    for name in fields:
        encoded = orjson.dumps(_marker(name))
        if text.count(encoded) != 1:
            raise AssertionError(f"{boundary}: the slot {name} is not in the envelope once")
        at[name] = text.index(encoded)
    # Each level's arguments are passed in the envelope's key order: check it is still that.
    order = sorted(fields, key=at.__getitem__)
    own = [name for name in fields if name not in _CONTEXT]
    if [n for n in order if n in _CONTEXT] != list(_CONTEXT) or [
        n for n in order if n not in _CONTEXT
    ] != own:
        raise AssertionError(f"{boundary}: the slots are not in the envelope's key order")
    for name, slot in fields.items():
        text = text.replace(orjson.dumps(_marker(name)), slot)
    return text


_INGRESS: Final = _format(
    "backend.request.ingress",
    duration=False,
    outcome="info",
    metadata=(("method", b"%s"), ("path", b"%s"), ("content_length", b"%s")),
    span=b"%%s",  # the request's own span id, which its other envelopes hang under
)
EVENT: Final = _format(
    "backend.sse.event",
    duration=False,
    outcome="info",
    metadata=(("event_type", b"%s"), ("payload_size_bytes", b"%d"), ("sequence_num", b"%d")),
)
_FIRST_BYTE: Final = _format(
    "backend.sse.first_byte",
    duration=False,
    outcome="info",
    metadata=(("delta_ms_from_ingress", b"%d"),),
)
_COMPLETE_METADATA: Final = (
    ("http_status", b"%d"),
    ("content_length", b"%d"),
    ("total_duration_ms", b"%d"),
    ("sse_event_count", b"%d"),
)
_ABORTED_METADATA: Final = (
    ("termination_kind", b"%s"),
    ("bytes_before_abort", b"%d"),
    ("termination_cause", b"%s"),
    ("silence_ms", b"%d"),
)
#: A stream's terminals naming its first and last events (an SSE body of typed events).
_NAMED: Final = (("first_event_type", b"%s"), ("last_event_type", b"%s"))
_COMPLETE: Final = _format(
    "backend.response.complete", duration=True, outcome=None, metadata=_COMPLETE_METADATA
)
_ABORTED: Final = _format(
    "backend.sse.aborted", duration=True, outcome="err", metadata=_ABORTED_METADATA
)
_COMPLETE_NAMED: Final = _format(
    "backend.response.complete",
    duration=True,
    outcome=None,
    metadata=(*_COMPLETE_METADATA, *_NAMED),
)
_ABORTED_NAMED: Final = _format(
    "backend.sse.aborted",
    duration=True,
    outcome="err",
    metadata=(*_ABORTED_METADATA, *_NAMED),
)


def _one_level(form: bytes) -> bytes:
    """A template with its context slots left as plain ``%s`` too: an envelope a request
    writes once is one ``bytes %`` of every value in the envelope's key order."""
    return form % ((b"%s",) * len(_CONTEXT))


# Each one's arguments, in key order: test_id, trace_id, span_id, parent_span_id, slug, demo,
# ts, mono_ns, then its own (duration_ms, outcome, edge_headers, metadata) as they come.
INGRESS_ONCE: Final = _one_level(_INGRESS)
FIRST_BYTE_ONCE: Final = _one_level(_FIRST_BYTE)
COMPLETE_ONCE: Final = _one_level(_COMPLETE)
ABORTED_ONCE: Final = _one_level(_ABORTED)
COMPLETE_NAMED_ONCE: Final = _one_level(_COMPLETE_NAMED)
ABORTED_NAMED_ONCE: Final = _one_level(_ABORTED_NAMED)
