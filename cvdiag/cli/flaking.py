"""``cvdiag flakes``: over many runs' logs, per test, its attempts, its failures by class and the
facts that separate the failing attempts from the passing ones, the flakiest test first."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import orjson

from cvdiag.analysis.reading import Inputs, records
from cvdiag.cli.output import NOTHING, OK, USAGE, Failure, Malformations, Output
from cvdiag.compare.flakes import Test, by_test
from cvdiag.compare.story import Story


def flakes(args: argparse.Namespace) -> int:
    names = _junit(args.junit) if args.junit else None
    malformed = Malformations("flakes")
    tests = by_test(_stories(args, malformed), names=names)
    malformed.finish()
    if not tests:
        raise Failure("no test's story in the logs given", NOTHING)
    out = Output(color=args.color)
    if args.json:
        out.write(orjson.dumps([t.to_json() for t in tests], option=orjson.OPT_INDENT_2) + b"\n")
    else:
        lines, styles = render(tests)
        out.human(lines, styles)
    out.flush()
    return OK


def _stories(args: argparse.Namespace, malformed: Malformations) -> Iterator[tuple[str, Story]]:
    """Each log's stories, one log at a time: a run's test ids are its own (the same id in two
    logs is two attempts)."""
    for name in args.files:
        stories: dict[str, Story] = {}
        with Inputs([name]) as inputs:
            for item in inputs:
                item.numbered = False
                for record in records(item, malformed):
                    test_id = record.envelope["test_id"]
                    story = stories.get(test_id)
                    if story is None:
                        story = stories[test_id] = Story(test_id)
                    story.add(record)
        for story in stories.values():
            if story.facts.count:
                yield name, story.finish(first_token_timeout=args.first_token_timeout)


def _junit(paths: list[str]) -> dict[str, tuple[str, bool]]:
    from cvdiag.runs import JUnitError, read_junit

    names: dict[str, tuple[str, bool]] = {}
    for path in paths:
        try:
            cases = read_junit(path)
        except JUnitError as exc:
            raise Failure(f"{path}: {exc}", USAGE) from None
        for case in cases:
            for attempt in case.attempts:
                if attempt.outcome in ("passed", "failed"):
                    for test_id in attempt.test_ids:
                        names[test_id] = (case.name, attempt.outcome == "passed")
    return names


def render(tests: list[Test]) -> tuple[list[str], list[tuple[str, ...]]]:
    width = max(len("test"), *(len(t.name) for t in tests))
    lines = [f"{'test':<{width}}  attempts  failed   rate"]
    styles: list[tuple[str, ...]] = [("bold",)]
    for test in tests:
        lines.append(
            f"{test.name:<{width}}  {len(test.attempts):>8}  {len(test.failures):>6}"
            f"  {test.rate:>5.0%}"
        )
        styles.append(("red",) if test.failures else ())
        for cause in test.causes():
            provider = f" with provider {cause['provider']}" if cause["provider"] else ""
            lines.append(f"  {cause['count']} {cause['flap_class']}{provider}")
            styles.append(())
        for fact in test.separating():
            lines.append(
                f"  separates: {fact['fact']} (in {fact['failures']} of {fact['of_failures']}"
                f" failures, {fact['passes']} of {fact['of_passes']} passes)"
            )
            styles.append(("yellow",))
    return lines, styles
