"""A story's lanes drawn to scale: each lane a label (with its outcome in words) and a track.

A track is an SVG whose x axis is the test id's time, ``WIDTH`` units wide, stretched to the
page's width; the script zooms by narrowing every track's ``viewBox`` at once, so bars, ticks and
marks stay to scale. Marks are lines drawn the same width at any zoom. A bar is hatched while
it waits (before its first byte or first token) and solid once it streams; its end is the mark
of its terminal. SSE events are a density strip under their request's bar.

Its size is bounded whatever the log holds: a lane's texts are cut, its heartbeats drawn as one
path of at most ``MAX_TICKS`` ticks, its marks at most ``MAX_MARKS``, so a lane takes at most
``LANE_MAX`` characters; lanes are drawn while the waterfall holds under ``BUDGET``, the rest
counted in a note. A waterfall takes at most ``MAX_SIZE``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from cvdiag.report.lanes import Lane, Mark, Waterfall
from cvdiag.report.markup import WIDEST, attr, num, text
from cvdiag.report.style import duration

WIDTH: Final = 1000.0
#: Bins of the SSE density strip across the whole time shown.
BINS: Final = 200
#: Ruler labels across the track.
TICKS: Final = 5
KIND: Final = {
    "request": "request",
    "agent": "agent scope",
    "call": "LLM call",
    "provider": "mock provider",
    "client": "client",  # what the test's client saw (the probe's lines)
}
#: Characters of a lane's label, its status and a mark's label shown (lanes.py words them
#: shorter; these hold whatever it writes).
LABEL_SHOWN: Final = 160
MARK_SHOWN: Final = 120
#: Heartbeat ticks and marks drawn on one lane; moments without a lane listed in the note.
MAX_TICKS: Final = 2000
MAX_MARKS: Final = 200
MAX_LOOSE: Final = 20
#: A tick in the heartbeats' path: ``M999.9 0v4`` (ticks closer than a tenth of a unit, a
#: ten-thousandth of the time shown, are one).
_TICK: Final = 11
_MARK: Final = 90
_EVENTS: Final = 110  # a density bin's rect, with its title
#: The most one lane takes: its name, and its track's title and label, with every text at its
#: widest (see ``markup``), its bars, heartbeats, events strip and marks.
LANE_MAX: Final = (
    800
    + 3 * WIDEST * 2 * LABEL_SHOWN
    + MAX_TICKS * _TICK
    + BINS * _EVENTS
    + MAX_MARKS * (_MARK + WIDEST * MARK_SHOWN)
)
#: Lanes are drawn while the waterfall holds under this many characters.
BUDGET: Final = 524_288
#: The most one waterfall takes: its budget, the lane that crossed it, its ruler, notes, legend.
MAX_SIZE: Final = BUDGET + LANE_MAX + MAX_LOOSE * (2 + WIDEST * MARK_SHOWN) + 4000


def draw(waterfall: Waterfall) -> str:
    span = waterfall.until - waterfall.origin
    scale = WIDTH / span
    parts = [
        f'<div class="waterfall" tabindex="0"{attr("data-origin", num(waterfall.origin))}'
        f'{attr("data-until", num(waterfall.until))} aria-label="waterfall">',
        '<div class="zoom" hidden><button type="button" data-zoom="in">+ zoom in</button>'
        '<button type="button" data-zoom="out">− zoom out</button>'
        '<button type="button" data-zoom="reset">whole story</button></div>',
        '<div class="lane ruler"><span class="name">time from the first envelope</span>'
        '<div class="axis">',
    ]
    for step in range(TICKS):
        at = waterfall.origin + span * step / (TICKS - 1)
        parts.append(f"<span>{duration(at)}</span>")
    parts.append("</div></div>")
    size = sum(map(len, parts))
    for drawn, lane in enumerate(waterfall.lanes):
        if size > BUDGET:
            left = len(waterfall.lanes) - drawn
            parts.append(
                f'<p class="note">{left} more lane(s) not drawn (the page keeps each waterfall'
                " small): cvdiag replay shows them all.</p>"
            )
            break
        parts.append(_lane(lane, waterfall.origin, scale))
        size += len(parts[-1])
    if waterfall.loose:
        parts.append(
            '<p class="note">Not on any lane: '
            + "; ".join(text(mark.label, MARK_SHOWN) for mark in waterfall.loose[:MAX_LOOSE])
            + "</p>"
        )
    if not waterfall.lanes:
        parts.append('<p class="note">No request, agent scope or LLM call to draw.</p>')
    parts.append(_LEGEND)
    parts.append("</div>")
    return "".join(parts)


def _x(at: float, origin: float, scale: float) -> float:
    return max(0.0, min(WIDTH, (at - origin) * scale))


def _lane(lane: Lane, origin: float, scale: float) -> str:
    start = _x(lane.start, origin, scale)
    end = _x(lane.end if lane.end is not None else lane.start, origin, scale)
    first = _x(lane.first, origin, scale) if lane.first is not None else None
    name, status = text(lane.label, LABEL_SHOWN), text(lane.status, LABEL_SHOWN)
    label = (
        f'<span class="name"><i class="k">{KIND[lane.kind]}</i> {name}'
        f' <small class="o-{lane.outcome}">{status}</small></span>'
    )
    title = f"{KIND[lane.kind]} {name}: {status}"  # escaped already
    svg = [
        f'<svg class="track" viewBox="0 0 {num(WIDTH)} 20" preserveAspectRatio="none"'
        f' role="img" aria-label="{title}"><title>{title}</title>'
    ]
    top, height = (2, 12) if lane.events else (3, 14)
    if first is not None:  # waiting until the first byte or token, then streaming
        svg.append(_rect("wait", start, max(first - start, 0.6), top, height))
        if end > first:
            svg.append(_rect(f"run o-{lane.outcome}", first, end - first, top, height))
    elif lane.waited or lane.outcome == "open":  # no first byte or token: waiting all along
        svg.append(_rect("wait", start, max(end - start, 0.6), top, height))
    else:  # ended, with no first byte or token in the log (its tier does not say)
        svg.append(_rect(f"run o-{lane.outcome}", start, max(end - start, 0.6), top, height))
    if lane.events:
        svg.extend(_density(lane.events, origin, scale))
    if lane.ticks:
        svg.append(_ticks(lane.ticks, origin, scale))
    for mark in lane.marks[:MAX_MARKS]:
        svg.append(_mark(mark, origin, scale))
    svg.append("</svg>")
    return (
        f'<div class="lane k-{lane.kind} d{lane.depth}">{label}'
        f'<div class="track-box">{"".join(svg)}</div></div>'
    )


def _rect(css: str, x: float, width: float, y: int, height: int) -> str:
    return f'<rect class="{css}" x="{num(x)}" y="{y}" width="{num(width)}" height="{height}"/>'


def _ticks(ticks: Sequence[float], origin: float, scale: float) -> str:
    """The heartbeats as one path, a tick where each beat was: those closer than a tenth of a
    unit drawn as one, and closer still when a call beat more often than ``MAX_TICKS`` places
    (all of a bar's beats stay on it, to its end: none is dropped from the tail)."""
    step = 0.1
    while True:
        places = sorted({round(_x(at, origin, scale) / step) for at in ticks})
        if len(places) <= MAX_TICKS:
            break
        step *= 10
    path = "".join(f"M{num(place * step)} 0v4" for place in places)
    return f'<path class="tick" d="{path}"/>'


def _density(events: Sequence[float], origin: float, scale: float) -> Iterator[str]:
    """Events per bin as a strip of four shades; the count of each bin in its tooltip."""
    bins = [0] * BINS
    per = WIDTH / BINS
    for at in events:
        bins[min(BINS - 1, int(_x(at, origin, scale) / per))] += 1
    most = max(bins) or 1
    for index, count in enumerate(bins):
        if count:
            shade = 1 + min(3, count * 4 // (most + 1))
            yield (
                f'<rect class="ev e{shade}" x="{num(index * per)}" y="15" width="{num(per)}"'
                f' height="5"><title>{count} SSE event(s)</title></rect>'
            )


def _mark(mark: Mark, origin: float, scale: float) -> str:
    x = num(_x(mark.at, origin, scale))
    return (
        f'<line class="m m-{mark.kind}" x1="{x}" x2="{x}" y1="0" y2="20">'
        f"<title>{text(mark.label, MARK_SHOWN)}</title></line>"
    )


_LEGEND: Final = (
    '<ul class="legend" aria-label="legend">'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><rect class="wait" width="24" height="10"/>'
    "</svg> waiting (no first byte or token yet)</li>"
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><rect class="run o-ok" width="24"'
    ' height="10"/></svg> streaming / answered</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><rect class="ev e4" width="24"'
    ' height="10"/></svg> SSE events (denser is darker)</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><path class="tick" d="M12 0v10"/>'
    "</svg> heartbeat</li>"
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-first-byte" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> first byte</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-complete" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> completed</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-aborted" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> aborted (dashed)</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-error" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> error (dotted)</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-timeout" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> the client\'s own timeout</li>'
    "</ul>"
)
