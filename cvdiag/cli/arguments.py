"""The parser: one sub-command per job; every error is one line (exit 2), never a usage dump.

Options may stand anywhere among the arguments (``cvdiag replay ID --json app.log``): each
command is parsed on its own with ``parse_intermixed_args``, which argparse cannot do through
sub-parsers. Filters case-fold like the ids they match, and a repeated filter means either.
What each option's value may be is checked by the types in ``values.py``.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable, Sequence

from cvdiag.analysis.classes import DEFAULT_FIRST_TOKEN_TIMEOUT
from cvdiag.analysis.inputs import STDIN
from cvdiag.cli.output import UsageError
from cvdiag.cli.style import COLORS
from cvdiag.cli.values import (
    boundary,
    count,
    flap_class,
    moment,
    outcome,
    seconds,
    slug,
    test_id,
    tier,
)
from cvdiag.core.version import __version__

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Final, NoReturn

EXIT_CODES: Final = (
    "exit codes: 0 ok, 1 nothing found or invalid envelopes, 2 bad arguments or unreadable"
    " input, 3 internal error"
)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are exceptions, turned into one line by ``main``."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        raise UsageError(f"{command}: {message}" if command else message)


# --- shared options -------------------------------------------------------------------------


def _files(parser: argparse.ArgumentParser, what: str = "log files") -> None:
    parser.add_argument(
        "files",
        nargs="*",
        default=[],
        metavar="FILE",
        help=f"{what}, plain or gzip; '-' (or nothing) reads stdin",
    )


def _json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what}")


def _color(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--color",
        "--colour",
        choices=COLORS,
        default="auto",
        help="colour human output: auto (a terminal, unless NO_COLOR is set), always, never",
    )


def _timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--first-token-timeout",
        type=seconds,
        default=DEFAULT_FIRST_TOKEN_TIMEOUT,
        metavar="SECONDS",
        help="past this, a first byte or first token is slow (default %(default)g)",
    )


def _test_ids(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--test-id",
        type=test_id,
        action="append",
        dest="test_ids",
        metavar="ID",
        help=f"{what} of this test id (case-folded); repeat for either",
    )


def _window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", type=moment, metavar="T", help="ts >= T (ISO 8601; UTC if bare)")
    parser.add_argument("--until", type=moment, metavar="T", help="ts < T")


def _command(name: str, summary: str, description: str, examples: str) -> Parser:
    parser = Parser(
        prog=f"cvdiag {name}",
        description=f"{summary}\n\n" + textwrap.fill(" ".join(description.split()), 88),
        epilog=f"example:\n{textwrap.indent(examples.strip(), '  ')}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _color(parser)
    return parser


# --- the commands ---------------------------------------------------------------------------


def _grep() -> Parser:
    p = _command(
        "grep",
        "Print the envelopes that match, as CVDIAG lines or a JSON array.",
        """Filters combine (AND); a filter repeated means either (OR). --boundary takes names or
        globs. The output is itself a log every command reads. Exit 1 when nothing matched.""",
        "cvdiag grep --test-id t-42 --boundary 'backend.llm.*' app.log",
    )
    _test_ids(p, "envelopes")
    p.add_argument("--boundary", type=boundary, action="append", metavar="B",
                   help="a boundary name or glob; repeat for either")  # fmt: skip
    p.add_argument("--slug", type=slug, action="append", metavar="S",
                   help="envelopes of this slug; repeat for either")  # fmt: skip
    p.add_argument("--outcome", type=outcome, action="append", metavar="O",
                   help="ok, err, timeout or info; repeat for either")  # fmt: skip
    _window(p)
    _json(p, "a JSON array of the envelopes")
    _files(p)
    return p


def _replay() -> Parser:
    p = _command(
        "replay",
        "Show one test id's timeline as a tree with a waterfall.",
        """Every envelope of the test id in time order, nested by parent span (request, agent
        turn, LLM call with its heartbeats and response), with offsets, durations, time to
        first token and the key metadata.""",
        "cvdiag replay t-42 app.log\ncvdiag replay t-42 --json app.log.gz",
    )
    p.add_argument("test_id", type=test_id, metavar="TEST_ID")
    _json(p, 'JSON: {"test_id", "events"}')
    _files(p)
    return p


def _classify() -> Parser:
    p = _command(
        "classify",
        "Say why one test id failed (or did not): a class, a reason, the evidence.",
        """The rules are checked in order and the first that holds wins (docs/troubleshooting.md
        lists them with the tier each needs). When the log lacks the tier a class needs, the
        verdict says so and names the class the log still supports.""",
        "cvdiag classify t-42 app.log --first-token-timeout 10",
    )
    p.add_argument("test_id", type=test_id, metavar="TEST_ID")
    _json(p, "JSON: test_id, flap_class, reason, log_tier, unchecked, caveat, evidence")
    _timeout(p)
    _files(p)
    return p


def _ls() -> Parser:
    p = _command(
        "ls",
        "List the test ids of a log: class, requests, status, duration, first seen.",
        """One line per test id, in the order first seen. --class keeps the given classes
        (repeat for either), --failed every class but healthy: the list a CI job prints when
        something failed. Exit 1 when nothing is listed.""",
        "cvdiag ls --failed app.log\n"
        "cvdiag ls --class stalled-backend --since 2026-11-22T03:00Z app.log",
    )
    p.add_argument("--class", dest="classes", type=flap_class, action="append", metavar="C",
                   help="test ids of this class; repeat for either")  # fmt: skip
    p.add_argument("--failed", action="store_true", help="every test id that is not healthy")
    _test_ids(p, "only the test ids given")
    _window(p)
    _json(p, "a JSON array, one object per test id")
    _timeout(p)
    _files(p)
    return p


def _tail() -> Parser:
    p = _command(
        "tail",
        "Follow a log or a live pipe, one readable line per envelope.",
        """Each envelope becomes one compact line (time, test id, boundary, the key facts;
        aborts and errors stand out); the host's own lines pass through. A FILE is followed
        like tail -f, after its last --lines lines; stdin is read until it ends. The server's
        stdout is unchanged: pipe it through tail only to read it.""",
        "uvicorn app:app | cvdiag tail\ncvdiag tail --test-id t-42 --tier verbose app.log",
    )
    _test_ids(p, "envelopes")
    p.add_argument("--tier", type=tier, metavar="TIER",
                   help="only boundaries emitted at this tier or below")  # fmt: skip
    p.add_argument("--envelopes-only", action="store_true", help="drop the host's own lines")
    p.add_argument("-n", "--lines", type=count, default=10, metavar="N",
                   help="a FILE's last N lines first (default 10)")  # fmt: skip
    p.add_argument("--no-follow", action="store_true", help="stop at the end of the FILE")
    p.add_argument("files", nargs="?", default=None, metavar="FILE",
                   help="the log to follow; '-' (or nothing) reads stdin")  # fmt: skip
    return p


def _stats() -> Parser:
    p = _command(
        "stats",
        "Per-slug and overall figures: requests, aborts, errors, latencies, classes.",
        """Counts are exact; percentiles exact up to a reservoir and sampled beyond. --by-class
        classifies every test id (memory: a small summary per test id).""",
        "cvdiag stats --by-class app.log",
    )
    _json(p, "the figures as JSON")
    p.add_argument("--by-class", action="store_true", help="classify every test id")
    _timeout(p)
    _files(p)
    return p


def _validate() -> Parser:
    p = _command(
        "validate",
        "Check every envelope against the packaged CVDIAG schema: a CI step.",
        """Lists invalid envelopes, malformed lines and lines that hold an envelope after other
        text (set aside), then a summary. Exit 1 on an invalid envelope or a malformed line,
        and with --strict also on a line set aside.""",
        "cvdiag validate --strict app.log",
    )
    p.add_argument("--strict", action="store_true", help="fail on lines set aside too")
    _files(p)
    return p


def _report() -> Parser:
    p = _command(
        "report",
        "Write the log as one HTML page: every test id, and each failed one drawn to scale.",
        """A self-contained page to open from disk or a CI artifact: the test ids failed first
        with their classes, then for each failed one a waterfall, the class with its reason and
        evidence, and its envelopes. --all draws healthy test ids too. The page loads nothing
        from anywhere and runs no value from the log.""",
        "cvdiag report app.log\ncvdiag report --all -o run-42.html app.log.gz",
    )
    p.add_argument("-o", "--output", default="cvdiag-report.html", metavar="PATH",
                   help="the page to write (default %(default)s; '-': stdout)")  # fmt: skip
    p.add_argument("--all", action="store_true", help="draw healthy test ids too")
    p.add_argument("--max-drawn", type=count, default=50, metavar="N",
                   help="draw at most N test ids (default %(default)s)")  # fmt: skip
    _test_ids(p, "only the test ids given")
    _timeout(p)
    _files(p)
    return p


def _demo() -> Parser:
    p = _command(
        "demo",
        "Run an instrumented example backend and explain what it wrote.",
        """Starts an example agent backend on loopback, drives one conversation per failure
        class, writes its log to cvdiag-demo.log (--log), and shows each test id's replay and
        class, with the commands to run them yourself; it ends by writing the log's report
        page, cvdiag-demo.html (--report).""",
        "cvdiag demo\ncvdiag replay demo-1-healthy-chat cvdiag-demo.log",
    )
    p.add_argument("--log", default="cvdiag-demo.log", metavar="PATH",
                   help="the log to write (default %(default)s, replaced)")  # fmt: skip
    p.add_argument("--report", default="cvdiag-demo.html", metavar="PATH",
                   help="its cvdiag report page (default %(default)s, replaced)")  # fmt: skip
    return p


COMMANDS: Final[dict[str, Callable[[], Parser]]] = {
    "grep": _grep,
    "replay": _replay,
    "classify": _classify,
    "ls": _ls,
    "tail": _tail,
    "stats": _stats,
    "validate": _validate,
    "report": _report,
    "demo": _demo,
}


def build() -> Parser:
    """The top-level parser: ``--version``, ``--help`` and the list of commands."""
    lines = [
        f"  {name:<9} {(COMMANDS[name]().description or '').splitlines()[0]}" for name in COMMANDS
    ]
    parser = Parser(
        prog="cvdiag",
        usage="cvdiag [--version] COMMAND [ARGS...]",
        description="Read CVDIAG envelope logs: find, replay, classify, list, follow, count and"
        " validate.\n\ncommands:\n" + "\n".join(lines),
        epilog="'cvdiag COMMAND --help' describes a command with an example.\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cvdiag {__version__}")
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    words = list(argv)
    color: list[str] = []
    # ``cvdiag --color never ls``: a colour choice before the command applies to it.
    while words and (words[0].startswith("--color") or words[0].startswith("--colour")):
        if "=" in words[0]:
            color.append(words.pop(0))
        else:
            color.extend(words[:2])
            del words[:2]
    if not words or words[0].startswith("-"):
        build().parse_args(words)  # --help, --version or an unknown option: exits or raises
        raise UsageError(f"a command is required: {', '.join(COMMANDS)}")
    name, rest = words[0], words[1:]
    make = COMMANDS.get(name)
    if make is None:
        raise UsageError(f"unknown command {name!r} (choose from {', '.join(COMMANDS)})")
    args = make().parse_intermixed_args(color + rest)
    args.command = name
    files = getattr(args, "files", None)
    if name == "tail":
        if files is None and _interactive():
            raise UsageError("tail: no input: give a FILE, or pipe a server into it")
        args.files = [files or STDIN]
    elif isinstance(files, list) and not files:
        if _interactive():
            raise UsageError(f"{name}: no input: give FILE arguments, or '-' for stdin")
        args.files = [STDIN]
    return args


def _interactive() -> bool:
    try:
        return sys.stdin is None or sys.stdin.isatty()
    except (ValueError, OSError):
        return True
