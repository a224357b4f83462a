"""``cvdiag ls``: one line per test id — class, requests, status, duration, first seen."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from cvdiag.cli.opening import again, names, opened
from cvdiag.cli.output import NOTHING, OK, Failure, Malformations, Output, say
from cvdiag.cli.style import class_color
from cvdiag.diagnosis.classes import NOT_FAILED, accounting
from cvdiag.diagnosis.pertest import PerTestId
from cvdiag.diagnosis.rows import Rows
from cvdiag.logs.reading import format_key, records

#: Beside a class that carries ``classify``'s caveat: the class is what the envelopes support,
#: but the log's tier could not rule out a class checked before it (a default-tier client-abort
#: may be a stalled backend). Shown plain, a row would claim more than ``classify`` does.
CAVEAT_MARK = "*"
CAVEAT_LEGEND = (
    f"{CAVEAT_MARK} the log's tier could not rule out an earlier class:"
    " `cvdiag classify TEST_ID` gives the caveat"
)


def ls(args: argparse.Namespace) -> int:
    malformed = Malformations("ls")
    ids = frozenset(args.test_ids) if args.test_ids else None
    rows = Rows(args.first_token_timeout)
    dropped = 0
    with opened(args, numbered=False) as inputs:
        seen = PerTestId(rows.fold, rows.restore, again=again(args, inputs), warn=_warn)
        for source in inputs:
            for record in records(source, malformed, test_id=ids):
                env = record.envelope
                if accounting(env):  # not a test's story
                    if env["boundary"] == "cvdiag.queue_dropped":
                        count = env["metadata"].get("dropped_count")
                        dropped += count if type(count) is int and count > 0 else 0
                    continue
                seen.add(record)
    args.progress.done()
    malformed.finish()
    rows.drops_reported = dropped > 0
    if dropped:
        _warn(
            f"the log reports {dropped} envelope(s) dropped (cvdiag.queue_dropped): some"
            " stories may be incomplete (`cvdiag classify` says which)"
        )
    folded = seen.finish()
    if not folded:
        raise Failure(f"no CVDIAG envelope in {names(args)}")
    since = format_key(args.since) if args.since else None
    until = format_key(args.until) if args.until else None

    def selected() -> Iterator[dict[str, Any]]:
        # In first-seen order, ties in the order the test ids appeared (``Rows``: as bytes),
        # streamed: from the temporary file too when there was one (``folded``).
        for test_id, row in folded.sorted_items():
            first = rows.first_seen(row)
            if (since is not None and first < since) or (until is not None and first >= until):
                continue
            flap_class = rows.flap_class(row)
            if args.classes and flap_class not in args.classes:
                continue
            if args.failed and flap_class in NOT_FAILED:
                continue
            yield rows.row(test_id, row)

    out = Output(color=args.color)
    found = _write_json(out, selected()) if args.json else _render(out, selected)
    out.flush()
    folded.close()
    return OK if found else NOTHING


def _warn(message: str) -> None:
    say(f"warning: ls: {message}")


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
    caveats = False
    for row in rows():
        out.human([line(_cells(row))], [class_color(row["flap_class"])])
        caveats = caveats or row["caveat"] is not None
    if caveats:
        out.human([CAVEAT_LEGEND], [("yellow",)])
    return count


def _cells(row: dict[str, Any]) -> dict[str, str]:
    return {
        "first_seen": (row["first_seen"] or "")[:23],
        "test_id": row["test_id"],
        "flap_class": row["flap_class"] + (CAVEAT_MARK if row["caveat"] is not None else ""),
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
