"""``cvdiag flakes``: over many runs' logs, per test, its attempts, its failures by class and the
facts that separate the failing attempts from the passing ones, the flakiest test first."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import orjson

from cvdiag.cli.output import NOTHING, OK, USAGE, Failure, Malformations, Output
from cvdiag.compare.flakes import Test, by_test, ended_well
from cvdiag.compare.story import Story
from cvdiag.layers.runner import Words, tell, words_of
from cvdiag.logs.reading import Inputs, Malformed, records, written_as_is

#: Failing test ids of one log up to this many are read again one by one (module-level: the
#: tests lower it).
SEARCHED_ALONE = 8


def flakes(args: argparse.Namespace) -> int:
    names, words = _junit(args.junit) if args.junit else (None, {})
    malformed = Malformations("flakes")
    tests = by_test(_stories(args, malformed, names, words), names=names)
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


def _stories(
    args: argparse.Namespace,
    malformed: Malformations,
    names: dict[str, tuple[str, bool]] | None,
    words: Words,
) -> Iterator[tuple[str, Story]]:
    """Each log's stories, one log at a time: a run's test ids are its own (the same id in two
    logs is two attempts). The classifier's facts are gathered only for the failures, in a
    second read of their lines: a pass's class is never shown. A log of probe lines alone is
    no run of its own: its lines join the failures' stories of the runs beside it."""
    companions = _probe_logs(args.files)
    for name in args.files:
        if name in companions:
            continue
        stories: dict[str, Story] = {}
        with Inputs([name]) as inputs:
            for item in inputs:
                item.numbered = False
                for record in records(item, malformed):
                    test_id = record.envelope["test_id"]
                    story = stories.get(test_id)
                    if story is None:
                        story = stories[test_id] = Story(test_id, gather_facts=False, timed=False)
                    story.add(record)
        if companions and stories:  # the probe's lines of this run's test ids
            with Inputs(companions) as inputs:
                for item in inputs:
                    item.numbered = False
                    for record in records(item, _ignored, test_id=frozenset(stories)):
                        stories[record.envelope["test_id"]].client.add(record)
        for test_id, story in stories.items():
            tell(story.client, words, test_id)  # what the runner said, for the facts of each
            story.finish(first_token_timeout=args.first_token_timeout)
        failing = frozenset(i for i, story in stories.items() if not _passed(story, names))
        if failing:
            _gather([name, *companions], failing, stories)
            for test_id in failing:  # the runner's words, where no probe wrote
                tell(stories[test_id].facts.join, words, test_id)
        for story in stories.values():
            if story.count:
                yield name, story


def _passed(story: Story, names: dict[str, tuple[str, bool]] | None) -> bool:
    if names is None:
        return ended_well(story)
    named = names.get(story.test_id)
    return named is None or named[1]  # a story no test forwarded is not counted


def _probe_logs(files: list[str]) -> list[str]:
    """The logs that hold no backend envelope (a probe's own file), each read until its first
    backend line: at once for a backend's log. None when a log cannot be read twice."""
    found = []
    with Inputs(files) as inputs:
        if not all(item.rereadable for item in inputs):
            return []
        for item in inputs:
            item.numbered = False
            if not any(True for _ in records(item, _ignored, needle=b'"backend.')):
                found.append(item.name)
    return found if len(found) < len(files) else []


def _gather(names: list[str], failing: frozenset[str], stories: dict[str, Story]) -> None:
    """The classifier's facts of the failing stories, from their lines read again: up to
    ``SEARCHED_ALONE`` test ids each searched for as bytes (at disk speed: 10 ms for 10 MB
    here), more in one read that parses every envelope again (170 ms)."""
    alone = sorted(failing) if len(failing) <= SEARCHED_ALONE else []
    groups = [frozenset([i]) for i in alone if written_as_is(i)]
    rest = failing.difference(*groups)
    for ids in [*groups, rest] if rest else groups:
        with Inputs(names) as inputs:
            for item in inputs:
                item.numbered = False
                for record in records(item, _ignored, test_id=ids):
                    if not record.envelope["boundary"].startswith("cvdiag."):
                        stories[record.envelope["test_id"]].facts.add(record)


def _ignored(problem: Malformed) -> None:
    pass  # the first read reported it


def _junit(paths: list[str]) -> tuple[dict[str, tuple[str, bool]], Words]:
    """Test id → (its test, whether that attempt passed); and what the runner said of a client
    that timed out, per test id."""
    from cvdiag.runs import JUnitError, read_junit

    names: dict[str, tuple[str, bool]] = {}
    attempts: list[tuple[list[str], str, str]] = []
    for path in paths:
        try:
            cases = read_junit(path)
        except JUnitError as exc:
            raise Failure(f"{path}: {exc}", USAGE) from None
        for case in cases:
            for attempt in case.attempts:
                attempts.append((attempt.test_ids, attempt.outcome, attempt.failure))
                if attempt.outcome in ("passed", "failed"):
                    for test_id in attempt.test_ids:
                        names[test_id] = (case.name, attempt.outcome == "passed")
    return names, words_of(attempts)


def render(tests: list[Test]) -> tuple[list[str], list[tuple[str, ...]]]:
    width = max(len("test"), *(len(t.name) for t in tests))
    lines = [f"{'test':<{width}}  attempts  failed   rate"]
    styles: list[tuple[str, ...]] = [("bold",)]
    for test in tests:
        lines.append(
            f"{test.name:<{width}}  {test.attempts:>8}  {test.failures:>6}  {test.rate:>5.0%}"
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
