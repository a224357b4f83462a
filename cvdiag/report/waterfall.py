"""A story's lanes drawn to scale: each lane a label (with its outcome in words) and a track.

A track is an SVG whose x axis is the test id's time, ``WIDTH`` units wide, stretched to the
page's width; the script zooms by narrowing every track's ``viewBox`` at once, so bars, ticks and
marks stay to scale. Marks are lines drawn the same width at any zoom. A bar is hatched while
it waits (before its first byte or first token) and solid once it streams; its end is the mark
of its terminal. SSE events are a density strip under their request's bar.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

from cvdiag.report.lanes import Lane, Mark, Waterfall
from cvdiag.report.markup import attr, num, text
from cvdiag.report.style import duration

WIDTH: Final = 1000.0
#: Bins of the SSE density strip across the whole time shown.
BINS: Final = 200
#: Ruler labels across the track.
TICKS: Final = 5
KIND: Final = {"request": "request", "agent": "agent scope", "call": "LLM call"}


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
    for lane in waterfall.lanes:
        parts.append(_lane(lane, waterfall.origin, scale))
    if waterfall.loose:
        parts.append(
            '<p class="note">Not on any lane: '
            + "; ".join(text(mark.label) for mark in waterfall.loose[:20])
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
    label = (
        f'<span class="name"><i class="k">{KIND[lane.kind]}</i> {text(lane.label)}'
        f' <small class="o-{lane.outcome}">{text(lane.status)}</small></span>'
    )
    title = f"{KIND[lane.kind]} {lane.label}: {lane.status}"
    svg = [
        f'<svg class="track" viewBox="0 0 {num(WIDTH)} 20" preserveAspectRatio="none"'
        f' role="img"{attr("aria-label", title)}><title>{text(title)}</title>'
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
    for at in lane.ticks[:2000]:
        x = num(_x(at, origin, scale))
        svg.append(f'<line class="tick" x1="{x}" x2="{x}" y1="0" y2="4"/>')
    for mark in lane.marks[:200]:
        svg.append(_mark(mark, origin, scale))
    svg.append("</svg>")
    return (
        f'<div class="lane k-{lane.kind} d{lane.depth}">{label}'
        f'<div class="track-box">{"".join(svg)}</div></div>'
    )


def _rect(css: str, x: float, width: float, y: int, height: int) -> str:
    return f'<rect class="{css}" x="{num(x)}" y="{y}" width="{num(width)}" height="{height}"/>'


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
        f"<title>{text(mark.label)}</title></line>"
    )


_LEGEND: Final = (
    '<ul class="legend" aria-label="legend">'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><rect class="wait" width="24" height="10"/>'
    "</svg> waiting (no first byte or token yet)</li>"
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><rect class="run o-ok" width="24"'
    ' height="10"/></svg> streaming / answered</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><rect class="ev e4" width="24"'
    ' height="10"/></svg> SSE events (denser is darker)</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="tick" x1="12" x2="12"'
    ' y1="0" y2="10"/></svg> heartbeat</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-first-byte" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> first byte</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-complete" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> completed</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-aborted" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> aborted (dashed)</li>'
    '<li><svg viewBox="0 0 24 10" aria-hidden="true"><line class="m m-error" x1="12"'
    ' x2="12" y1="0" y2="10"/></svg> error (dotted)</li>'
    "</ul>"
)
