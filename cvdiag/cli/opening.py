"""What the reading commands share: the inputs settled (stdin by default, each file once, a log
given in the place of a test id), the logs opened (with progress on a long read, a word on a
binary file), a second read for ``pertest``, the output, and the names of the inputs for an
error line."""

from __future__ import annotations

import argparse
import os
import sys

from cvdiag.cli.output import Output, UsageError, say
from cvdiag.cli.style import Progress
from cvdiag.cli.values import test_id
from cvdiag.logs.reading import STDIN, Input, Inputs

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from cvdiag.diagnosis.pertest import Again


def settle_inputs(args: argparse.Namespace) -> None:
    """``args.files`` as the command reads them, and ``args.test_id`` as envelopes carry it."""
    name: str = args.command
    files = getattr(args, "files", None)
    if isinstance(files, list) and isinstance(getattr(args, "junit", None), list):
        # ``--junit`` takes one file; the others of a glob (``--junit results-*.xml``) follow it.
        args.junit += [word for word in files if is_junit(word)]
        args.files = files = [word for word in files if not is_junit(word)]
    if name == "tail":
        if files is None and _interactive():
            raise UsageError("tail: no input: give a FILE, or pipe a server into it")
        args.files = [files or STDIN]
    elif isinstance(files, list) and not files:
        if _interactive() and os.path.isfile(getattr(args, "test_id", None) or ""):
            raise UsageError(f"{name}: {args.test_id} is a file, not a test id: give TEST_ID first")
        if _interactive():
            raise UsageError(f"{name}: no input: give FILE arguments, or '-' for stdin")
        args.files = [STDIN]
    if name in ("replay", "classify"):
        _settle_test_id(name, args)
    if len(getattr(args, "files", None) or ()) > 1:
        args.files = _distinct(name, args.files)


def is_junit(word: str) -> bool:
    """Whether ``word`` names a file of XML (a JUnit file): a log's first byte is never ``<``."""
    try:
        with open(word, "rb") as source:
            head = source.read(64)
    except OSError:
        return False
    return head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"<")


def _settle_test_id(name: str, args: argparse.Namespace) -> None:
    """The TEST_ID normalised as the middleware adopts it; a log given in its place, with the
    test id among the FILEs, is taken the other way round: a file that exists is never a test
    id one means, and the word that names no file is most likely the id."""
    given: str = args.test_id
    missing = [f for f in args.files if f != STDIN and not os.path.exists(f)]
    if os.path.isfile(given) and len(missing) == 1:
        args.files = [given if f == missing[0] else f for f in args.files]
        say(
            f"warning: {name}: {given} is a file and {missing[0]} is not: read as"
            f" 'cvdiag {name} {missing[0]} {' '.join(args.files)}'"
        )
        given = missing[0]
    try:
        args.test_id = test_id(given)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{name}: argument TEST_ID: {exc}") from None


def _distinct(name: str, files: list[str]) -> list[str]:
    """Each file once, however it is named (a symbolic link, ``./app.log``): read twice, its
    envelopes would count twice and every story would hold each of them twice."""
    kept: list[str] = []
    seen: dict[tuple[int, int], str] = {}
    for file in files:
        try:
            info = os.stat(file) if file != STDIN else None
        except OSError:
            info = None  # missing or unreadable: the read says so
        key = (info.st_dev, info.st_ino) if info is not None else None
        if key is not None and key in seen:
            say(f"warning: {name}: {file} is {seen[key]} again: read once")
            continue
        if key is not None:
            seen[key] = file
        kept.append(file)
    return kept


def _interactive() -> bool:
    try:
        return sys.stdin is None or sys.stdin.isatty()
    except (ValueError, OSError):
        return True


def output_for(args: argparse.Namespace) -> Output:
    return Output(live=STDIN in args.files, color=args.color)


def opened(args: argparse.Namespace, *, numbered: bool = True) -> Inputs:
    """The inputs, with progress on stderr for a long read (when stderr is a terminal).
    ``numbered=False``: positions are byte offsets (faster), for commands that show none."""
    inputs = Inputs(args.files)
    for item in inputs.inputs:
        item.numbered = numbered
        if item.binary():  # /bin/ls, a core file: read all the same (envelopes may be there)
            say(f"warning: {args.command}: {item.name} is not a text log (binary data)")
    progress = Progress(args.command, None)
    if progress.enabled:
        inputs.watch(lambda done, total: _progress(progress, done, total))
    args.progress = progress
    return inputs


def _progress(progress: Progress, done: int, total: int | None) -> None:
    progress.total = total
    progress.update(done)


def again(args: argparse.Namespace, inputs: list[Input]) -> Again | None:
    """A second read of the inputs, for the test ids ``pertest`` folded too early: only
    envelopes of a test's story (no accounting), in the first read's order, nothing reported
    twice. None when an input cannot be read twice."""
    if not all(item.rereadable for item in inputs):
        return None
    from cvdiag.diagnosis.pertest import reread  # with ls and stats, which import it anyway

    return reread(args.files)


def names(args: argparse.Namespace) -> str:
    names = ["stdin" if name == STDIN else name for name in args.files]
    return ", ".join(names) if len(names) <= 3 else f"{', '.join(names[:3])} …"
