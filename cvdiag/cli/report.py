"""``cvdiag report``: the log as one self-contained HTML page (``cvdiag.report``)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator

from cvdiag.cli.opening import names
from cvdiag.cli.output import OK, USAGE, Failure, Malformations, OutputError, say
from cvdiag.cli.style import Progress
from cvdiag.layers.runner import words_of
from cvdiag.logs.reading import STDIN, Inputs
from cvdiag.report import Report, gather, write
from cvdiag.report.comparison import attach
from cvdiag.runs import Case, JUnitError, drawn_ids, headline, labels, read_junit


def report(args: argparse.Namespace) -> int:
    malformed = Malformations("report")
    progress = Progress("report", None)

    def watch(inputs: Inputs) -> None:
        if progress.enabled:
            inputs.watch(lambda done, total: _progress(progress, done, total))

    cases, unread = _junit(args.junit)
    with _rereadable(args.files) as files:
        found = gather(
            files,
            every=args.all,
            only=frozenset(args.test_ids) if args.test_ids else None,
            first_token_timeout=args.first_token_timeout,
            max_details=args.max_drawn,
            on_malformed=malformed,
            warn=lambda message: say(f"warning: report: {message}"),
            watch=watch,
            draw=drawn_ids(cases),
            words=words_of(
                (a.test_ids, a.outcome, a.failure) for case in cases for a in case.attempts
            ),
        )
        # A drawn failure with a passing attempt of its test is compared with it (``diff``).
        attach(found, files, cases, first_token_timeout=args.first_token_timeout)
    progress.done()
    malformed.finish()
    if not found.test_ids:
        raise Failure(f"no CVDIAG envelope in {names(args)}")
    found.sources = [("stdin" if name == STDIN else name) for name in args.files]
    found.sources += args.junit
    found.cases = cases
    found.labels.update(labels(cases))
    if args.output == "-":
        _write_stdout(found)
        return USAGE if unread else OK
    write_page(args.output, found)
    failed = found.test_ids - found.counts.get("healthy", 0)
    tests = f"tests: {headline(cases)}; " if args.junit else ""
    say(
        f"report: wrote {args.output}: {tests}{found.test_ids} test id(s), {failed} failed,"
        f" {len(found.stories)} drawn"
    )
    # A JUnit file that could not be read is said at once; the page is still written from the
    # rest, and the status says something was left out.
    return USAGE if unread else OK


def _junit(paths: list[str]) -> tuple[list[Case], int]:
    """The tests of every JUnit file that can be read, and how many could not (each one an
    error line naming it)."""
    cases: list[Case] = []
    unread = 0
    for path in paths:
        try:
            cases.extend(read_junit(path))
        except JUnitError as exc:
            say(f"error: report: {exc}")
            unread += 1
    return cases, unread


def _progress(progress: Progress, done: int, total: int | None) -> None:
    progress.total = total
    progress.update(done)


def _write_stdout(found: Report) -> None:
    """The page on stdout, in UTF-8 as its ``<meta charset>`` says whatever the locale's
    encoding; a full disk is the output's failure, not cvdiag's (a closed pipe is not one)."""
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
    try:
        write(found, out)
        out.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc) from None
    finally:
        with contextlib.suppress(OSError, ValueError):
            out.detach()


def write_page(path: str, found: Report) -> None:
    """Write next to ``path`` and move it into place: a reader never sees half a page.

    A path that is not a regular file (``/dev/stdout``, a pipe, a device) is written into, never
    replaced; a symbolic link's target is replaced, not the link."""
    try:
        mode: int | None = os.stat(path).st_mode
    except OSError:
        mode = None  # none yet (or unreachable: the temporary file says why)
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        _write_into(path, found)
        return
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    try:
        handle, temporary = tempfile.mkstemp(prefix=".cvdiag-report-", suffix=".html", dir=folder)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}", 2) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            write(found, out)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise Failure(f"cannot write {path}: {exc.strerror or exc}", 2) from None


def _write_into(path: str, found: Report) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            write(found, out)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}", 2) from None


@contextlib.contextmanager
def _rereadable(files: list[str]) -> Iterator[list[str]]:
    """The inputs, stdin copied to a temporary file first: the report reads its inputs twice."""
    if STDIN not in files:
        yield files
        return
    with tempfile.NamedTemporaryFile(prefix="cvdiag-stdin-", suffix=".log") as copy:
        shutil.copyfileobj(sys.stdin.buffer, copy, 1 << 20)
        copy.flush()
        yield [copy.name if name == STDIN else name for name in files]
