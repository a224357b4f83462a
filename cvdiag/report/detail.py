"""One drawn test id's section: the waterfall, the class with its reason and evidence exactly as
``cvdiag classify`` gives them, then the envelopes (each one's JSON on demand).

Its size is bounded whatever the log holds (``SECTION_MAX``): every text from the log is cut
(``markup``), the evidence and facts shown are counted, the table has at most ``TABLE_ROWS``
rows (``story``) of at most ``ROW_MAX`` characters, and its JSON, escaped, at most
``JSON_BUDGET`` characters in all.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import orjson

from cvdiag.diagnosis.classify import facts_shown
from cvdiag.diagnosis.describe import describe
from cvdiag.report import comparison, lanes, waterfall
from cvdiag.report.markup import WIDEST, attr, text
from cvdiag.report.story import HEAD, JSON_BUDGET, JSON_CAP, KEEP, REPEATING, TAIL, Row, Story
from cvdiag.report.style import badge
from cvdiag.schema.ids import TEST_ID_MAX

if TYPE_CHECKING:
    from cvdiag.report.gather import Report

#: Characters of a test id (or its label) shown: twice what the middleware writes, so any
#: test id it wrote shows whole.
ID_SHOWN: Final = 2 * TEST_ID_MAX
#: Characters of a class's reason and caveat shown (the classifier's words, quoting the log).
REASON_SHOWN: Final = 2000
#: Evidence envelopes and facts listed, and the characters of each of their texts.
MAX_EVIDENCE: Final = 40
MAX_FACTS: Final = 40
FACT_SHOWN: Final = 200
#: Characters of an envelope's boundary, outcome and key facts in the table.
BOUNDARY_SHOWN: Final = 80
OUTCOME_SHOWN: Final = 24
SUMMARY_SHOWN: Final = 240
#: The table's rows: the envelopes kept, and of each repeating boundary its head, its tail and
#: the folded run between them.
TABLE_ROWS: Final = KEEP + len(REPEATING) * (HEAD + TAIL + 1)
#: The most one row of the table takes without its JSON (an offset is at most 24 characters:
#: offsets are differences of clocks, ``duration`` words the rest).
ROW_MAX: Final = 400 + WIDEST * (BOUNDARY_SHOWN + OUTCOME_SHOWN + SUMMARY_SHOWN)
HEADER_MAX: Final = 1000 + WIDEST * (3 * ID_SHOWN + 3 * REASON_SHOWN)
EVIDENCE_MAX: Final = (
    1000
    + WIDEST * (ID_SHOWN + 120)
    + MAX_EVIDENCE * (120 + WIDEST * 3 * FACT_SHOWN)
    + MAX_FACTS * (40 + WIDEST * 2 * FACT_SHOWN)
)
#: The most one section takes, whatever its log holds.
SECTION_MAX: Final = (
    HEADER_MAX
    + waterfall.MAX_SIZE
    + EVIDENCE_MAX
    + TABLE_ROWS * ROW_MAX
    + JSON_BUDGET
    + comparison.BLOCK_MAX
    + 1000
)


def section(index: int, story: Story, report: Report) -> str:
    verdict = story.verdict
    parts = [
        f'<section class="story" id="t{index}"{attr("data-class", verdict.flap_class)}'
        f"{attr('aria-label', story.test_id, ID_SHOWN)}>",
        f'<h2><a class="up" href="#overview" title="back to the list">↑</a>'
        f' <span class="id">{text(story.test_id, ID_SHOWN)}</span></h2>',
    ]
    label = report.labels.get(story.test_id)
    if label:
        parts.append(f'<p class="label">{text(label, ID_SHOWN)}</p>')
    reason = text(verdict.reason, REASON_SHOWN)
    parts.append(f'<p class="verdict">{badge(verdict.flap_class)} {reason}</p>')
    if verdict.caveat:
        parts.append(f'<p class="caveat">⚠ {text(verdict.caveat, REASON_SHOWN)}</p>')
    if verdict.layers:  # what the class rests on: the layers read, how they were joined
        joined = f": {verdict.joined}" if verdict.joined else ""
        rests = text(f"layers read: {' + '.join(verdict.layers)}{joined}", REASON_SHOWN)
        parts.append(f'<p class="layers">{rests}</p>')
    first_bytes = verdict.log_tier != "default"
    drawn = lanes.build(story, first_bytes=first_bytes)
    compared = report.comparisons.get(story.test_id)
    comparison.mark(drawn, story.test_id, report.comparisons.values())
    parts.append(waterfall.draw(drawn))
    if compared is not None:
        anchors = {other.test_id: f"t{number}" for number, other in enumerate(report.stories)}
        parts.append(comparison.block(compared, anchors.get))
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
        for item in envelopes[:MAX_EVIDENCE]:
            yield (
                f'<li><span class="off">+{_offset(item["offset_ms"])} ms</span>'
                f" <code>{text(item['boundary'], FACT_SHOWN)}</code>"
                f" {text(item['summary'], FACT_SHOWN)}"
                f" <small>({text(item['source'], FACT_SHOWN)})</small></li>"
            )
        yield "</ol>"
        if len(envelopes) > MAX_EVIDENCE:
            yield f'<p class="note">and {len(envelopes) - MAX_EVIDENCE} more envelope(s)</p>'
    yield f'<p class="facts">log tier <b>{text(tier, 24)}</b>'
    if unchecked:
        yield f"; classes this tier cannot show: {text(', '.join(unchecked), ID_SHOWN)}"
    yield '</p><dl class="facts">'
    for key, shown in itertools.islice(facts_shown(facts), MAX_FACTS):
        yield f"<div><dt>{text(key, FACT_SHOWN)}</dt><dd>{text(shown, FACT_SHOWN)}</dd></div>"
    yield "</dl>"


def _offset(value: float) -> str:
    """An offset in ms: one decimal, as the rest of the page words them."""
    return f"{value:.1f}" if abs(value) < 1e9 else f"{value:.4g}"


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
        f'<tr class="folded"><td class="n">+{_offset(row.offset_ms)}</td><td colspan="3">…'
        f" {row.count} more <code>{text(row.folded, BOUNDARY_SHOWN)}</code> until"
        f" +{_offset(row.until_ms)} ms</td></tr>"
    )


def _envelope(row: Row, budget: int) -> tuple[str, int]:
    """An envelope's row, and what is left of the section's JSON budget: its JSON, escaped, is
    shown when it fits in what is left (counted escaped: a ``"`` is six characters of page)."""
    assert row.record is not None
    env = row.record.envelope
    outcome = str(env.get("outcome"))
    failed = env["boundary"] == "backend.sse.aborted" or outcome in ("err", "timeout")
    raw = orjson.dumps(env, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    if len(raw) > JSON_CAP:
        shown = raw[:JSON_CAP].decode("utf-8", "replace") + f"\n… cut: {len(raw)} bytes in all"
    else:
        shown = raw.decode("utf-8", "replace")
    escaped = text(shown)
    if len(escaped) > budget:
        json = "<small>JSON not kept (page budget): cvdiag grep shows it</small>"
    else:
        budget -= len(escaped)
        json = f"<details><summary>JSON</summary><pre>{escaped}</pre></details>"
    css = ' class="bad"' if failed else ""
    html = (
        f'<tr{css}><td class="n">+{_offset(row.offset_ms)}</td>'
        f"<td><code>{text(env['boundary'], BOUNDARY_SHOWN)}</code></td>"
        f"<td>{text(outcome, OUTCOME_SHOWN)}</td>"
        f"<td>{text(describe(env), SUMMARY_SHOWN)}{json}</td></tr>"
    )
    return html, budget


__all__ = ["SECTION_MAX", "section"]
