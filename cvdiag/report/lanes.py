"""A story as the waterfall's lanes: one per request, agent scope and LLM call, and one per
request the mock provider served (its journal's ``aimock.*`` lines), under the call that sent it.

Spans pair up as the middleware writes them: a request is its ingress's span, and its first
byte, events and terminal hang under it; an agent scope is its enter's span, closed by the next
exit under the same parent; an LLM call is its start's span, with its heartbeats and response
under it. At the default tier there is no ingress or start: the bar is drawn back from the
terminal's or response's ``duration_ms``. A bar that never ends in the log runs to its end,
marked open. Each lane is a request, then the scopes and calls under it, in time order.

The mock provider's journal holds one time per request (when it decided on a fixture), so its
lane is that moment with the decision's marks, never a bar to an end it did not record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from cvdiag.diagnosis.describe import number, text
from cvdiag.layers.mock import MockJoin
from cvdiag.report.story import Row, Story
from cvdiag.report.style import duration

TERMINALS: Final = ("backend.response.complete", "backend.sse.aborted")
#: An agent scope's ``terminal_outcome`` as a bar's outcome (its colour; the word is shown too).
_AGENT_OUTCOMES: Final = {"ok": "ok", "error": "err", "cancelled": "aborted", "timeout": "timeout"}


@dataclasses.dataclass(slots=True)
class Mark:
    """A moment on a lane: ``kind`` is first-byte, complete, aborted, error, split (where a
    failure split from a passing attempt of its test) or other."""

    at: float
    kind: str
    label: str


@dataclasses.dataclass(slots=True)
class Lane:
    kind: str  # request, agent, call, provider
    span: str
    parent: str | None
    label: str
    start: float
    #: The first byte (a request) or first token (a call), where the log says.
    first: float | None = None
    end: float | None = None
    #: ok, err, timeout, aborted, or open (never ended in the log).
    outcome: str = "open"
    status: str = "open: no end in the log"
    depth: int = 0
    marks: list[Mark] = dataclasses.field(default_factory=list)
    ticks: Sequence[float] = ()
    events: Sequence[float] = ()
    #: No first byte or token: the whole bar is waiting (else, with none, the tier cannot say).
    waited: bool = False


@dataclasses.dataclass(slots=True)
class Waterfall:
    lanes: list[Lane]
    #: The time shown, in ms from the story's first envelope: [origin, until].
    origin: float
    until: float
    #: Moments with no lane to stand on (an error under an unknown span).
    loose: list[Mark]


def build(story: Story, *, first_bytes: bool = True) -> Waterfall:
    """The lanes of ``story``; ``first_bytes``: the log's tier writes first bytes (verbose and
    up), so a request without one never sent a byte; at the default tier nobody can say."""
    rows = [row for row in story.rows if row.record is not None]
    lanes: dict[str, Lane] = {}
    loose: list[Mark] = []
    last = max((row.offset_ms for row in rows), default=0.0)
    probe = [row for row in rows if _env(row)["boundary"].startswith("probe.")]
    rows = [row for row in rows if not _env(row)["boundary"].startswith("probe.")]
    for row in rows:  # requests first: at the default tier a terminal is all there is of one
        _request(row, lanes)
    for row in rows:
        _inside(row, lanes, loose)
    provider(rows, lanes)
    for span, offsets in story.events.items():
        if span in lanes:
            lanes[span].events = offsets
    for span, offsets in story.beats.items():
        if span in lanes:
            lanes[span].ticks = offsets
    ordered = _client(probe) + _ordered(list(lanes.values()))
    last = max([last, *(row.offset_ms for row in probe)])
    origin = min([0.0, *(lane.start for lane in ordered)])
    until = max([last, *(lane.end for lane in ordered if lane.end is not None)])
    for lane in ordered:
        if lane.end is None:
            lane.end = until
        # A call's first token is in its response (streamed calls): one without it, or a
        # request without a first byte at a tier that writes them, waited all along.
        lane.waited = lane.first is None and (
            lane.kind == "call" or (first_bytes and lane.kind == "request")
        )
    return Waterfall(ordered, origin, max(until, origin + 1.0), loose)


def _env(row: Row) -> dict[str, Any]:
    assert row.record is not None
    return row.record.envelope


def _meta(env: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = env.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _back(row: Row, env: Mapping[str, Any]) -> float:
    """Where a span began, from an end that carries its duration."""
    duration = number(env.get("duration_ms"))
    return row.offset_ms - duration if duration is not None and duration > 0 else row.offset_ms


def _request(row: Row, lanes: dict[str, Lane]) -> None:
    env = _env(row)
    boundary, meta = env["boundary"], _meta(env)
    if boundary == "backend.request.ingress":
        label = f"{text(meta.get('method'), 10)} {text(meta.get('path'), 80)}"
        lanes.setdefault(
            env["span_id"], Lane("request", env["span_id"], None, label, row.offset_ms)
        )
    elif boundary in TERMINALS:
        span = env.get("parent_span_id") or env["span_id"]
        if span not in lanes:
            lanes[span] = Lane("request", span, None, "request", _back(row, env))


def _inside(row: Row, lanes: dict[str, Lane], loose: list[Mark]) -> None:
    env = _env(row)
    boundary, meta, at = env["boundary"], _meta(env), row.offset_ms
    span, parent = env["span_id"], env.get("parent_span_id")
    owner = lanes.get(parent) if isinstance(parent, str) else None
    if boundary == "backend.agent.enter":
        label = f"agent {text(meta.get('agent_name'), 60)}"
        lanes.setdefault(span, Lane("agent", span, parent, label, at))
    elif boundary == "backend.agent.exit":
        scope = next(
            (
                lane
                for lane in reversed(lanes.values())
                if lane.kind == "agent" and lane.parent == parent and lane.end is None
            ),
            None,
        )
        if scope is None:  # an exit without its enter (not kept, or never written)
            scope = _put(lanes, Lane("agent", span, parent, "agent", _back(row, env)))
        ended = text(meta.get("terminal_outcome") or env["outcome"], 24)  # bounded: a log's
        _end(scope, at, _AGENT_OUTCOMES.get(ended, env["outcome"]), f"{ended} after {_ms(env)}")
    elif boundary == "backend.llm.call.start":
        label = f"{text(meta.get('provider'), 24)}/{text(meta.get('model'), 60)}"
        lanes.setdefault(span, Lane("call", span, parent, label, at))
    elif boundary == "backend.llm.call.response":
        call = owner if owner is not None and owner.kind == "call" else None
        if call is None:  # no start: the call is its parent span, unless that is a lane
            label = f"{text(meta.get('provider'), 24)}/{text(meta.get('model'), 60)}"
            key = span if owner is not None or not parent else parent
            under = parent if owner is not None else None
            call = _put(lanes, Lane("call", key, under, label, _back(row, env)))
        first = number(meta.get("first_token_delta_ms"))
        if first is not None and first >= 0:
            call.first = call.start + first
        error = meta.get("error_class")
        said = f"{text(env['outcome'], 24)} after {_ms(env)}"
        _end(call, at, env["outcome"], f"{said} {text(error, 40)}" if error else said)
        kind = "complete" if env["outcome"] == "ok" and not error else "error"
        call.marks.append(Mark(at, kind, f"answered {call.status} at +{at:.1f} ms"))
    elif boundary == "backend.sse.first_byte" and owner is not None:
        owner.first = at
        owner.marks.append(Mark(at, "first-byte", f"first byte at +{at:.1f} ms"))
    elif boundary in TERMINALS:
        request = lanes[parent if isinstance(parent, str) and parent in lanes else span]
        if boundary == "backend.sse.aborted":
            kind = text(meta.get("termination_kind"), 32)
            _end(
                request,
                at,
                "aborted",
                f"aborted {kind} after {text(meta.get('bytes_before_abort'), 16)} bytes",
            )
            request.marks.append(Mark(at, "aborted", f"aborted ({kind}) at +{at:.1f} ms"))
        else:
            status = f"HTTP {text(meta.get('http_status'), 6)} {text(env['outcome'], 24)}"
            _end(request, at, env["outcome"], f"{status} after {_ms(env)}")
            request.marks.append(Mark(at, "complete", f"{status} at +{at:.1f} ms"))
    elif boundary == "backend.error.caught":
        mark = Mark(at, "error", f"{text(meta.get('exception_type'), 60)} at +{at:.1f} ms")
        target = owner if owner is not None else _covering(lanes, at)
        (target.marks if target is not None else loose).append(mark)
    elif boundary.startswith("aimock."):
        return  # the mock provider's lane (``provider``)
    elif boundary not in (
        "backend.request.ingress",
        "backend.sse.event",
        "backend.llm.call.heartbeat",
    ):
        target = owner if owner is not None else _covering(lanes, at)
        mark = Mark(at, "other", f"{text(boundary, 60)} at +{at:.1f} ms")
        (target.marks if target is not None else loose).append(mark)


def provider(rows: Sequence[Row], lanes: dict[str, Lane]) -> None:
    """A lane per request the mock provider served, under the LLM call that sent it: its one
    moment (the decision), what it matched, how its fixture paced or cut the answer."""
    entries: dict[str, list[Row]] = {}
    join = MockJoin()
    for row in rows:
        env = _env(row)
        boundary = env["boundary"]
        if boundary.startswith(("aimock.", "backend.llm.call.")):
            join.add(row.record)  # type: ignore[arg-type]  # rows here all hold a record
        if boundary.startswith("aimock."):
            span = (
                env["span_id"]
                if boundary == "aimock.request.ingress"
                else env.get("parent_span_id")
            )
            if isinstance(span, str) and (span in entries or len(entries) < 64):
                entries.setdefault(span, []).append(row)
    view = join.view()
    if view is None:
        return
    for entry in view.entries:
        mine = entries.get(entry.span)
        if not mine:
            continue
        at = min(row.offset_ms for row in mine)
        parent = entry.call if entry.call in lanes else None
        matched = entry.fixture or "no fixture"
        label = f"{text(entry.method, 10)} {text(entry.path, 60)}: {text(matched, 80)}"
        lane = _put(lanes, Lane("provider", entry.span, parent, label, at, end=at))
        timing = entry.timing()
        said = f"{'matched ' + text(matched, 80) if entry.matched else 'no fixture matched'}"
        if entry.interrupted:
            lane.outcome = "aborted"
            said += f", cut its stream ({text(entry.interrupted, 40)})"
        else:
            lane.outcome = "ok" if entry.matched else "err"
        status = f"HTTP {entry.status:.0f}" if entry.status is not None else "HTTP ?"
        lane.status = (
            f"{status}, {said}{'; ' + timing if timing else ''}; its answer's times are not"
            " in the journal"
        )
        kind = "aborted" if entry.interrupted else "complete" if entry.matched else "error"
        lane.marks.append(Mark(at, kind, f"the mock decided at +{at:.1f} ms: {lane.status}"))


#: How a request ended on the client's side, as a bar's outcome.
_CLIENT_ENDS: Final = {"client-timeout": "timeout", "network-error": "err", "left-early": "ok"}


def _client(rows: list[Row]) -> list[Lane]:
    """What the client saw, on the backend's clock (the story placed the probe's rows so): one
    lane per request it sent (from its send to how it ended, its head, its first event and its
    own timeout marked), under its session (the probe's start to its exit)."""
    session: Lane | None = None
    lanes: dict[int, Lane] = {}
    for row in rows:
        env = _env(row)
        boundary, meta, at = env["boundary"], _meta(env), row.offset_ms
        if boundary == "probe.start":
            session = session or Lane("client", "probe", None, "the test (its probe)", at)
            continue
        if session is None:
            session = Lane("client", "probe", None, "the test (its probe)", at)
        index = number(meta.get("message_index"))
        if (
            index is None
            or boundary in ("probe.exit", "probe.console.error")
            or (boundary.startswith("probe.dom."))
        ):
            _session(session, boundary, meta, at)
            continue
        lane = lanes.get(int(index))
        if lane is None:
            lane = lanes[int(index)] = Lane("client", f"probe#{index:g}", "probe", "a request", at)
            lane.depth = 1
        _client_line(lane, boundary, meta, at)
    return [session, *lanes.values()] if session is not None else []


def _session(lane: Lane, boundary: str, meta: Mapping[str, Any], at: float) -> None:
    if boundary == "probe.exit":
        outcome = text(meta.get("test_outcome") or meta.get("terminal_outcome"), 24)
        _end(lane, at, "ok" if outcome in ("passed", "ok") else "err", f"the test {outcome}")
        lane.marks.append(Mark(at, "complete", f"the probe exited ({outcome}) at +{at:.1f} ms"))
    elif boundary == "probe.dom.firsttoken":
        lane.first = at
        lane.marks.append(Mark(at, "first-byte", f"first token in the page at +{at:.1f} ms"))
    elif boundary == "probe.console.error":
        said = text(meta.get("message_scrubbed"), 60)
        lane.marks.append(Mark(at, "error", f"console error at +{at:.1f} ms: {said}"))


def _client_line(lane: Lane, boundary: str, meta: Mapping[str, Any], at: float) -> None:
    if boundary == "probe.message.send":
        lane.start = at
        lane.label = f"client {text(meta.get('method'), 10)} {text(meta.get('url'), 80)}"
        timeout = number(meta.get("timeout_ms"))
        if timeout is not None and timeout > 0:
            lane.marks.append(
                Mark(at + timeout, "timeout", f"the client's {timeout:,.0f} ms timeout")
            )
    elif boundary == "probe.network.response":
        lane.marks.append(Mark(at, "first-byte", f"the client got the head at +{at:.1f} ms"))
        _end(lane, at, "ok", f"HTTP {text(meta.get('status'), 6)}")
        lane.end = None  # the body may still come
    elif boundary == "probe.sse.event":
        if lane.first is None or at < lane.first:
            lane.first = at
            lane.marks.append(Mark(at, "first-byte", f"the client's first event at +{at:.1f} ms"))
    elif boundary in ("probe.sse.aborted", "probe.network.error"):
        cause = text(meta.get("cause") or meta.get("error_class"), 40)
        _end(lane, at, _CLIENT_ENDS.get(cause, "aborted"), f"the client's side ended: {cause}")
        lane.marks.append(Mark(at, "aborted", f"{cause} at +{at:.1f} ms"))


def _end(lane: Lane, at: float, outcome: str, status: str) -> None:
    lane.end = at
    lane.outcome = outcome if outcome in ("ok", "err", "timeout", "aborted") else "ok"
    lane.status = status


def _ms(env: Mapping[str, Any]) -> str:
    figure = number(env.get("duration_ms"))
    return "?" if figure is None else duration(figure)


def _put(lanes: dict[str, Lane], lane: Lane) -> Lane:
    """Add a lane under its span without replacing one there (span ids come from the log: an
    exit's or a response's may be a request's), under a key of its own if need be."""
    key = lane.span
    while key in lanes:
        key += "'"
    lanes[key] = lane
    return lane


def _covering(lanes: dict[str, Lane], at: float) -> Lane | None:
    """The latest request that began by ``at``."""
    requests = [lane for lane in lanes.values() if lane.kind == "request" and lane.start <= at]
    return max(requests, key=lambda lane: lane.start, default=None)


def _ordered(lanes: list[Lane]) -> list[Lane]:
    """Each request, then what hangs under it (depth first, in time order); then the rest."""
    children: dict[str | None, list[Lane]] = {}
    spans = {lane.span for lane in lanes}
    for lane in sorted(lanes, key=lambda lane: lane.start):
        parent = lane.parent if lane.parent in spans else None
        children.setdefault(parent, []).append(lane)
    out: list[Lane] = []
    seen: set[int] = set()
    roots = sorted(children.get(None, []), key=lambda lane: (lane.kind != "request", lane.start))
    # Depth first without recursion (a hostile log may nest without end, or in a circle).
    stack = [(lane, 0) for lane in reversed(roots + lanes)]
    while stack:
        lane, depth = stack.pop()
        if id(lane) in seen:
            continue
        seen.add(id(lane))
        lane.depth = min(depth, 8)
        out.append(lane)
        stack.extend((child, depth + 1) for child in reversed(children.get(lane.span, [])))
    return out
