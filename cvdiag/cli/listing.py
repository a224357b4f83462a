"""``cvdiag ls``: one line per test id — class, requests, status, duration, first seen."""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from cvdiag.analysis.classify import classify
from cvdiag.analysis.facts import Facts
from cvdiag.analysis.reading import format_key, records
from cvdiag.analysis.timeline import Clock
from cvdiag.cli.commands import _names, _opened
from cvdiag.cli.output import NOTHING, OK, Failure, Malformations, Output
from cvdiag.cli.style import class_color


def _status(facts: Facts) -> str:
    """What the client got: the first abort, else the worst completion, else nothing yet."""
    if facts.aborts:
        return f"aborted {facts.aborts[0].termination}"
    done = facts.error_status or facts.failed or facts.last_completion
    if done is None:
        return "no terminal"
    status = f"HTTP {done.status:g}" if done.status is not None else done.outcome
    return status if done.outcome == "ok" else f"{status} {done.outcome}"


def _row(facts: Facts, slug: str, timeout: float) -> dict[str, Any]:
    verdict = classify(facts, first_token_timeout=timeout)
    first, last = facts.first, facts.last
    duration = Clock(first).offset_ms(last) if first is not None and last is not None else None
    return {
        "test_id": facts.test_id,
        "flap_class": verdict.flap_class,
        "requests": facts.requests,
        "status": _status(facts),
        "duration_ms": round(duration, 3) if duration is not None else None,
        "first_seen": first[0] if first is not None else None,
        "slug": slug,
        "log_tier": verdict.log_tier,
        "envelopes": facts.count,
    }


def ls(args: argparse.Namespace) -> int:
    malformed = Malformations("ls")
    ids = frozenset(args.test_ids) if args.test_ids else None
    seen: dict[str, tuple[str, Facts]] = {}
    with _opened(args, numbered=False) as inputs:
        for source in inputs:
            for record in records(source, malformed, test_id=ids):
                env = record.envelope
                if env["boundary"].startswith("cvdiag."):  # accounting: not a test's story
                    continue
                entry = seen.get(env["test_id"])
                if entry is None:
                    entry = seen[env["test_id"]] = (env["slug"], Facts(env["test_id"]))
                entry[1].add(record)
    args.progress.done()
    malformed.finish()
    if not seen:
        raise Failure(f"no CVDIAG envelope in {_names(args)}")
    since = format_key(args.since) if args.since else None
    until = format_key(args.until) if args.until else None
    rows = []
    for slug, facts in sorted(seen.values(), key=lambda item: item[1].first or ("", 0)):
        first = facts.first[0] if facts.first is not None else ""
        if (since is not None and first < since) or (until is not None and first >= until):
            continue
        row = _row(facts, slug, args.first_token_timeout)
        if args.classes and row["flap_class"] not in args.classes:
            continue
        if args.failed and row["flap_class"] == "healthy":
            continue
        rows.append(row)
    out = Output(color=args.color)
    if args.json:
        out.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        _render(out, rows)
    out.flush()
    return OK if rows else NOTHING


def _render(out: Output, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    titles = {
        "first_seen": "first seen",
        "test_id": "test id",
        "flap_class": "class",
        "requests": "req",
        "status": "status",
        "duration_ms": "duration",
    }
    cells = [
        {
            "first_seen": (row["first_seen"] or "")[:23],
            "test_id": row["test_id"],
            "flap_class": row["flap_class"],
            "requests": str(row["requests"]),
            "status": row["status"],
            "duration_ms": _duration(row["duration_ms"]),
        }
        for row in rows
    ]
    widths = {k: max(len(titles[k]), *(len(c[k]) for c in cells)) for k in titles}
    right = {"requests", "duration_ms"}

    def line(values: dict[str, str]) -> str:
        parts = [
            values[k].rjust(widths[k]) if k in right else values[k].ljust(widths[k]) for k in titles
        ]
        return "  ".join(parts).rstrip()

    texts = [line(titles)] + [line(c) for c in cells]
    styles = [("bold",)] + [class_color(row["flap_class"]) for row in rows]
    out.human(texts, styles)


def _duration(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.1f}s"
    return f"{value:.0f}ms"
