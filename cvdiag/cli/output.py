"""What every command shares: exit codes, the one-line error, warnings, and stdout as bytes."""

from __future__ import annotations

import os
import sys
from typing import IO, Final

from cvdiag.analysis.reading import Malformed

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


def error(message: str) -> None:
    say(f"error: {message}")


def say(message: str) -> None:
    """One line on stderr, prefixed ``cvdiag: ``; a closed stderr is ignored."""
    text = " ".join(message.split())
    try:
        sys.stderr.write(f"cvdiag: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class Malformations:
    """Receives malformed lines: the first few are reported on stderr, all are counted."""

    def __init__(self, shown: int = MALFORMED_SHOWN) -> None:
        self.count = 0
        self.shown = shown

    def __call__(self, problem: Malformed) -> None:
        self.count += 1
        if self.count <= self.shown:
            say(f"warning: {problem}; skipped")

    def finish(self) -> None:
        if self.count > self.shown:
            say(f"warning: {self.count - self.shown} more malformed lines skipped (not shown)")


class Output:
    """stdout as bytes: envelope lines are written as read, without decoding them.

    ``live`` flushes after every write, for a reader following a pipe (``tail -f | cvdiag``).
    """

    def __init__(self, stream: IO[str] | None = None, *, live: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.binary: IO[bytes] | None = getattr(self.stream, "buffer", None)
        self.live = live

    def write(self, data: bytes) -> None:
        if self.binary is not None:
            self.binary.write(data)
        else:
            self.stream.write(data.decode("utf-8", "replace"))
        if self.live:
            self.flush()

    def line(self, text: str = "") -> None:
        self.write(text.encode("utf-8", "replace") + b"\n")

    def lines(self, texts: list[str]) -> None:
        self.write("".join(f"{t}\n" for t in texts).encode("utf-8", "replace"))

    def flush(self) -> None:
        if self.binary is not None:
            self.binary.flush()
        self.stream.flush()


def silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the exit-time flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
