"""The report page: its head (Content-Security-Policy, inline style), the overview of every test
id, each drawn test id's section (``detail``), and the script that filters and navigates.

The page requests nothing: no other host, no other file. Its policy allows only its own style
and script, by hash, and nothing else (no image, font, frame, form or connection). Without
scripts it is all there: the controls the script adds are hidden until it runs.

Its size is bounded whatever the log holds (``bound``): at most ``MAX_ROWS`` rows of at most
``ROW_MAX`` characters each, and ``SECTION_MAX`` per test id drawn (``detail``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Iterator
from importlib import resources
from typing import IO, Any, Final

from cvdiag.core.version import __version__ as VERSION
from cvdiag.report.cases import CASE_MAX, MAX_CASES, distinct
from cvdiag.report.cases import render as render_cases
from cvdiag.report.detail import ID_SHOWN, SECTION_MAX, section
from cvdiag.report.gather import MAX_DETAILS, MAX_ROWS, Report
from cvdiag.report.markup import WIDEST, attr, text
from cvdiag.report.style import BADGES, badge, duration
from cvdiag.runs.cases import headline

COLUMNS: Final = ("class", "test id", "req", "status", "duration", "LLM calls", "first seen")
#: Characters of a row's status shown (it quotes the log: ``aborted <termination_kind>``).
STATUS_SHOWN: Final = 120
#: A caveat is the classifier's own sentence (class and tier names): a few hundred characters.
CAVEAT_SHOWN: Final = 600
#: The most one row of the overview takes: its test id twice (shown, and for the search) and
#: its label, status and first ts at their widest, its figures (integers of at most 20 digits).
ROW_MAX: Final = 900 + WIDEST * (3 * ID_SHOWN + STATUS_SHOWN + CAVEAT_SHOWN + 23)
#: The head, header, notes and footer around the rows and sections, without the assets and the
#: names of the files read (which come from the command line, not the log).
FRAME_MAX: Final = 8000


def bound(drawn: int = MAX_DETAILS, sources: int = 0, tests: int = 0) -> int:
    """The most UTF-8 bytes (so characters) a page can take with ``drawn`` test ids drawn,
    whatever its log holds; ``sources``: the length of the names of the files read. A value's
    character takes at most ``WIDEST`` bytes, escaped or not; the constants' slack holds the
    page's own few non-ASCII marks (``…``, ``↑``, a class's shape)."""
    assets = len(_asset("report.css")) + len(_asset("report.js"))
    frame = FRAME_MAX + assets + WIDEST * sources
    listed = min(tests, MAX_CASES) * CASE_MAX
    return frame + MAX_ROWS * ROW_MAX + drawn * SECTION_MAX + listed


@functools.cache
def _asset(name: str) -> str:
    return resources.files("cvdiag.report").joinpath("assets").joinpath(name).read_text("utf-8")


def _hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def policy() -> str:
    """The page's Content-Security-Policy: its own style and script, by hash; nothing else."""
    return (
        f"default-src 'none'; style-src {_hash(_asset('report.css'))};"
        f" script-src {_hash(_asset('report.js'))}; base-uri 'none'; form-action 'none'"
    )


def render(report: Report) -> Iterator[str]:
    """The page, in pieces (a section per drawn test id: the whole page is never one string)."""
    title = f"cvdiag report: {_headline(report)}"
    yield (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy"{attr("content", policy())}>\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{text(title)}</title>\n<style>{_asset('report.css')}</style>\n</head>\n"
    )
    yield '<body>\n<svg class="defs" aria-hidden="true" width="0" height="0"><defs>'
    yield (
        '<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse"'
        ' patternTransform="rotate(45)"><rect class="hatch-bg" width="6" height="6"/>'
        '<line class="hatch-line" x1="0" y1="0" x2="0" y2="6"/></pattern></defs></svg>\n'
    )
    yield from _header(report, title)
    yield from render_cases(report)
    yield from _overview(report)
    for index, story in enumerate(report.stories):
        yield section(index, story, report)
    yield (
        f"<footer>Written by cvdiag {text(VERSION)} from what the log says; each class is"
        " <code>cvdiag classify</code>'s. Keys: <kbd>/</kbd> search, <kbd>j</kbd>/<kbd>k</kbd>"
        " move, <kbd>Enter</kbd> open, <kbd>+</kbd>/<kbd>-</kbd>/<kbd>0</kbd> zoom,"
        " <kbd>←</kbd>/<kbd>→</kbd> pan.</footer>\n"
    )
    yield f"<script>{_asset('report.js')}</script>\n</body>\n</html>\n"


def _headline(report: Report) -> str:
    """Tests by outcome when the page knows the tests (their runner's word, not a class);
    else test ids by class."""
    if report.cases:
        return headline(report.cases)
    cut = report.counts.get("cut-by-writer", 0)
    failed = report.test_ids - report.counts.get("healthy", 0) - cut
    # A story its writer cut (its terminal not written) is not a failure: counted apart.
    apart = f"; {cut} cut by the writer (not written, not failed)" if cut else ""
    return f"{failed} of {report.test_ids} test ids failed{apart}"


def _header(report: Report, title: str) -> Iterator[str]:
    sources = ", ".join(distinct(report.sources).values())
    yield f'<header>\n<h1>{text(title)}</h1>\n<p class="meta">'
    yield (
        f"{text(sources)} · written {text(report.written)} · first-token timeout"
        f" {report.first_token_timeout:g} s"
    )
    if report.dropped:
        yield f" · <strong>{report.dropped} envelope(s) dropped before they were written</strong>"
    if report.malformed:
        yield f" · {report.malformed} malformed line(s) skipped"
    yield '</p>\n<ul class="counts">'
    for name, count in report.counts.items():
        yield (
            f'<li><button type="button" class="chip"{attr("data-class", name)}>'
            f"{badge(name)} <b>{count}</b></button></li>"
        )
    yield "</ul>\n</header>\n"


def _overview(report: Report) -> Iterator[str]:
    yield '<main>\n<section id="overview" aria-label="test ids">\n'
    yield (
        '<div class="controls" hidden><label>Search <input id="search" type="search"'
        ' placeholder="test id" autocomplete="off"></label> <label>Class <select id="class">'
        '<option value="">every class</option>'
    )
    for name in report.counts:
        yield f"<option{attr('value', name)}>{text(name)}</option>"
    yield '</select></label> <span id="shown" aria-live="polite"></span></div>\n'
    yield '<div class="scroll"><table class="tests">\n<thead><tr>'
    yield "".join(f"<th>{name}</th>" for name in COLUMNS)
    yield "</tr></thead>\n<tbody>\n"
    for row in report.rows:
        yield _row(row, report.labels)
    yield "</tbody></table></div>\n"
    notes = [report.scope] if report.scope else []
    if report.unlisted:
        notes.append(f"{report.unlisted} more test id(s) not listed (cvdiag ls lists them all)")
    if report.undrawn:
        notes.append(
            f"{report.undrawn} test id(s) listed but not drawn: a page draws at most"
            f" {len(report.stories)} (--max-drawn draws more; cvdiag replay ID LOG shows one)"
        )
    if not report.rows:
        notes.append(
            "no test id of this run in the log" if report.scope else "no test id in this log"
        )
    for note in notes:
        yield f'<p class="note">{text(note)}</p>\n'
    yield "</section>\n"


def _row(row: dict[str, Any], labels: dict[str, str]) -> str:
    test_id = row["test_id"]
    name = text(test_id, ID_SHOWN)
    detail = row.get("detail")
    if detail is not None:
        name = f'<a href="#t{int(detail)}">{name}</a>'
    label = labels.get(test_id)
    if label:
        name += f"<br><small>{text(label, ID_SHOWN)}</small>"
    first_seen = (row["first_seen"] or "")[:23].replace("T", " ")
    calls = row.get("llm_calls", 0)
    flap_class = badge(row["flap_class"])
    caveat = row.get("caveat")
    if caveat:  # as `cvdiag ls` marks it: the log's tier could not rule out an earlier class
        flap_class += f'<abbr class="caveat-mark"{attr("title", caveat, CAVEAT_SHOWN)}>*</abbr>'
    return (
        f"<tr{attr('data-class', row['flap_class'])}{attr('data-id', test_id, ID_SHOWN)}>"
        f'<td>{flap_class}</td><td class="id">{name}</td>'
        f'<td class="n" data-label="req">{int(row["requests"])}</td>'
        f"<td>{text(row['status'], STATUS_SHOWN)}</td>"
        f'<td class="n">{duration(row["duration_ms"])}</td>'
        f'<td class="n" data-label="LLM calls">{int(calls)}</td>'
        f'<td class="t" data-label="first seen">{text(first_seen)}</td></tr>\n'
    )


def write(report: Report, out: IO[str]) -> int:
    """Write the page to ``out``; return its size in characters."""
    size = 0
    for piece in render(report):
        out.write(piece)
        size += len(piece)
    return size


__all__ = ["BADGES", "bound", "policy", "render", "write"]
