"""The report page holds a log's values as text, never as markup, and stays within its bound.

``markup`` is held to its promise for any text (hypothesis): nothing that could close an
element, open one or end an attribute, and nothing invisible that could make text read in
another order. A page of a log whose every field is hostile is parsed back: its only script and
style are its own, allowed by the hashes its policy names; no handler, no link away, no source.
A page's size is held to ``page.bound``, its rows and sections to their own maxima, with every
field of the log at its widest; the waterfall has a lane for each request and each LLM call.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag.report import detail, markup, page, waterfall
from cvdiag.report.story import JSON_BUDGET
from tests.support.report import ATTRIBUTES, TAGS, Page, envelope, report, write

# --- escaping ---------------------------------------------------------------------------------

#: What must never reach the page raw: C0 controls but tab and newline, DEL and C1 controls, the
#: bidi marks, embeddings, overrides and isolates, the line and paragraph separators, the BOM,
#: lone surrogates.
HIDDEN = frozenset(
    [chr(c) for c in range(0x20) if chr(c) not in "\t\n"]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u200e", "\u200f", "\u2028", "\u2029", "\ufeff"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
    + [chr(c) for c in range(0xD800, 0xE000)]
)
ENTITY = re.compile(r"&(?:amp|lt|gt|quot|#x27|#x60);")
SPECIAL = "<>\"'&`\x00\x1b\x85\u202e\u2066\u2028\u2029\ufeff\ud800"
#: Any text, lone surrogates too (a file name's undecodable bytes): ``st.text`` leaves them out.
texts = st.lists(
    st.one_of(st.sampled_from(SPECIAL), st.characters(blacklist_categories=()), st.just("a"))
).map("".join)


@given(texts)
def test_text_leaves_no_markup_and_nothing_hidden(value: str) -> None:
    out = markup.text(value)
    bare = ENTITY.sub("", out)
    assert not set(bare) & set("<>\"'&`"), out
    assert not set(out) & HIDDEN, out
    # Shown, not lost: the text reads back as written, each hidden character as its \u escape.
    expected = "".join(f"\\u{ord(c):04x}" if c in HIDDEN else c for c in value)
    assert html.unescape(out) == expected


@given(texts, st.integers(1, 300))
def test_a_limit_bounds_what_a_value_costs(value: str, limit: int) -> None:
    shown = markup.cut(value, limit)
    assert len(shown) <= limit
    assert shown == value or (len(value) > limit and markup.CUT in shown)
    out = markup.text(value, limit)
    assert len(out) <= markup.WIDEST * limit
    assert len(out.encode("utf-8")) <= markup.WIDEST * limit
    attribute = markup.attr("title", value, limit)
    assert attribute.count('"') == 2
    assert attribute.startswith(' title="')


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_numbers_are_plain_and_short(value: float) -> None:
    out = markup.num(value)
    assert re.fullmatch(r"-?\d+(\.\d+)?(e[+-]\d+)?", out), out
    assert len(out) <= 16
    if value != value or value in (float("inf"), float("-inf")):
        assert out == "0"
    elif abs(value) < 1e9:
        assert abs(float(out) - value) <= 0.0005
    else:
        assert float(out) == pytest.approx(value, rel=1e-8)


# --- a hostile log ----------------------------------------------------------------------------

HOSTILE = (
    "</script><script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "javascript:alert(1)",
    "<style>",
    "</style>",
    "{}*{background:url(https://evil.example/x)}",
    "\x00\x1b[31m\u202e\u2028\u2066",
    "'><a href='javascript:alert(1)'>x</a><!--",
    "<svg onload=alert(1)>",
    "&lt;script&gt;",
)


def _hostile_story(test_id: str, h: str, base: float) -> list[dict[str, Any]]:
    """Every field a log may hold text in, holding ``h``: ids, slug, path, method, headers,
    metadata keys and values, an unknown boundary, provider, model, exception, outcome."""
    meta = {"method": h, "path": h, h: h, "nested": {h: [h, 1e308, -0.0, None]}}
    edge = {"cf-ray": h, "via": h, h: h}
    envelopes = [
        envelope(test_id, "backend.request.ingress", base, "r", None, meta, edge_headers=edge),
        envelope(test_id, "backend.agent.enter", base + 1, "a", "r", {"agent_name": h}),
        envelope(
            test_id, "backend.llm.call.start", base + 2, "c", "a", {"provider": h, "model": h}
        ),
        envelope(test_id, "backend.llm.call.heartbeat", base + 3, "hb", "c", {h: h}),
        envelope(
            test_id,
            "backend.error.caught",
            base + 4,
            "e",
            "a",
            {"exception_type": h, "message_scrubbed": h, "stack_brief": [{"file": h}]},
            outcome="err",
        ),
        envelope(test_id, f"backend.{h}", base + 5, h, "r", {h: h}, outcome=h),
        envelope(test_id, h, base + 6, "u", h, {h: h}, outcome=h),
        envelope(
            test_id,
            "backend.llm.call.response",
            base + 7,
            "lr",
            "c",
            {"provider": h, "model": h, "error_class": h, "first_token_delta_ms": h},
            outcome="err",
            duration_ms=5,
        ),
        envelope(test_id, "backend.agent.exit", base + 8, "ax", "r", {"terminal_outcome": h}),
        envelope(
            test_id,
            "backend.sse.aborted",
            base + 9,
            "ab",
            "r",
            {"termination_kind": h, "termination_cause": h, "bytes_before_abort": h},
            outcome="err",
        ),
        envelope(
            test_id,
            "backend.response.complete",
            base + 10,
            "rc",
            "r",
            {"http_status": h, "sse_event_count": h},
            outcome=h,
            duration_ms=1.7e308,
        ),
    ]
    for env in envelopes:
        env["slug"] = env["trace_id"] = env["demo"] = env["layer"] = h
    return envelopes


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Page]:
    folder = tmp_path_factory.mktemp("hostile")
    envelopes: list[dict[str, Any]] = []
    everything = "".join(HOSTILE)
    for index, h in enumerate((*HOSTILE, everything)):
        # The test id is as hostile as the rest: the middleware normalises the ids it writes,
        # but the reader takes any string.
        envelopes += _hostile_story(f"{index}{h}", h, index * 100.0)
    log = write(folder / "hostile.log", envelopes)
    return log, report(log, folder / "hostile.html", "--all")


def test_a_hostile_log_is_shown_as_text_and_runs_nothing(hostile: tuple[Path, Page]) -> None:
    _, parsed = hostile
    tags = [tag for tag, _ in parsed.elements]
    assert tags.count("script") == 1
    assert tags.count("style") == 1
    assert parsed.scripts == [_packaged("report.js")]
    assert parsed.styles == [_packaged("report.css")]
    assert set(tags) <= TAGS, set(tags) - TAGS
    for tag, name, value in parsed.attributes():
        assert name in ATTRIBUTES, (tag, name, value)
        assert not name.startswith("on")
        assert name not in ("src", "style", "srcdoc", "formaction", "xlink:href")
        if name == "href":
            assert value.startswith("#"), value
    # Every hostile test id is listed, as text, and drawn.
    assert len(parsed.rows) == len(HOSTILE) + 1
    for index, h in enumerate(HOSTILE):
        shown = "".join(f"\\u{ord(c):04x}" if c in HIDDEN else c for c in f"{index}{h}")
        assert shown in parsed.rows
        assert parsed.section_of(shown).test_id == shown
    assert not set("".join(parsed.texts)) & HIDDEN


def _packaged(name: str) -> str:
    return resources.files("cvdiag.report").joinpath("assets").joinpath(name).read_text("utf-8")


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


def test_the_policy_allows_the_pages_own_style_and_script_and_nothing_else(
    hostile: tuple[Path, Page],
) -> None:
    _, parsed = hostile
    metas = [
        dict(attrs)
        for tag, attrs in parsed.elements
        if tag == "meta" and dict(attrs).get("http-equiv") == "Content-Security-Policy"
    ]
    assert len(metas) == 1
    policy = metas[0]["content"]
    assert policy == page.policy()
    assert parsed.elements[:3][-1][0] == "meta"  # before anything that could load
    directives = {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.strip()}
    assert directives["default-src"] == ["'none'"]
    assert directives["style-src"] == [_hash(parsed.styles[0])]
    assert directives["script-src"] == [_hash(parsed.scripts[0])]
    assert directives["base-uri"] == ["'none'"]
    assert directives["form-action"] == ["'none'"]
    for loose in ("unsafe", "http", "*", "data:", "blob:"):
        assert loose not in policy


# --- size -------------------------------------------------------------------------------------

#: A value at its widest: each character six characters of page, past every limit.
WIDE = '"' * 300


def _wide_log(path: Path, stories: int, envelopes_each: int) -> Path:
    out: list[dict[str, Any]] = []
    for story in range(stories):
        test_id = f"{story}{WIDE}"
        meta = {WIDE: WIDE, "method": WIDE, "path": WIDE, "termination_kind": WIDE}
        for n in range(envelopes_each):
            boundary = ("backend.request.ingress", "backend.llm.call.start", WIDE)[n % 3]
            span = f"s{n}{WIDE[:40]}"
            out.append(envelope(test_id, boundary, n, span, "s0", meta, outcome=WIDE))
        out.append(
            envelope(test_id, "backend.sse.aborted", envelopes_each, "x", "s0", meta, outcome="err")
        )
    return write(path, out)


def test_every_row_and_section_stays_within_its_maximum_at_the_widest(tmp_path: Path) -> None:
    """Every field at its widest, more envelopes than a section keeps: each overview row and
    each section within the maximum its module documents, the page within ``page.bound``."""
    log = _wide_log(tmp_path / "wide.log", stories=3, envelopes_each=detail.TABLE_ROWS + 20)
    parsed = report(log, tmp_path / "wide.html", "--all")
    source = parsed.source
    rows = re.findall(r"<tr data-class=.*?</tr>\n", source)
    assert len(rows) == 3
    for row in rows:
        assert len(row.encode()) <= page.ROW_MAX
        assert len(row) > page.ROW_MAX // 4  # at its widest indeed: the bound is near
    sections = re.findall(r'<section class="story".*?</section>\n', source, re.S)
    assert len(sections) == 3
    for section in sections:
        assert len(section.encode()) <= detail.SECTION_MAX
        pictures = re.findall(r'<div class="waterfall".*?</ul></div>', section, re.S)
        assert len(pictures) == 1
        assert len(pictures[0].encode()) <= waterfall.MAX_SIZE
        for lane in re.findall(r'<div class="lane k-.*?</svg></div></div>', section, re.S):
            assert len(lane.encode()) <= waterfall.LANE_MAX
        for table_row in re.findall(r"<tr(?: class=\"bad\")?><td class=\"n\">.*?</tr>", section):
            without_json = re.sub(r"<details>.*?</details>", "", table_row, flags=re.S)
            assert len(without_json.encode()) <= detail.ROW_MAX
        shown = re.findall(r"<pre>(.*?)</pre>", section, re.S)
        assert shown
        assert sum(len(json) for json in shown) <= JSON_BUDGET
    assert len(source.encode()) <= page.bound(drawn=3, sources=len(str(log)))


def test_the_bound_is_made_of_the_documented_constants() -> None:
    from cvdiag.report.gather import MAX_DETAILS, MAX_ROWS
    from cvdiag.report.story import HEAD, KEEP, REPEATING, TAIL

    assert KEEP + len(REPEATING) * (HEAD + TAIL + 1) == detail.TABLE_ROWS
    assert detail.SECTION_MAX >= detail.TABLE_ROWS * detail.ROW_MAX + JSON_BUDGET
    assert detail.SECTION_MAX >= waterfall.MAX_SIZE + detail.HEADER_MAX + detail.EVIDENCE_MAX
    assets = len(_packaged("report.css")) + len(_packaged("report.js"))
    assert page.bound() == (
        page.FRAME_MAX + assets + MAX_ROWS * page.ROW_MAX + MAX_DETAILS * detail.SECTION_MAX
    )
    # About 125 MB at the widest: 2 000 rows and 50 sections, every character of the log six
    # characters of page. A log of real envelopes takes a small part of it (see
    # tests/report/test_hostile.py's big logs).
    assert page.bound() < 130 * 2**20


# --- lanes ------------------------------------------------------------------------------------


def _conversation(test_id: str, requests: int, calls: int, *, tier: str) -> list[dict[str, Any]]:
    """``requests`` requests, each with an agent scope and ``calls`` LLM calls; at the default
    tier only what it writes (agent scopes, errors, terminals), with durations to draw from."""
    out: list[dict[str, Any]] = []
    at = 0.0
    for r in range(requests):
        req = f"req{r}"
        if tier != "default":
            out.append(envelope(test_id, "backend.request.ingress", at, req, None, {}))
        out.append(envelope(test_id, "backend.agent.enter", at + 1, f"ag{r}", req, {}))
        for c in range(calls):
            call = f"call{r}.{c}"
            start = at + 2 + c * 10
            if tier != "default":
                out.append(envelope(test_id, "backend.llm.call.start", start, call, f"ag{r}", {}))
                out.append(
                    envelope(
                        test_id, "backend.llm.call.heartbeat", start + 4, f"hb{r}.{c}", call, {}
                    )
                )
                out.append(
                    envelope(
                        test_id,
                        "backend.llm.call.response",
                        start + 8,
                        f"resp{r}.{c}",
                        call,
                        {"first_token_delta_ms": 3},
                        outcome="ok",
                        duration_ms=8,
                    )
                )
        end = at + 3 + calls * 10
        out.append(
            envelope(test_id, "backend.agent.exit", end, f"ax{r}", req, {}, duration_ms=end - at)
        )
        out.append(
            envelope(
                test_id,
                "backend.response.complete",
                end + 1,
                f"done{r}",
                req,
                {"http_status": 500},
                outcome="err",
                duration_ms=end + 1 - at,
            )
        )
        at = end + 5
    return out


@pytest.mark.parametrize(
    ("requests", "calls", "tier"),
    [(1, 0, "verbose"), (3, 2, "verbose"), (4, 0, "default"), (12, 5, "verbose")],
)
def test_the_waterfall_has_a_lane_for_each_request_and_each_call(
    tmp_path: Path, requests: int, calls: int, tier: str
) -> None:
    log = write(tmp_path / "lanes.log", _conversation("lanes", requests, calls, tier=tier))
    section = report(log, tmp_path / "lanes.html").section_of("lanes")
    assert section.lanes.count("k-request") == requests
    assert section.lanes.count("k-call") == (calls * requests if tier != "default" else 0)
    assert section.lanes.count("k-agent") == requests


def test_a_response_under_a_request_is_a_call_beside_it_not_in_its_place(tmp_path: Path) -> None:
    """An LLM response without its start, hung under the request itself (a log the project has
    not seen): its own call lane, and the request's lane still there to end."""
    log = write(
        tmp_path / "under.log",
        [
            envelope("under", "backend.request.ingress", 0, "r", None, {}),
            envelope("under", "backend.llm.call.response", 5, "x", "r", {}, outcome="err"),
            envelope("under", "backend.response.complete", 9, "d", "r", {"http_status": 500}),
        ],
    )
    section = report(log, tmp_path / "under.html").section_of("under")
    assert sorted(section.lanes) == ["k-call", "k-request"]


def test_a_class_classify_gives_with_a_caveat_is_marked_with_that_caveat(tmp_path: Path) -> None:
    """As ``cvdiag ls`` marks it: at the default tier the classifier cannot rule out an earlier
    class, and says so; the overview's class carries a mark whose title is that sentence."""
    log = write(tmp_path / "default.log", _conversation("quiet", 1, 0, tier="default"))
    page = report(log, tmp_path / "default.html")
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", "classify", "quiet", str(log), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    caveat = json.loads(done.stdout)["caveat"]
    assert caveat  # the default tier leaves classes unchecked
    marks = [value for tag, name, value in page.attributes() if tag == "abbr" and name == "title"]
    assert marks == [caveat]
