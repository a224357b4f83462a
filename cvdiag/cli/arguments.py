"""The parser: one sub-command per job; every error is one line (exit 2), never a usage dump."""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import math
import re
import sys
from collections.abc import Sequence
from typing import Final, NoReturn

from cvdiag import __version__
from cvdiag.analysis.classify import DEFAULT_FIRST_TOKEN_TIMEOUT
from cvdiag.analysis.reading import STDIN, parse_time
from cvdiag.cli.output import UsageError
from cvdiag.schema import OUTCOMES, packaged_schema

_TEST_ID: Final = re.compile(r"[a-z0-9._-]{1,128}")
BOUNDARIES: Final[tuple[str, ...]] = tuple(packaged_schema()["properties"]["boundary"]["enum"])


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are exceptions, turned into one line by ``main``."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        raise UsageError(f"{command}: {message}" if command else message)


def test_id(value: str) -> str:
    """A test id as envelopes carry it: lowercase ``[a-z0-9._-]``, at most 128 characters."""
    text = value.strip().lower()
    if not _TEST_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a test id (envelope test ids match ^[a-z0-9._-]{{1,128}}$)"
        )
    return text


def moment(value: str) -> datetime.datetime:
    parsed = parse_time(value)
    if parsed is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO-8601 date or date-time (e.g. 2026-11-22T03:00:00Z)"
        )
    return parsed


def seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return number


def boundary(value: str) -> str:
    """A boundary name, or a glob (``backend.llm.*``) that names at least one."""
    if not any(fnmatch.fnmatchcase(name, value) for name in BOUNDARIES):
        raise argparse.ArgumentTypeError(
            f"{value!r} names no boundary (e.g. backend.request.ingress, backend.llm.*)"
        )
    return value


def _files(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        default=[],
        metavar="FILE",
        help="log files, plain or gzip; '-' (or nothing) reads stdin",
    )


def _json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what}")


def _timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--first-token-timeout",
        type=seconds,
        default=DEFAULT_FIRST_TOKEN_TIMEOUT,
        metavar="SECONDS",
        help="past this, a first byte or LLM answer is slow (default %(default)g)",
    )


def build() -> Parser:
    parser = Parser(
        prog="cvdiag",
        description="Read CVDIAG envelope logs: find, replay, classify, count and validate.",
        epilog="exit codes: 0 ok, 1 nothing found or invalid envelopes, 2 bad arguments or"
        " unreadable input, 3 internal error",
    )
    parser.add_argument("--version", action="version", version=f"cvdiag {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    grep = commands.add_parser("grep", help="print the envelopes that match")
    grep.add_argument("--test-id", type=test_id, metavar="ID", help="envelopes of this test id")
    grep.add_argument(
        "--boundary",
        type=boundary,
        action="append",
        metavar="B",
        help="a boundary name or glob; repeat for several",
    )
    grep.add_argument("--slug", metavar="S", help="envelopes of this slug")
    grep.add_argument("--outcome", choices=sorted(OUTCOMES), help="envelopes with this outcome")
    grep.add_argument("--since", type=moment, metavar="T", help="ts >= T (ISO 8601; UTC if bare)")
    grep.add_argument("--until", type=moment, metavar="T", help="ts < T")
    _json(grep, "a JSON array of the envelopes")
    _files(grep)

    replay = commands.add_parser("replay", help="one test id's timeline as a tree")
    replay.add_argument("test_id", type=test_id, metavar="TEST_ID")
    _json(replay, 'JSON: {"test_id", "events"}')
    _files(replay)

    classify = commands.add_parser("classify", help="why one test id failed (or did not)")
    classify.add_argument("test_id", type=test_id, metavar="TEST_ID")
    _json(classify, 'JSON: {"test_id", "flap_class", "reason", "evidence"}')
    _timeout(classify)
    _files(classify)

    stats = commands.add_parser("stats", help="per-slug and overall figures")
    _json(stats, "the figures as JSON")
    stats.add_argument("--by-class", action="store_true", help="classify every test id")
    _timeout(stats)
    _files(stats)

    validate = commands.add_parser("validate", help="check every envelope against the schema")
    _files(validate)

    commands.add_parser("demo", help="run an instrumented example backend and explain it")
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    args = build().parse_args(list(argv))
    if args.command is None:
        raise UsageError("a command is required: grep, replay, classify, stats, validate or demo")
    files: list[str] | None = getattr(args, "files", None)
    if files is not None and not files:
        if _interactive():
            raise UsageError(f"{args.command}: no input: give FILE arguments, or '-' for stdin")
        args.files = [STDIN]
    return args


def _interactive() -> bool:
    try:
        return sys.stdin is None or sys.stdin.isatty()
    except (ValueError, OSError):
        return True
