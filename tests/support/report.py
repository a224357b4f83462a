"""Reading a ``cvdiag report`` page back, and writing the odd logs the report tests feed it.

``Page`` parses a page with ``html.parser`` (which, like a browser, takes a ``<script>`` or
``<style>`` element's content as raw text up to its end tag): every element and attribute, the
script and style text, the overview's rows, the drawn sections and their lanes. ``envelope``
writes one envelope as any log line may hold it, whatever the middleware would write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html.parser
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from cvdiag import cli

#: The elements and attributes the page's own markup uses: anything else came from a log.
_TAGS = (
    "a abbr b body br button code dd defs details div dl dt footer h1 h2 h3 head header html i"
    " input kbd label li line main meta ol option p path pattern pre rect script section"
    " select small span strong style summary svg table tbody td th thead title tr ul"
)
_ATTRIBUTES = (
    "aria-hidden aria-label aria-live aria-pressed autocomplete charset class colspan content d"
    " data-class data-id data-label data-origin data-outcome data-until data-zoom height hidden"
    " href http-equiv id lang name patterntransform patternunits placeholder preserveaspectratio"
    " role tabindex title type value viewbox width x x1 x2 y y1 y2"
)
TAGS = frozenset(_TAGS.split())
ATTRIBUTES = frozenset(_ATTRIBUTES.split())


@dataclasses.dataclass
class Section:
    id: str
    flap_class: str
    test_id: str
    lanes: list[str] = dataclasses.field(default_factory=list)
    folded: list[str] = dataclasses.field(default_factory=list)
    start: int = 0
    end: int = 0


@dataclasses.dataclass
class CaseView:
    """A test as the page's tests section shows it."""

    outcome: str
    name: str = ""
    links: list[str] = dataclasses.field(default_factory=list)
    text: str = ""


class Page(html.parser.HTMLParser):
    """A page as parsed: ``elements`` (tag, attributes) in order, ``scripts`` and ``styles``
    (their text), ``rows`` (the overview's: data-id → data-class, and which are drawn),
    ``sections`` by id, and ``texts`` (every piece of text, entities decoded)."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.source = source
        self.elements: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.rows: dict[str, str] = {}
        self.drawn: dict[str, str] = {}  # test id (as shown) → its section's id
        self.sections: dict[str, Section] = {}
        self.texts: list[str] = []
        #: The tests section's tests, in page order (``CaseView``).
        self.cases: list[CaseView] = []
        self._case: CaseView | None = None
        self._open: list[str] = []
        self._row: str | None = None
        self._section: Section | None = None
        self._folded = False
        self.feed(source)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, attrs))
        got = {name: value or "" for name, value in attrs}
        classes = got.get("class", "").split()
        if tag == "li" and "case" in classes:
            self._case = CaseView(got["data-outcome"])
            self.cases.append(self._case)
        elif tag == "a" and self._case is not None:
            self._case.links.append(got.get("href", ""))
        if tag == "tr" and "data-id" in got:
            self.rows[got["data-id"]] = got["data-class"]
            self._row = got["data-id"]
        elif tag == "a" and self._row is not None and got.get("href", "").startswith("#t"):
            self.drawn[self._row] = got["href"][1:]
        elif tag == "section" and "story" in classes:
            self._section = Section(got["id"], got["data-class"], got["aria-label"])
            self._section.start = self.getpos()[0]
            self.sections[got["id"]] = self._section
        elif tag == "div" and "lane" in classes and self._section is not None:
            self._section.lanes.extend(name for name in classes if name.startswith("k-"))
        elif tag == "tr" and "folded" in classes and self._section is not None:
            self._folded = True
            self._section.folded.append("")
        if tag not in ("meta", "input", "br", "rect", "line", "path"):
            self._open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1] == tag:
            self._open.pop()
        if tag == "li":
            self._case = None
        if tag == "tr":
            self._row = None
            self._folded = False
        elif tag == "section" and self._section is not None:
            self._section.end = self.getpos()[0]
            self._section = None

    def handle_data(self, data: str) -> None:
        where = self._open[-1] if self._open else ""
        if where == "script":
            self.scripts.append(data)
        elif where == "style":
            self.styles.append(data)
        self.texts.append(data)
        if self._case is not None:
            if where == "span" and not self._case.name:
                self._case.name = data
            self._case.text += data
        if self._folded and self._section is not None:
            self._section.folded[-1] += data

    def attributes(self) -> Iterator[tuple[str, str, str]]:
        for tag, attrs in self.elements:
            for name, value in attrs:
                yield tag, name, value or ""

    def section_of(self, test_id: str) -> Section:
        return self.sections[self.drawn[test_id]]


def envelope(
    test_id: str,
    boundary: str,
    at_ms: float,
    span: str,
    parent: str | None = None,
    metadata: dict[str, Any] | None = None,
    *,
    outcome: str = "info",
    duration_ms: float | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One envelope, every field as the reader needs it; ``fields`` replace or add any."""
    whole = int(at_ms)
    seconds, millis = divmod(whole, 1000)
    minutes, seconds = divmod(seconds, 60)
    env: dict[str, Any] = {
        "schema_version": 1,
        "test_id": test_id,
        "trace_id": "trace",
        "span_id": span,
        "parent_span_id": parent,
        "layer": "backend",
        "boundary": boundary,
        "slug": "chat",
        "demo": "default",
        "ts": f"2026-11-22T03:{minutes % 60:02d}:{seconds:02d}.{millis:03d}Z",
        "mono_ns": 10**12 + int(at_ms * 1_000_000),
        "duration_ms": duration_ms,
        "outcome": outcome,
        "edge_headers": {},
        "metadata": metadata or {},
    }
    env.update(fields)
    return env


def line(env: dict[str, Any]) -> bytes:
    return b"CVDIAG " + orjson.dumps(env) + b"\n"


def write(path: Path, envelopes: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(map(line, envelopes)))
    return path


@dataclasses.dataclass
class Run:
    code: int
    stdout: str
    stderr: str


def run(*args: str) -> Run:
    """``cvdiag ARGS`` in this process (``cli.main``), its stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return Run(code, out.getvalue(), err.getvalue())


def report(log: Path | list[Path], out: Path, *args: str) -> Page:
    """The page ``cvdiag report`` writes of ``log``, which must succeed."""
    logs = log if isinstance(log, list) else [log]
    done = run("report", "-o", str(out), *args, *map(str, logs))
    assert done.code == 0, done.stderr
    assert "Traceback" not in done.stderr
    return Page(out.read_text(encoding="utf-8"))


def classify(test_id: str, log: Path | list[Path], *args: str) -> str:
    """The class ``cvdiag classify --json`` gives ``test_id``."""
    logs = log if isinstance(log, list) else [log]
    done = run("classify", test_id, *map(str, logs), "--json", *args)
    assert done.code == 0, done.stderr
    flap_class: str = orjson.loads(done.stdout)["flap_class"]
    return flap_class
