"""The parser: one sub-command per job; every error is one line (exit 2), never a usage dump.

Options may stand anywhere among the arguments (``cvdiag replay ID --json app.log``), before the
command too (``cvdiag --json ls app.log``): each command is parsed on its own with
``parse_intermixed_args``, which argparse cannot do through sub-parsers. Filters case-fold like
the ids they match, and a repeated filter means either. What each option's value may be is
checked by the types in ``values.py``; a misspelt command or option gets a "did you mean".
"""

from __future__ import annotations

import argparse
import difflib
import sys
import textwrap
from collections.abc import Callable, Sequence

from cvdiag.cli.compare_arguments import diff_parser, flakes_parser
from cvdiag.cli.output import UsageError, printed
from cvdiag.cli.style import COLORS
from cvdiag.cli.values import (
    WholeWords,
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
from cvdiag.core.version import BUILD, __version__
from cvdiag.diagnosis.classes import CLASSES, DEFAULT_FIRST_TOKEN_TIMEOUT

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Final, NoReturn

    from _typeshed import SupportsWrite

EXIT_CODES: Final = (
    "exit codes: 0 ok, 1 nothing found or invalid envelopes, 2 bad arguments or unreadable"
    " input, 3 internal error"
)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are exceptions, turned into one line by ``main``."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        unknown = [w for w in message.split() if w.startswith("-")]
        if message.startswith("unrecognized arguments:") and unknown:
            known = [s for action in self._actions for s in action.option_strings]
            close = difflib.get_close_matches(unknown[0].split("=", 1)[0], known, n=1)
            message += f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"{command}: {message}" if command else message)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse ignores a failed write: ``cvdiag --help > /dev/full`` would exit 0.
        if message and (file is None or file is sys.stdout):
            printed(message, file, self.prog.partition(" ")[2])


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
    """``what`` ends in the id: "only the envelopes of this test id"."""
    parser.add_argument(
        "--test-id",
        type=test_id,
        action="append",
        dest="test_ids",
        metavar="ID",
        help=f"{what}, normalised as the middleware adopts it; repeat for either",
    )


def _test_id(parser: argparse.ArgumentParser) -> None:
    # Read as typed, normalised afterwards (``opening.settle_inputs``): the word as typed tells a
    # test id from a log given in its place (``cvdiag replay app.log t-42``).
    parser.add_argument(
        "test_id",
        metavar="TEST_ID",
        help="the test id as ls shows it, or as sent in x-test-id (normalised as adopted)",
    )


def _window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", type=moment, metavar="T", help="ts >= T (ISO 8601; UTC if bare)")
    parser.add_argument("--until", type=moment, metavar="T", help="ts < T")


def _command(name: str, summary: str, description: str, examples: str) -> Parser:
    parser = Parser(
        prog=f"cvdiag {name}",
        description=f"{summary}\n\n" + textwrap.fill(" ".join(description.split()), 88),
        epilog=f"example:\n{textwrap.indent(examples.strip(), '  ')}\n\n{EXIT_CODES}",
        formatter_class=WholeWords,
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
    _test_ids(p, "only the envelopes of this test id")
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
    _test_id(p)
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
    _test_id(p)
    _json(p, "JSON: test_id, flap_class, reason, log_tier, unchecked, caveat, evidence")
    _timeout(p)
    _files(p)
    return p


def _ls() -> Parser:
    p = _command(
        "ls",
        "List the test ids of a log: class, requests, status, duration, first seen.",
        """One line per test id, in the order first seen. --class keeps the given classes
        (repeat for either), --failed every class but healthy and cut-by-writer: the list a CI
        job prints when something failed. Exit 1 when nothing is listed.""",
        "cvdiag ls --failed app.log\n"
        "cvdiag ls --class stalled-backend --since 2026-11-22T03:00Z app.log",
    )
    p.add_argument("--class", dest="classes", type=flap_class, action="append", metavar="C",
                   help=f"only the test ids of class C: {', '.join(CLASSES)};"
                   " repeat for either")  # fmt: skip
    p.add_argument(
        "--failed",
        action="store_true",
        help="every test id that failed (not healthy, not cut by the writer)",
    )
    _test_ids(p, "only this test id")
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
    _test_ids(p, "only the envelopes of this test id")
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
        "cvdiag report app.log\ncvdiag report --all -o run-42.html app.log.gz\n"
        "cvdiag report backend.log --junit results.xml",
    )
    p.add_argument("-o", "--output", default="cvdiag-report.html", metavar="PATH",
                   help="the page to write (default %(default)s; '-': stdout)")  # fmt: skip
    p.add_argument("--all", action="store_true", help="draw healthy test ids too")
    p.add_argument("--max-drawn", type=count, default=50, metavar="N",
                   help="draw at most N test ids (default %(default)s)")  # fmt: skip
    p.add_argument("--junit", action="append", default=[], metavar="XML",
                   help="JUnit XML of the test run (pytest, Playwright, vitest, Jest), one per"
                   " --junit (a FILE that is XML is one too): the page shows each test, its"
                   " outcome, attempts and failure, joined to its test ids, and only that"
                   " run's test ids")  # fmt: skip
    _test_ids(p, "report only this test id")
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
    "diff": lambda: diff_parser(_command, _json, _timeout),
    "flakes": lambda: flakes_parser(_command, _json, _timeout, _files),
    "demo": _demo,
}


def build() -> Parser:
    """The top-level parser: ``--version``, ``--help`` and the list of commands."""
    lines = [
        f"  {name:<9} {(COMMANDS[name]().description or '').splitlines()[0]}" for name in COMMANDS
    ]
    lines.append(f"  {'help':<9} This list, or with a COMMAND, its description and example.")
    parser = Parser(
        prog="cvdiag",
        usage="cvdiag [--version] COMMAND [ARGS...]",
        description="Read CVDIAG envelope logs: find, replay, classify, list, follow, count and"
        " validate.\n\ncommands:\n" + "\n".join(lines),
        epilog="'cvdiag help COMMAND' (or 'cvdiag COMMAND --help') describes a command with an"
        " example.\n" + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cvdiag {__version__} ({BUILD})")
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command's arguments; ``--help``, ``--version`` and ``help`` print and exit 0."""
    before, name, rest = _split(list(argv))
    if name is None or "--version" in before:
        build().parse_known_args(before)  # --help or --version: prints and exits
        raise UsageError(f"a command is required: {', '.join(COMMANDS)}")
    if name == "help":
        if len(rest) > 1:
            raise UsageError("help: give one COMMAND at most (cvdiag help ls)")
        if not rest:
            build().print_help()
            raise SystemExit(0)
        name, before, rest = rest[0], [], ["--help"]
    make = COMMANDS.get(name)
    if make is None:
        close = difflib.get_close_matches(name, [*COMMANDS, "help"], n=1)
        hint = f": did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"unknown command {name!r}{hint} (commands: {', '.join(COMMANDS)})")
    # ``cvdiag --json ls app.log``: options before the command are the command's, as after it.
    args = make().parse_intermixed_args(before + rest)
    args.command = name
    from cvdiag.cli.opening import settle_inputs  # the reader, which --help does without

    settle_inputs(args)
    return args


def _split(words: list[str]) -> tuple[list[str], str | None, list[str]]:
    """The options before the command, the command (None if there is none), and the rest."""
    if words and not words[0].startswith("-"):
        return [], words[0], words[1:]  # the usual case: no parser built to find the command
    valued = {
        option
        for make in COMMANDS.values()
        for action in make()._actions
        if action.nargs != 0
        for option in action.option_strings
    }
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        word = words[i]
        if word == "--":
            return words[:i], (words[i + 1] if i + 1 < len(words) else None), words[i + 2 :]
        takes = "=" not in word and (
            word in valued or (word.startswith("--") and any(v.startswith(word) for v in valued))
        )
        i += 2 if takes else 1
    if i >= len(words):
        return words, None, []
    return words[:i], words[i], words[i + 1 :]
