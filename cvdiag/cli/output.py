"""What every command shares: exit codes, the one-line error, warnings, and stdout as bytes."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from cvdiag.cli.style import Style, safe, use_color

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import IO, Final

    from _typeshed import SupportsWrite

    from cvdiag.logs.reading import Malformed

#: The documented exit codes (docs/cli.md).
OK: Final = 0
NOTHING: Final = 1  # no match, no envelope for the test id, invalid envelopes (validate)
USAGE: Final = 2  # bad arguments or unreadable input
INTERNAL: Final = 3  # a bug in cvdiag: reported in one line, never as a traceback
INTERRUPTED: Final = 130

#: Malformed lines reported one by one; past this they are only counted.
MALFORMED_SHOWN: Final = 20


class UsageError(Exception):
    """Bad arguments: reported as one line, exit 2."""


class Failure(Exception):
    """A command's documented failure: one line on stderr, with its exit code."""

    def __init__(self, message: str, code: int = NOTHING) -> None:
        super().__init__(message)
        self.code = code


class OutputError(Failure):
    """stdout refuses what is written (a full disk, ``> /dev/full``): the output's failure, not
    cvdiag's, like an unreadable input (exit 2). A closed pipe is not one: it stays a
    ``BrokenPipeError``, which ends the command quietly."""

    def __init__(self, exc: OSError, command: str = "") -> None:
        reason = exc.strerror or type(exc).__name__
        where = f"{command}: " if command else ""
        super().__init__(f"{where}cannot write output: {reason[:1].lower()}{reason[1:]}", USAGE)


def printed(text: str, file: SupportsWrite[str] | None = None, command: str = "") -> None:
    """``text`` on ``file`` (stdout), flushed: a write that fails is the output's
    ``OutputError``, which names ``command`` (a help is printed before the command runs)."""
    stream = file if file is not None else sys.stdout
    try:
        stream.write(text)
        flush = getattr(stream, "flush", None)
        if flush is not None:
            flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc, command) from None


def flush_stdout() -> None:
    """Flush ``sys.stdout`` now, so that a failure to write is reported by ``main`` rather than
    by the interpreter at exit (a traceback-like "Exception ignored" line, and exit 0)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc) from None
    except (ValueError, AttributeError):
        pass  # stdout closed or gone: nothing is left to flush


def error(message: str) -> None:
    say(f"error: {message}")


def say(message: str) -> None:
    """One line on stderr, prefixed ``cvdiag: ``; a closed stderr is ignored. The message may
    quote a log (a file name, a value): it is escaped like every human line."""
    text = safe(" ".join(message.split()))
    try:
        sys.stderr.write(f"cvdiag: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class Malformations:
    """Receives malformed lines and lines set aside: the first few malformed lines are reported
    on stderr, all are counted, and ``finish`` says how many lines were set aside."""

    def __init__(self, command: str = "", shown: int = MALFORMED_SHOWN) -> None:
        self.count = 0
        self.set_aside = 0
        self.shown = shown
        self.command = command

    def __call__(self, problem: Malformed) -> None:
        if problem.set_aside:
            self.set_aside += 1
            return
        self.count += 1
        if self.count <= self.shown:
            say(f"warning: {problem}; skipped")

    def finish(self) -> None:
        if self.count > self.shown:
            say(f"warning: {self.count - self.shown} more malformed lines skipped (not shown)")
        if self.set_aside:
            where = f"{self.command}: " if self.command else ""
            say(
                f"warning: {where}{self.set_aside} line(s) hold CVDIAG {{ after other text, not"
                " after a recognised log-collector prefix: set aside, not read"
                " ('cvdiag validate' lists them)"
            )


class Output:
    """stdout as bytes: envelope lines are written as read, without decoding them.

    ``live`` flushes after every write, for a reader following a pipe (``tail -f | cvdiag``).
    Human lines go through ``human``: escaped, then coloured when ``color`` allows it.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, live: bool = False, color: str = "never"
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.binary: IO[bytes] | None = getattr(self.stream, "buffer", None)
        self.live = live
        self.style = Style(use_color(color, self.stream))

    def write(self, data: bytes) -> None:
        try:
            if self.binary is not None:
                self.binary.write(data)
            else:
                self.stream.write(data.decode("utf-8", "replace"))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc) from None
        if self.live:
            self.flush()

    def line(self, text: str = "") -> None:
        self.write(text.encode("utf-8", "replace") + b"\n")

    def lines(self, texts: list[str]) -> None:
        self.write("".join(f"{t}\n" for t in texts).encode("utf-8", "replace"))

    def human(self, texts: Sequence[str], styles: Sequence[Sequence[str]] = ()) -> None:
        """Lines that may quote a log: escaped, then each coloured with its style (if any)."""
        out = []
        for i, text in enumerate(texts):
            line = safe(text)
            out.append(self.style(line, *styles[i]) if i < len(styles) else line)
        self.lines(out)

    def flush(self) -> None:
        try:
            if self.binary is not None:
                self.binary.flush()
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc) from None


def silence_stdout() -> None:
    """After a broken pipe or a failed write: point stdout at /dev/null so the exit-time flush
    cannot fail (and report it a second time)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
