"""``cvdiag ls``: one line per test id — class, requests, status, duration, first seen."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from cvdiag.analysis.classify import classify
from cvdiag.analysis.facts import Facts
from cvdiag.analysis.pertest import PerTestId
from cvdiag.analysis.reading import format_key, records
from cvdiag.analysis.timeline import Clock
from cvdiag.cli.commands import _names, _opened, again
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


#: One test id, folded (``pertest``): the ``ls`` row's figures, nothing else.
#: (first ts, first mono_ns, first-seen order, class, status, requests, slug, duration,
#: envelopes, log tier).
Row = tuple[str, int, int, str, str, int, str, "float | None", int, str]
_SHARED: dict[str, str] = {}  # status texts repeat: one string each


def _fold(timeout: float) -> Callable[[int, str, Facts], Row]:
    def fold(order: int, slug: str, facts: Facts) -> Row:
        verdict = classify(facts, first_token_timeout=timeout)
        first, last = facts.first, facts.last
        duration = Clock(first).offset_ms(last) if first is not None and last is not None else None
        status = _status(facts)
        return (
            first[0] if first is not None else "",
            first[1] if first is not None else 0,
            order,
            verdict.flap_class,
            _SHARED.setdefault(status, status),
            facts.requests,
            slug,
            round(duration, 3) if duration is not None else None,
            facts.count,
            verdict.log_tier,
        )

    return fold


def _restore(row: Row) -> tuple[int, str]:
    return row[2], row[6]


def _row(test_id: str, row: Row) -> dict[str, Any]:
    first_ts, _, _, flap_class, status, requests, slug, duration, count, tier = row
    return {
        "test_id": test_id,
        "flap_class": flap_class,
        "requests": requests,
        "status": status,
        "duration_ms": duration,
        "first_seen": first_ts or None,
        "slug": slug,
        "log_tier": tier,
        "envelopes": count,
    }


def ls(args: argparse.Namespace) -> int:
    malformed = Malformations("ls")
    ids = frozenset(args.test_ids) if args.test_ids else None
    with _opened(args, numbered=False) as inputs:
        seen = PerTestId(_fold(args.first_token_timeout), _restore, again=again(args, inputs))
        for source in inputs:
            for record in records(source, malformed, test_id=ids):
                if record.envelope["boundary"].startswith("cvdiag."):  # not a test's story
                    continue
                seen.add(record)
    args.progress.done()
    malformed.finish()
    folded = seen.finish()
    if not folded:
        raise Failure(f"no CVDIAG envelope in {_names(args)}")
    since = format_key(args.since) if args.since else None
    until = format_key(args.until) if args.until else None
    # In first-seen order, ties in the order the test ids appeared (as a stable sort of them).
    order = sorted(folded, key=lambda test_id: folded[test_id][:3])

    def rows() -> Iterator[dict[str, Any]]:
        for test_id in order:
            row = folded[test_id]
            first = row[0]
            if (since is not None and first < since) or (until is not None and first >= until):
                continue
            if args.classes and row[3] not in args.classes:
                continue
            if args.failed and row[3] == "healthy":
                continue
            yield _row(test_id, row)

    out = Output(color=args.color)
    found = _write_json(out, rows()) if args.json else _render(out, rows)
    out.flush()
    return OK if found else NOTHING


def _write_json(out: Output, rows: Iterable[dict[str, Any]]) -> int:
    """``orjson.dumps(list(rows), option=OPT_INDENT_2)``, byte for byte, a row at a time."""
    count = 0
    for row in rows:
        text = orjson.dumps(row, option=orjson.OPT_INDENT_2).replace(b"\n", b"\n  ")
        out.write((b",\n  " if count else b"[\n  ") + text)
        count += 1
    out.write(b"\n]\n" if count else b"[]\n")
    return count


def _render(out: Output, rows: Callable[[], Iterable[dict[str, Any]]]) -> int:
    """The table, in two passes over the rows: the widths, then the lines."""
    titles = {
        "first_seen": "first seen",
        "test_id": "test id",
        "flap_class": "class",
        "requests": "req",
        "status": "status",
        "duration_ms": "duration",
    }
    widths = {k: len(title) for k, title in titles.items()}
    count = 0
    for row in rows():
        for k, cell in _cells(row).items():
            widths[k] = max(widths[k], len(cell))
        count += 1
    if not count:
        return 0
    right = {"requests", "duration_ms"}

    def line(values: dict[str, str]) -> str:
        parts = [
            values[k].rjust(widths[k]) if k in right else values[k].ljust(widths[k]) for k in titles
        ]
        return "  ".join(parts).rstrip()

    out.human([line(titles)], [("bold",)])
    for row in rows():
        out.human([line(_cells(row))], [class_color(row["flap_class"])])
    return count


def _cells(row: dict[str, Any]) -> dict[str, str]:
    return {
        "first_seen": (row["first_seen"] or "")[:23],
        "test_id": row["test_id"],
        "flap_class": row["flap_class"],
        "requests": str(row["requests"]),
        "status": row["status"],
        "duration_ms": _duration(row["duration_ms"]),
    }


def _duration(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.1f}s"
    return f"{value:.0f}ms"
