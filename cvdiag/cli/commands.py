"""The reading commands: grep, replay, classify and stats (validate is in ``validating``, ls in
``listing``; what they share in opening the logs is in ``opening``)."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import heapq
import textwrap
from collections.abc import Callable

import orjson

from cvdiag.cli.opening import again, names, opened, output_for
from cvdiag.cli.output import MALFORMED_SHOWN, NOTHING, OK, Failure, Malformations, Output, say
from cvdiag.cli.style import class_color
from cvdiag.logs.reading import (
    STDIN,
    Inputs,
    Malformed,
    Record,
    format_key,
    merged,
    records,
)

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from cvdiag.diagnosis import classify as classifying
    from cvdiag.stats.figures import Part

# The classifier, the statistics, the timeline and the validator are imported by the commands
# that use them (``cvdiag grep`` on a page-cached log is over in a fraction of a second).


# --- grep -----------------------------------------------------------------------------------


def _matcher(args: argparse.Namespace) -> Callable[[Record], bool]:
    patterns: list[str] = args.boundary or []
    exact = {p for p in patterns if not any(c in p for c in "*?[")}
    globs = [p for p in patterns if p not in exact]
    since = format_key(args.since) if args.since else None
    until = format_key(args.until) if args.until else None
    slugs = frozenset(args.slug) if args.slug else None
    outcomes = frozenset(args.outcome) if args.outcome else None

    def match(record: Record) -> bool:
        env = record.envelope
        if patterns:
            name = env["boundary"]
            if name not in exact and not any(fnmatch.fnmatchcase(name, g) for g in globs):
                return False
        if slugs is not None and env["slug"].lower() not in slugs:
            return False
        if outcomes is not None and env["outcome"].lower() not in outcomes:
            return False
        if since is not None and record.key[0] < since:
            return False
        return until is None or record.key[0] < until

    return match


def grep(args: argparse.Namespace) -> int:
    """Matching envelopes as ``CVDIAG {json}`` lines (re-readable by every command) or an array."""
    out, malformed = output_for(args), Malformations("grep")
    match = _matcher(args)
    found = 0
    with opened(args, numbered=False) as inputs:
        for record in merged(inputs, malformed, test_id=args.test_ids):
            if not match(record):
                continue
            if args.json:
                out.write((b",\n" if found else b"[\n") + record.text)
            else:
                out.write(b"CVDIAG " + record.text + b"\n")
            found += 1
    if args.json:
        out.write(b"\n]\n" if found else b"[]\n")
    out.flush()
    args.progress.done()
    malformed.finish()
    return OK if found else NOTHING


# --- replay and classify --------------------------------------------------------------------


def _test_records(args: argparse.Namespace, malformed: Malformations) -> list[Record]:
    from cvdiag.layers.align import aligned

    with opened(args) as inputs:
        # Probe lines read on the backend's clock, whatever file they came from.
        found = aligned(merged(inputs, malformed, test_id=args.test_id))
    args.progress.done()
    malformed.finish()
    if not found:
        raise Failure(f"no envelope with test id {args.test_id} in {names(args)}")
    return found


#: Accounting envelopes with a test id of their own that say the log is missing envelopes.
DROPPED = "cvdiag.queue_dropped"


def _drop_reports(args: argparse.Namespace) -> list[Record]:
    """The logs' ``cvdiag.queue_dropped`` reports in time order, read a second time (the
    search for a test id never sees them), or none when an input cannot be read twice."""
    if STDIN in args.files:
        return []
    with Inputs(args.files) as sources:
        if not all(source.rereadable for source in sources):
            return []
        for source in sources:
            source.numbered = False
        needle = DROPPED.encode()
        streams = [records(source, _ignored, needle=needle) for source in sources]
        return [r for r in heapq.merge(*streams, key=_key) if r.envelope["boundary"] == DROPPED]


def _key(record: Record) -> tuple[str, int]:
    return record.key


def _ignored(problem: Malformed) -> None:
    pass  # a malformed line is the first read's to report, and only one of the test id's


def replay(args: argparse.Namespace) -> int:
    from cvdiag.diagnosis import timeline

    found = _test_records(args, Malformations("replay"))
    line = timeline.build(args.test_id, found)
    out = Output(color=args.color)
    if args.json:
        out.write(orjson.dumps(timeline.to_json(line), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        rows = timeline.render(line)
        styles: list[tuple[str, ...]] = [("bold",), ()]
        styles += [("red",) if _failed_row(row) else () for row in rows[2:]]
        out.human(rows, styles)
    out.flush()
    return OK


def _failed_row(row: str) -> bool:
    return "  err  " in row or "  timeout  " in row or "backend.sse.aborted" in row


def classify(args: argparse.Namespace) -> int:
    from cvdiag.diagnosis import classify as classifying

    found = _test_records(args, Malformations("classify"))
    facts = classifying.gather(args.test_id, found)
    classifying.add_drops(facts, _drop_reports(args))
    verdict = classifying.classify(facts, first_token_timeout=args.first_token_timeout)
    out = Output(color=args.color)
    if args.json:
        out.write(orjson.dumps(verdict.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        lines = render_verdict(verdict)
        styles = [(), class_color(verdict.flap_class)]
        styles += [("yellow",) if row.startswith("caveat") else () for row in lines[2:]]
        out.human(lines, styles)
    out.flush()
    return OK


def render_verdict(verdict: classifying.Verdict) -> list[str]:
    from cvdiag.diagnosis.classify import facts_shown  # with the classifier, which is loaded

    evidence = dict(verdict.evidence)
    envelopes = evidence.pop("envelopes")
    lines = [
        f"test id   {verdict.test_id}",
        f"class     {verdict.flap_class}",
        f"reason    {verdict.reason}",
    ]
    if verdict.caveat:
        lines.append(f"caveat    {verdict.caveat}")
    if verdict.layers:
        joined = f": {verdict.joined}" if verdict.joined else ""
        lines.append(f"layers    {' + '.join(verdict.layers)}{joined}")
    if verdict.deciding:
        lines.append(f"decided   {', '.join(verdict.deciding)}")
    if envelopes:
        width = max(len(e["boundary"]) for e in envelopes)
        lines.append("evidence")
        for item in envelopes:
            lines.append(
                f"  {'+' + format(item['offset_ms'], '.1f') + ' ms':>12}  "
                f"{item['boundary']:<{width}}  {item['summary']}  ({item['source']})"
            )
    facts = "  ".join(f"{key}={shown}" for key, shown in facts_shown(evidence))
    lines += textwrap.wrap(
        facts,
        width=100,
        initial_indent="facts     ",
        subsequent_indent=" " * 10,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines


# --- stats ----------------------------------------------------------------------------------


def stats(args: argparse.Namespace) -> int:
    from cvdiag.logs import ranges
    from cvdiag.stats import figures as statistics

    malformed = Malformations("stats")
    with opened(args, numbered=False) as inputs:
        report = statistics.Stats(
            by_class=args.by_class,
            first_token_timeout=args.first_token_timeout,
            again=again(args, inputs),
            warn=lambda message: say(f"warning: stats: {message}"),
        )
        # Figures do not depend on order: the inputs are read one after another, not merged.
        for source in inputs:
            spans = None if args.by_class else ranges.plan(source)  # by class: one process
            if spans is None:
                report.feed(records(source, malformed))
                continue
            parts = ranges.run(_stats_range, source, spans, on_done=source.on_read)
            for (start, _), (part, kept) in zip(spans, parts, strict=True):
                report.merge(part)
                kept.replay(malformed, start)
    args.progress.done()
    malformed.finish()
    if not report.overall.envelopes:
        raise Failure(f"no CVDIAG envelope in {names(args)}")
    data = report.to_json(malformed=malformed.count, first_token_timeout=args.first_token_timeout)
    data["set_aside_lines"] = malformed.set_aside
    out = Output(color=args.color)
    if args.json:
        out.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        out.human(statistics.render(data))
    out.flush()
    return OK


class _Kept:
    """A worker's malformed lines: all counted, the first few kept for ``replay``."""

    def __init__(self) -> None:
        self.problems: list[Malformed] = []
        self.count = 0
        self.set_aside = 0

    def __call__(self, problem: Malformed) -> None:
        if problem.set_aside:
            self.set_aside += 1
            return
        self.count += 1
        if len(self.problems) < MALFORMED_SHOWN:
            self.problems.append(problem)

    def replay(self, into: Malformations, shift: int) -> None:
        """Hand the lines to ``into`` as one read would have (positions moved by ``shift``):
        it shows the first few of the whole read, which are among the first few of a part."""
        for problem in self.problems:
            into(dataclasses.replace(problem, lineno=problem.lineno + shift))
        into.count += self.count - len(self.problems)
        into.set_aside += self.set_aside


def _stats_range(name: str, start: int, end: int) -> tuple[Part, _Kept]:
    """A worker's job: the figures of ``name``'s bytes ``[start, end)``, positions in bytes
    from ``start``."""
    from cvdiag.logs import ranges
    from cvdiag.stats import figures as statistics

    source, _ = ranges.open_range(name, start, end)
    source.numbered = False
    kept = _Kept()
    try:
        report = statistics.Stats().feed(records(source, kept))
    finally:
        source.close()
    return report.partial(), kept
