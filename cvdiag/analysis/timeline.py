"""One test id's envelopes as a timeline: offsets, the span tree and a text waterfall."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Final

from cvdiag.analysis.describe import describe, edge_headers
from cvdiag.analysis.reading import Record, key_millis

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
    """The indented tree, one row per envelope (long runs of SSE events folded)."""
    events = timeline.events
    if not events:
        return []
    origin, scale = _scale(events)
    rows: list[_Row] = []
    for root in timeline.roots:
        _tree_rows(root, "", "", rows, origin, scale)
    span = max(_end(e) for e in events) - min(0.0, min(_start(e) for e in events))
    slugs = sorted({e.envelope["slug"] for e in events})
    header = (
        f"test id {timeline.test_id}: {len(events)} envelopes over {span:.1f} ms"
        f" (slug {', '.join(slugs)})"
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


def _tree_rows(
    event: Event, lead: str, branch: str, rows: list[_Row], origin: float, scale: float
) -> None:
    rows.append(_row(event, lead + branch, origin, scale))
    child_lead = lead + ("│  " if branch == "├─ " else "   " if branch else "")
    children = event.children
    i = 0
    while i < len(children):
        run = _sse_run(children, i)
        if run > FOLD_EVENTS_OVER:
            last_index = i + run - 1
            folded = children[i + 1 : last_index]
            is_last = last_index == len(children) - 1
            rows.append(_row(children[i], child_lead + "├─ ", origin, scale))
            rows.append(_fold_row(folded, child_lead + "├─ "))
            _tree_rows(
                children[last_index],
                child_lead,
                "└─ " if is_last else "├─ ",
                rows,
                origin,
                scale,
            )
            i += run
            continue
        last = i == len(children) - 1
        _tree_rows(children[i], child_lead, "└─ " if last else "├─ ", rows, origin, scale)
        i += 1


def _sse_run(children: Sequence[Event], start: int) -> int:
    """How many leaf SSE events stand in a row from ``start``."""
    end = start
    while (
        end < len(children)
        and children[end].envelope["boundary"] == "backend.sse.event"
        and not children[end].children
    ):
        end += 1
    return end - start


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
