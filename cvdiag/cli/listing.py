"""``cvdiag ls``: one line per test id — class, requests, status, duration, first seen."""

from __future__ import annotations

import argparse
import math
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import orjson

from cvdiag.analysis.classify import classify
from cvdiag.analysis.facts import Facts
from cvdiag.analysis.pertest import PerTestId
from cvdiag.analysis.reading import format_key, records
from cvdiag.analysis.timeline import Clock
from cvdiag.cli.opening import again, names, opened
from cvdiag.cli.output import NOTHING, OK, Failure, Malformations, Output, say
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


#: The figures of a row after its sort key: requests, envelopes, duration (NaN for none), and
#: the class, status, slug and log tier as indexes into ``Rows.texts``.
_FIGURES: Final = struct.Struct(">QQdIIII")


class Rows:
    """``ls`` rows folded into one ``bytes`` each (``pertest``), about 100 bytes a test id.

    A row starts with its sort key: the first ts (UTF-8), the first ``mono_ns`` and the order in
    which the test id appeared, big-endian, so rows sort as bytes exactly as the tuples did. Its
    last byte is the length of the ts. Texts repeat (classes, statuses, slugs): each is kept once.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.texts: list[str] = []
        self._index: dict[str, int] = {}

    def _text(self, value: str) -> int:
        index = self._index.get(value)
        if index is None:
            index = self._index[value] = len(self.texts)
            self.texts.append(value)
        return index

    def fold(self, order: int, slug: str, facts: Facts) -> bytes:
        verdict = classify(facts, first_token_timeout=self.timeout)
        first, last = facts.first, facts.last
        duration = None
        if first is not None and last is not None:  # from the first request's start
            clock = Clock(first)
            duration = clock.offset_ms(last) + facts.lead_ms(clock)
        ts = (first[0] if first is not None else "").encode()
        mono = first[1] if first is not None else 0
        return b"".join(
            (
                ts,
                (mono + 2**63).to_bytes(9, "big"),  # any 64-bit mono_ns, signed or not
                order.to_bytes(4, "big"),
                _FIGURES.pack(
                    facts.requests,
                    facts.count,
                    round(duration, 3) if duration is not None else math.nan,
                    self._text(verdict.flap_class),
                    self._text(_status(facts)),
                    self._text(slug),
                    self._text(verdict.log_tier),
                ),
                bytes((len(ts),)),
            )
        )

    def restore(self, row: bytes) -> tuple[int, str]:
        """The order and slug a row was folded with."""
        size = row[-1]
        order = int.from_bytes(row[size + 9 : size + 13], "big")
        slug: int = _FIGURES.unpack_from(row, size + 13)[5]
        return order, self.texts[slug]

    def first_seen(self, row: bytes) -> str:
        return row[: row[-1]].decode()

    def flap_class(self, row: bytes) -> str:
        index: int = _FIGURES.unpack_from(row, row[-1] + 13)[3]
        return self.texts[index]

    def row(self, test_id: str, row: bytes) -> dict[str, Any]:
        size = row[-1]
        requests, count, duration, flap_class, status, slug, tier = _FIGURES.unpack_from(
            row, size + 13
        )
        return {
            "test_id": test_id,
            "flap_class": self.texts[flap_class],
            "requests": requests,
            "status": self.texts[status],
            "duration_ms": None if math.isnan(duration) else duration,
            "first_seen": row[:size].decode() or None,
            "slug": self.texts[slug],
            "log_tier": self.texts[tier],
            "envelopes": count,
        }


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
                if env["boundary"].startswith("cvdiag."):  # not a test's story
                    if env["boundary"] == "cvdiag.queue_dropped":
                        count = env["metadata"].get("dropped_count")
                        dropped += count if type(count) is int and count > 0 else 0
                    continue
                seen.add(record)
    args.progress.done()
    malformed.finish()
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
            if args.failed and flap_class == "healthy":
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
