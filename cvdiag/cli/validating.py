"""``cvdiag validate``: every envelope of the logs against the schema, problems in file order.

A large plain file is checked in ranges by worker processes (``logs/ranges.py``); each
returns a ``_Tally`` holding its counts and its first problems, merged here in file order, so
the lines printed are those of one sequential read.
"""

from __future__ import annotations

import argparse

from cvdiag.cli.opening import names, opened, output_for
from cvdiag.cli.output import NOTHING, OK, Failure, Output
from cvdiag.logs import ranges
from cvdiag.logs.reading import Input, Malformed, parsed_lines
from cvdiag.logs.validate import MAX_BYTES, fast_check, problems

#: ``cvdiag validate`` lists this many invalid envelopes, then only counts them.
INVALID_SHOWN = 100


class _Tally:
    """Counts and lists what ``validate`` finds. With an output, lines are written as they are
    found; without one (in a worker), the first ``INVALID_SHOWN`` are kept for ``merge``."""

    def __init__(self, out: Output | None) -> None:
        self.out = out
        self.envelopes = 0
        self.invalid = 0
        self.malformed = 0
        self.set_aside = 0
        self.rules: dict[str, int] = {}
        #: ``(source, line number, what follows it)`` of the problems kept, without an output.
        self.kept: list[tuple[str, int, str]] = []
        #: The newlines of the range read (a worker's), to number the next range's lines.
        self.newlines = 0

    @property
    def problems(self) -> int:
        return self.invalid + self.malformed + self.set_aside

    def report(self, source: str, lineno: int, rest: str) -> None:
        if self.problems <= INVALID_SHOWN:
            self._show(source, lineno, rest)

    def _show(self, source: str, lineno: int, rest: str) -> None:
        if self.out is None:
            self.kept.append((source, lineno, rest))
        else:
            self.out.human([f"{source}:{lineno}{rest}"])

    def on_malformed(self, problem: Malformed) -> None:
        # A problem's place is ``source:line`` (a worker's byte offsets become line numbers
        # before its tally is merged).
        if problem.set_aside:
            self.set_aside += 1
            self.report(problem.source, problem.lineno, f": {problem.reason}")
            return
        self.malformed += 1
        self.report(problem.source, problem.lineno, f": malformed: {problem.reason}")

    def check(self, source: Input, lineno: int, text: bytes, value: object) -> None:
        self.envelopes += 1
        found = problems(value, len(text))
        if not found:
            return
        self.invalid += 1
        for rule in {problem.rule for problem in found}:  # envelopes per rule, not problems
            self.rules[rule] = self.rules.get(rule, 0) + 1
        name = value.get("boundary") if isinstance(value, dict) else None
        label = f" {name}" if isinstance(name, str) else ""
        more = f"; and {len(found) - 5} more" if len(found) > 5 else ""
        self.report(source.name, lineno, f"{label}: " + "; ".join(map(str, found[:5])) + more)

    def merge(self, part: _Tally, shift: int) -> None:
        """Add a later range's tally, its line numbers moved on by ``shift``."""
        # The part kept its first problems: those that come within the first INVALID_SHOWN
        # of the whole read are shown, as a sequential read would have shown them.
        room = max(0, INVALID_SHOWN - self.problems)
        for source, lineno, rest in part.kept[:room]:
            self._show(source, lineno + shift, rest)
        self.envelopes += part.envelopes
        self.invalid += part.invalid
        self.malformed += part.malformed
        self.set_aside += part.set_aside
        for rule, count in part.rules.items():
            self.rules[rule] = self.rules.get(rule, 0) + count


def _read(source: Input, tally: _Tally) -> None:
    # Nearly every envelope is valid: the compiled check answers for it right here, and only
    # the others go through ``problems`` (which asks the check again, then words them).
    accepts, cap = fast_check(), MAX_BYTES
    valid = 0
    for lineno, text, value in parsed_lines(source, tally.on_malformed):
        if len(text) <= cap and accepts(value):
            valid += 1
        else:
            tally.check(source, lineno, text, value)
    tally.envelopes += valid


def _check_range(name: str, start: int, end: int) -> _Tally:
    """A worker's job: the tally of ``name``'s bytes ``[start, end)``."""
    source, newlines = ranges.open_range(name, start, end)
    source.numbered = False  # byte offsets: only the lines kept are numbered, below
    tally = _Tally(None)
    try:
        _read(source, tally)
    finally:
        source.close()
    tally.newlines = newlines()
    numbers = ranges.line_numbers(name, start, [offset for _, offset, _ in tally.kept])
    tally.kept = [(s, n, rest) for (s, _, rest), n in zip(tally.kept, numbers, strict=True)]
    return tally


def _check(source: Input, tally: _Tally) -> None:
    spans = ranges.plan(source)
    if spans is None:
        _read(source, tally)
        return
    shift = 0
    for part in ranges.run(_check_range, source, spans, on_done=source.on_read):
        tally.merge(part, shift)
        shift += part.newlines


def validate(args: argparse.Namespace) -> int:
    out = output_for(args)
    tally = _Tally(out)
    with opened(args) as inputs:
        for source in inputs:
            _check(source, tally)
    args.progress.done()
    shown = tally.problems
    if shown > INVALID_SHOWN:
        out.line(f"… {shown - INVALID_SHOWN} more not shown")
    rules = ", ".join(f"{rule} {n}" for rule, n in sorted(tally.rules.items()))
    out.line(
        f"{tally.envelopes} envelopes: {tally.envelopes - tally.invalid} valid,"
        f" {tally.invalid} invalid"
        + (f" ({rules})" if rules else "")
        + f"; {tally.malformed} malformed lines; {tally.set_aside} lines set aside"
    )
    out.flush()
    if not tally.envelopes and not tally.malformed and not tally.set_aside:
        raise Failure(f"no CVDIAG envelope in {names(args)}")
    bad = tally.invalid + tally.malformed + (tally.set_aside if args.strict else 0)
    return NOTHING if bad else OK
