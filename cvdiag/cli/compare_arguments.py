"""The parsers of ``cvdiag diff`` and ``cvdiag flakes``, built with the shared options the main
parser module hands in (kept apart so that module stays under its size cap)."""

from __future__ import annotations

import argparse

from cvdiag.cli.values import seconds

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    P = TypeVar("P", bound=argparse.ArgumentParser)
    Add = Callable[..., None]


def _junit(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--junit",
        action="append",
        default=[],
        metavar="XML",
        help=f"JUnit XML of the runs (pytest, Playwright, vitest, Jest), one per --junit (a"
        f" FILE that is XML is one too): {what}",
    )


def diff_parser(command: Callable[[str, str, str, str], P], json: Add, timeout: Add) -> P:
    p = command(
        "diff",
        "Compare two stories: where they split first, then every difference beyond noise.",
        """Each story is a test id in a log (ID LOG, or LOG#ID), or two ids read from the logs
        given. They are matched by structure, not ids: requests by method and path, agent scopes
        by name, LLM calls by order, provider and model. The first story is read as the
        reference (a passing attempt). With --junit, one test name compares its passing attempt
        with its failing one. Exit 0 when they tell the same story, 1 when they differ.""",
        "cvdiag diff t-pass t-fail app.log\ncvdiag diff run1.log#t-42 run2.log#t-42\n"
        "cvdiag diff test_chat.py::test_stream --junit results.xml backend.log",
    )
    p.add_argument(
        "words",
        nargs="+",
        metavar="STORY",
        help="ID LOG, LOG#ID, or IDs and then logs; test names with --junit",
    )
    p.add_argument(
        "--threshold-ms",
        type=seconds,
        default=1000.0,
        metavar="MS",
        help="timings further apart are a difference (default %(default)g)",
    )
    _junit(p, "STORY words are test names")
    json(p, "JSON: same, a, b, shared, first_split, differences")
    timeout(p)
    return p


def flakes_parser(
    command: Callable[[str, str, str, str], P], json: Add, timeout: Add, files: Add
) -> P:
    p = command(
        "flakes",
        "Per test over many runs' logs: attempts, failures by class, what separates them.",
        """One log per run, or one log with many attempts. A test is its JUnit name (--junit)
        or its test id without the run number (d4-chat-run7 is d4-chat); an attempt passed per
        JUnit, else when its class is healthy. Each test shows its failures by class and the
        facts (an edge header, a model, a fingerprint, a slow first token) found in the
        failures far more than in the passes. The flakiest test first.""",
        "cvdiag flakes run-*.log\ncvdiag flakes run-*.log --junit results-*.xml --json",
    )
    _junit(p, "test names and outcomes per attempt")
    json(p, "JSON: per test, attempts, passes, failures, flake_rate, causes, separating_facts")
    timeout(p)
    files(p)
    return p
