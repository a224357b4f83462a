"""One test id's envelopes as a timeline: offsets, the span tree and a text waterfall."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Final

from cvdiag.diagnosis.describe import describe, edge_headers
from cvdiag.logs.reading import Record, key_millis

#: Runs of sibling SSE events longer than this are folded in the text tree (never in JSON).
FOLD_EVENTS_OVER: Final = 3
WATERFALL_WIDTH: Final = 32


class Clock:
    """Offsets from an anchor envelope, as precise as the clocks allow.

    ``ts`` has millisecond resolution and is comparable across hosts; ``mono_ns`` has nanosecond
    resolution but is comparable only on one host. An envelope's offset comes from ``mono_ns``
    when that agrees with ``ts`` (to the ms resolution plus 0.1 % for clock slewing), else from
    ``ts``.
    """

    def __init__(self, anchor: tuple[str, int]) -> None:
        self._ts = key_millis(anchor[0])
        self._mono = anchor[1]
        self._cache: dict[str, float] = {}

    def offset_ms(self, key: tuple[str, int]) -> float:
        wall = self._cache.get(key[0])
        if wall is None:
            wall = self._cache[key[0]] = key_millis(key[0]) - self._ts
        mono = (key[1] - self._mono) / 1e6
        if abs(mono - wall) <= 2.0 + abs(wall) / 1000:
            return mono
        return wall


@dataclasses.dataclass(slots=True)
class Event:
    record: Record
    offset_ms: float
    depth: int = 0
    children: list[Event] = dataclasses.field(default_factory=list)

    @property
    def envelope(self) -> dict[str, Any]:
        return self.record.envelope

    @property
    def duration_ms(self) -> float | None:
        value = self.envelope.get("duration_ms")
        return None if value is None else float(value)


@dataclasses.dataclass(slots=True)
class Timeline:
    test_id: str
    #: Every envelope, in time order.
    events: list[Event]
    #: The tree's top level (request spans and orphans), in time order.
    roots: list[Event]


def build(test_id: str, records: Sequence[Record]) -> Timeline:
    """The timeline of ``records`` (all of one test id, in time order).

    A span is the first envelope carrying its ``span_id``; an envelope hangs under the span its
    ``parent_span_id`` names, or at the top when that span is not in the log.
    """
    if not records:
        return Timeline(test_id, [], [])
    clock = Clock(records[0].key)
    events = [Event(record, clock.offset_ms(record.key)) for record in records]
    # Offsets are what a reader sees, top to bottom, as time; where the clocks disagree (``ts``
    # from one host, ``mono_ns`` from another) they can differ from the merge order, so they
    # decide (stably: equal offsets keep the log's order).
    events.sort(key=_offset)
    spans: dict[str, Event] = {}
    for event in events:
        spans.setdefault(event.envelope["span_id"], event)
    roots: list[Event] = []
    for event in events:
        parent = spans.get(event.envelope.get("parent_span_id") or "")
        if parent is None or parent is event or _descends(parent, event, spans):
            roots.append(event)
        else:
            parent.children.append(event)
    for root in roots:
        _set_depths(root, 0)
    return Timeline(test_id, events, roots)


def _offset(event: Event) -> float:
    return event.offset_ms


def _descends(candidate: Event, ancestor: Event, spans: dict[str, Event]) -> bool:
    """Whether ``candidate`` already hangs (transitively) under ``ancestor``: a cycle guard."""
    seen = 0
    node: Event | None = candidate
    while node is not None and seen <= len(spans):
        if node is ancestor:
            return True
        node = spans.get(node.envelope.get("parent_span_id") or "")
        seen += 1
    return False


def _set_depths(root: Event, depth: int) -> None:
    stack = [(root, depth)]
    while stack:
        event, level = stack.pop()
        event.depth = level
        stack.extend((child, level + 1) for child in event.children)


# --- JSON -----------------------------------------------------------------------------------


def to_json(timeline: Timeline) -> dict[str, Any]:
    """``{"test_id", "events"}``: every envelope in time order, with its offset and depth."""
    return {
        "test_id": timeline.test_id,
        "events": [
            {
                "offset_ms": round(event.offset_ms, 3),
                "depth": event.depth,
                "boundary": event.envelope["boundary"],
                "outcome": event.envelope["outcome"],
                "duration_ms": event.envelope.get("duration_ms"),
                "span_id": event.envelope["span_id"],
                "parent_span_id": event.envelope.get("parent_span_id"),
                "ts": event.envelope["ts"],
                "summary": describe(event.envelope),
                "metadata": event.envelope["metadata"],
                "edge_headers": edge_headers(event.envelope),
                "source": event.record.where,
            }
            for event in timeline.events
        ],
    }


# --- text -----------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Row:
    offset: str
    label: str
    outcome: str
    duration: str
    bar: str
    details: str


def render(timeline: Timeline) -> list[str]:
    """One row per envelope in time order (long runs of SSE events folded), indented and drawn
    by depth in the span tree: a row hangs under the nearest row above it one level less deep,
    and says which row it hangs under when that is not the one (see ``_rows``)."""
    events = timeline.events
    if not events:
        return []
    origin, scale = _scale(events)
    rows = _rows(timeline, origin, scale)
    span = max(_end(e) for e in events) - min(0.0, min(_start(e) for e in events))
    # "unknown" is the slug of an app that named none: nothing to say.
    slugs = sorted({e.envelope["slug"] for e in events} - {"unknown"})
    header = f"test id {timeline.test_id}: {len(events)} envelopes over {span:.1f} ms" + (
        f" (slug {', '.join(slugs)})" if slugs else ""
    )
    titles = _Row("offset_ms", "boundary", "outcome", "dur_ms", "waterfall", "details")
    widths = [max(len(getattr(row, f)) for row in [titles, *rows]) for f in _Row.__slots__]
    lines = [header, ""]
    for row in [titles, *rows]:
        cells = [getattr(row, f) for f in _Row.__slots__]
        lines.append(
            "  ".join(
                (cell.rjust(width) if i in (0, 3) else cell.ljust(width))
                for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
    return lines


def _start(event: Event) -> float:
    duration = event.duration_ms
    return event.offset_ms - duration if duration is not None else event.offset_ms


def _end(event: Event) -> float:
    return event.offset_ms


def _scale(events: Sequence[Event]) -> tuple[float, float]:
    origin = min(0.0, min(_start(e) for e in events))
    end = max(_end(e) for e in events)
    return origin, WATERFALL_WIDTH / max(end - origin, 1e-9)


def _bar(event: Event, origin: float, scale: float) -> str:
    """Scopes with a duration are a bar ending at the envelope (which is written at their end);
    other envelopes are a tick where they happened."""
    cells = [" "] * WATERFALL_WIDTH
    if event.duration_ms is not None:
        first = min(WATERFALL_WIDTH - 1, math.floor((_start(event) - origin) * scale))
        last = max(first + 1, math.ceil((event.offset_ms - origin) * scale))
        for i in range(first, min(last, WATERFALL_WIDTH)):
            cells[i] = "█"
    else:
        at = min(WATERFALL_WIDTH - 1, math.floor((event.offset_ms - origin) * scale))
        cells[at] = "╵"
    return "│" + "".join(cells) + "│"


def _row(event: Event, label: str, origin: float, scale: float) -> _Row:
    env = event.envelope
    duration = env.get("duration_ms")
    return _Row(
        offset=f"{event.offset_ms:.1f}",
        label=label + env["boundary"],
        outcome=env["outcome"],
        duration="" if duration is None else f"{duration:g}",
        bar=_bar(event, origin, scale),
        details=describe(env),
    )


def _rows(timeline: Timeline, origin: float, scale: float) -> list[_Row]:
    """The rows in time order. Users read offsets top to bottom as time, so a span's subtree is
    not kept together: a streaming call's response comes after the first bytes its tokens made,
    though it hangs under the agent and they under the request. The drawing is the tree's, by
    depth: a row's branch is ``├─`` while its parent has a row further down, ``└─`` at its last,
    and ``│`` continues each ancestor's line while that ancestor has siblings still to come."""
    parent: dict[int, Event] = {}
    for event in timeline.events:
        for child in event.children:
            parent[id(child)] = event
    position = {id(event): i for i, event in enumerate(timeline.events)}
    # The position of each span's last child: its line runs down to there.
    last_child = {
        id(event): position[id(event.children[-1])] for event in timeline.events if event.children
    }
    folds, hidden = _folds(timeline.events, parent)
    rows: list[_Row] = []
    above: dict[int, Event] = {}  # the latest row at each depth: where the eye looks for a parent
    for i, event in enumerate(timeline.events):
        if id(event) in hidden:
            continue
        chain: list[Event] = []  # ancestors, nearest first
        node = parent.get(id(event))
        while node is not None:
            chain.append(node)
            node = parent.get(id(node))
        lead = "".join(
            "│  " if last_child[id(ancestor)] > i else "   " for ancestor in reversed(chain[1:])
        )
        folded = folds.get(id(event))
        if folded is not None:  # the run's first was shown; its last is still to come
            rows.append(_fold_row(folded, lead + ("├─ " if chain else "")))
            continue
        branch = ("├─ " if last_child[id(chain[0])] > i else "└─ ") if chain else ""
        row = _row(event, lead + branch, origin, scale)
        if chain and above.get(event.depth - 1) is not chain[0]:
            # Calls side by side, or a span whose first envelope came later: indentation alone
            # would hang this row under the wrong one.
            under = chain[0]
            row.details += f"  (under {under.envelope['boundary']} at {under.offset_ms:.1f} ms)"
        above[event.depth] = event
        rows.append(row)
    return rows


def _folds(
    events: Sequence[Event], parent: dict[int, Event]
) -> tuple[dict[int, list[Event]], set[int]]:
    """Runs of more than ``FOLD_EVENTS_OVER`` leaf SSE events of one span with no other row
    between them: the first and last of each run are shown, the rest folded into one row where
    the second stood. A row of another span (a heartbeat mid-stream) ends a run, so a folded
    row's "until" never passes the offset of the row below it. Returns the folded events by
    that second event's id, and the ids of the events that are not rows."""
    folds: dict[int, list[Event]] = {}
    hidden: set[int] = set()
    i = 0
    while i < len(events):
        end = i
        while (
            end < len(events)
            and _sse_leaf(events[end])
            and parent.get(id(events[end])) is parent.get(id(events[i]))
        ):
            end += 1
        if end - i > FOLD_EVENTS_OVER:
            folded = list(events[i + 1 : end - 1])
            folds[id(folded[0])] = folded
            hidden.update(id(e) for e in folded[1:])
        i = max(end, i + 1)
    return folds, hidden


def _sse_leaf(event: Event) -> bool:
    return event.envelope["boundary"] == "backend.sse.event" and not event.children


def _fold_row(folded: Sequence[Event], label: str) -> _Row:
    size = 0
    for event in folded:
        value = event.envelope["metadata"].get("payload_size_bytes")
        if isinstance(value, int) and not isinstance(value, bool):
            size += value
    first, last = folded[0], folded[-1]
    return _Row(
        offset=f"{first.offset_ms:.1f}",
        label=f"{label}… {len(folded)} more backend.sse.event",
        outcome="",
        duration="",
        bar="",
        details=f"until {last.offset_ms:.1f} ms, {size}B",
    )
