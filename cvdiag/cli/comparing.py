"""``cvdiag diff``: two stories side by side, the first point where they split and every other
difference beyond noise. ``cvdiag flakes`` (``flaking.py``) does it over many runs."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import orjson

from cvdiag.cli.output import NOTHING, OK, Failure, Malformations, Output, UsageError
from cvdiag.cli.style import class_color
from cvdiag.cli.values import test_id as normalised
from cvdiag.compare.diff import Comparison, compare
from cvdiag.compare.story import Story
from cvdiag.layers.runner import Words, tell, words_of
from cvdiag.logs.reading import Inputs, merged

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from cvdiag.runs import Case

#: One story to read: its test id and the logs it is in.
Wanted = tuple[str, list[str]]


def diff(args: argparse.Namespace) -> int:
    a, b = _wanted(args)
    words = _words(args.junit) if args.junit else {}
    first = read_story(a, args.first_token_timeout, words)
    second = read_story(b, args.first_token_timeout, words)
    result = compare(first, second, threshold_ms=args.threshold_ms)
    out = Output(color=args.color)
    if args.json:
        out.write(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        lines, styles = render(result)
        out.human(lines, styles)
    out.flush()
    return OK if result.same else NOTHING


def read_story(wanted: Wanted, first_token_timeout: float, words: Words | None = None) -> Story:
    """The story of ``wanted``'s test id, read from its logs (only its lines are parsed); what
    the runner's JUnit said of its client timing out (``words``) where no probe wrote."""
    test_id, files = wanted
    story = Story(test_id)
    malformed = Malformations("diff")
    with Inputs(files) as inputs:
        for item in inputs:
            item.numbered = False
        for record in merged(inputs, malformed, test_id=test_id):
            story.add(record)
    malformed.finish()
    if not story.count:
        raise Failure(f"no envelope with test id {test_id} in {', '.join(files)}", NOTHING)
    tell(story.facts.join, words or {}, test_id)
    return story.finish(first_token_timeout=first_token_timeout)


def _words(junit: Sequence[str]) -> Words:
    from cvdiag.runs import JUnitError, read_junit

    attempts = []
    for path in junit:
        try:
            cases = read_junit(path)
        except JUnitError as exc:
            raise Failure(f"{path}: {exc}", 2) from None
        attempts += [(a.test_ids, a.outcome, a.failure) for c in cases for a in c.attempts]
    return words_of(attempts)


def _wanted(args: argparse.Namespace) -> tuple[Wanted, Wanted]:
    """The two stories the words name: ``LOG#ID``, an ``ID`` followed by the ``LOG`` it is in,
    ids read from every log given, or with ``--junit`` a test's failing and passing attempts."""
    logs: list[str] = []
    bound: list[tuple[str, list[str] | None]] = []
    joining: list[str] | None = None  # an ID's logs so far: a log right after them joins them
    for word in args.words:
        log, _, after = word.rpartition("#")
        if log and after and os.path.isfile(log):
            bound.append((after, [log]))
            joining = None
        elif os.path.exists(word) or word == "-":
            logs.append(word)
            if bound and bound[-1][1] is None:
                joining = [word]
                bound[-1] = (bound[-1][0], joining)
            elif joining is not None:  # a backend's log and its probe's: one story
                joining.append(word)
        else:
            bound.append((word, None))
            joining = None
    if not logs and any(files is None for _, files in bound):
        raise UsageError("diff: no log given: name one (cvdiag diff ID-A ID-B app.log)")
    if args.junit:
        bound = _attempts([word for word, _ in bound], args.junit, logs)
    if len(bound) != 2:
        raise UsageError(
            f"diff: give two stories (ID LOG, LOG#ID, or two ids and their logs), not {len(bound)}"
        )
    (one, in_one), (two, in_two) = bound
    return (_id(one), in_one or logs), (_id(two), in_two or logs)


def _id(word: str) -> str:
    try:
        return normalised(word)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"diff: {exc}") from None


def _attempts(
    names: Sequence[str], junit: Sequence[str], logs: list[str]
) -> list[tuple[str, list[str] | None]]:
    """A test's passing attempt first (the reference), then its failing one: from one test name
    (a flaky test), or the first attempt of each of two names."""
    from cvdiag.runs import JUnitError, read_junit

    cases: dict[str, Case] = {}
    for path in junit:
        try:
            cases.update((case.name, case) for case in read_junit(path))
        except JUnitError as exc:
            raise Failure(f"{path}: {exc}", 2) from None
    found = []
    for name in names:
        case = cases.get(name) or next((c for c in cases.values() if c.name.endswith(name)), None)
        if case is None:
            raise Failure(f"no test named {name!r} in {', '.join(junit)}", NOTHING)
        found.append(case)
    if len(found) == 1:
        passed = [a for a in found[0].attempts if a.outcome == "passed" and a.test_ids]
        failed = [a for a in found[0].attempts if a.outcome == "failed" and a.test_ids]
        if not passed or not failed:
            raise Failure(
                f"{found[0].name} has no passing and failing attempt with test ids to compare",
                NOTHING,
            )
        return [(passed[-1].test_ids[0], None), (failed[0].test_ids[0], None)]
    firsts = [next((i for a in case.attempts for i in a.test_ids), None) for case in found]
    if None in firsts:
        raise Failure("a test named has no test id in the JUnit XML", NOTHING)
    return [(str(first), None) for first in firsts]


def render(result: Comparison) -> tuple[list[str], list[tuple[str, ...]]]:
    a, b = result.a, result.b
    lines = [f"a  {a.test_id}  {a.flap_class}", f"b  {b.test_id}  {b.flap_class}"]
    styles: list[tuple[str, ...]] = [class_color(a.flap_class), class_color(b.flap_class)]
    for side, story in (("a", a), ("b", b)):
        for sent, calls in story.loops():
            lines.append(
                f"{side}: possible loop: the same prompt ({sent}) sent {calls} times in one turn"
            )
            styles.append(("yellow",))
    if result.same:
        lines.append("same story: no difference beyond the threshold")
        return lines, [*styles, ("green",)]
    if result.shared:
        lines.append("both reached  " + " → ".join(result.shared))
        styles.append(())
    lines.append(f"first split   {result.split}")
    styles.append(("bold",))
    lines.append("differences")
    styles.append(("bold",))
    for item in result.differences:
        lines.append(
            f"  {'+' + format(item.at_ms, '.0f') + ' ms':>10}  {item.where}  {item.what}:"
            f" {_value(item.a)} → {_value(item.b)}"
        )
        styles.append(())
    return lines, styles


def _value(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}"
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."
