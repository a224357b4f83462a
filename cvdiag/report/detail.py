"""One drawn test id's section: the waterfall, the class with its reason and evidence exactly as
``cvdiag classify`` gives them, then the envelopes (each one's JSON on demand)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from cvdiag.analysis.describe import describe
from cvdiag.report import lanes
from cvdiag.report.markup import attr, text
from cvdiag.report.story import JSON_BUDGET, JSON_CAP, Row, Story
from cvdiag.report.style import badge
from cvdiag.report.waterfall import draw

if TYPE_CHECKING:
    from cvdiag.report.gather import Report


def section(index: int, story: Story, report: Report) -> str:
    verdict = story.verdict
    parts = [
        f'<section class="story" id="t{index}"{attr("data-class", verdict.flap_class)}'
        f"{attr('aria-label', story.test_id)}>",
        f'<h2><a class="up" href="#overview" title="back to the list">↑</a>'
        f' <span class="id">{text(story.test_id)}</span></h2>',
    ]
    label = report.labels.get(story.test_id)
    if label:
        parts.append(f'<p class="label">{text(label)}</p>')
    parts.append(f'<p class="verdict">{badge(verdict.flap_class)} {text(verdict.reason)}</p>')
    if verdict.caveat:
        parts.append(f'<p class="caveat">⚠ {text(verdict.caveat)}</p>')
    first_bytes = verdict.log_tier != "default"
    parts.append(draw(lanes.build(story, first_bytes=first_bytes)))
    parts.extend(_evidence(verdict.evidence, verdict.log_tier, verdict.unchecked))
    parts.extend(_table(story))
    parts.append("</section>\n")
    return "".join(parts)


def _evidence(evidence: dict[str, Any], tier: str, unchecked: list[str]) -> Iterator[str]:
    facts = dict(evidence)
    envelopes = facts.pop("envelopes", None) or []
    yield "<h3>Why this class</h3>"
    if envelopes:
        yield '<ol class="evidence">'
        for item in envelopes:
            yield (
                f'<li><span class="off">+{item["offset_ms"]:.1f} ms</span>'
                f" <code>{text(item['boundary'])}</code> {text(item['summary'])}"
                f" <small>({text(item['source'])})</small></li>"
            )
        yield "</ol>"
    yield f'<p class="facts">log tier <b>{text(tier)}</b>'
    if unchecked:
        yield f"; classes this tier cannot show: {text(', '.join(unchecked))}"
    yield '</p><dl class="facts">'
    for key, value in _flatten(facts):
        yield f"<div><dt>{text(key)}</dt><dd>{text(_fact(value))}</dd></div>"
    yield "</dl>"


def _flatten(values: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _fact(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "none"
    return str(value)


def _table(story: Story) -> Iterator[str]:
    count = story.facts.count
    yield f"<h3>Envelopes <small>({count})</small></h3>"
    yield (
        '<div class="scroll"><table class="envelopes"><thead><tr><th>offset</th>'
        "<th>boundary</th><th>outcome</th><th>key facts</th></tr></thead><tbody>"
    )
    budget = JSON_BUDGET
    for row in story.rows:
        if row.record is None:
            yield _folded(row)
            continue
        html, budget = _envelope(row, budget)
        yield html
    yield "</tbody></table></div>"
    if story.left_out:
        yield (
            f'<p class="note">{story.left_out} more envelope(s) not shown: cvdiag replay'
            " shows them all.</p>"
        )


def _folded(row: Row) -> str:
    return (
        f'<tr class="folded"><td class="n">+{row.offset_ms:.1f}</td><td colspan="3">…'
        f" {row.count} more <code>{text(row.folded)}</code> until +{row.until_ms:.1f} ms</td></tr>"
    )


def _envelope(row: Row, budget: int) -> tuple[str, int]:
    assert row.record is not None
    env = row.record.envelope
    outcome = str(env.get("outcome"))
    failed = env["boundary"] == "backend.sse.aborted" or outcome in ("err", "timeout")
    raw = orjson.dumps(env, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    if len(raw) > JSON_CAP:
        shown = raw[:JSON_CAP].decode("utf-8", "replace") + f"\n… cut: {len(raw)} bytes in all"
    else:
        shown = raw.decode("utf-8", "replace")
    if budget <= 0:
        json = "<small>JSON not kept (page budget): cvdiag grep shows it</small>"
    else:
        budget -= len(shown)
        json = f"<details><summary>JSON</summary><pre>{text(shown)}</pre></details>"
    css = ' class="bad"' if failed else ""
    html = (
        f'<tr{css}><td class="n">+{row.offset_ms:.1f}</td>'
        f"<td><code>{text(env['boundary'])}</code></td><td>{text(outcome)}</td>"
        f"<td>{text(describe(env))}{json}</td></tr>"
    )
    return html, budget
