"""Human output made safe and, on a terminal, coloured; progress for long reads.

A log is untrusted input: a slug holding ``\\x1b[31m`` must not turn a header red, an OSC
sequence must not retitle the terminal, a bidi override must not reorder what a reader sees.
Every human line is escaped first (``safe``); colour is added afterwards, around whole lines or
their known prefixes, so no control character in the output comes from a log.

Colour follows the usual conventions: ``--color=always|never`` wins; otherwise ``NO_COLOR``
(set and not empty) turns it off, ``FORCE_COLOR`` (set and not empty) on, and else colour is
used when the stream is a terminal whose ``TERM`` is not ``dumb``.
"""

from __future__ import annotations

import os
import re
import sys
import time

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import IO, Final

#: C0 and C1 controls, DEL, and the Unicode format characters that reorder or hide text.
_UNSAFE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]"
)
_NAMED: Final = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\x1b": "\\x1b"}

COLORS: Final = ("auto", "always", "never")
_SGR: Final = {
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
    "bold": "1",
    "dim": "2",
}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe(text: str) -> str:
    """``text`` with every control or reordering character shown escaped (``\\x1b``)."""
    return _UNSAFE.sub(_escape, text)


def use_color(choice: str, stream: IO[str] | None) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


def is_terminal(stream: IO[str] | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):
        return False


class Style:
    """Colour codes, or nothing, around text that is already safe."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *names: str) -> str:
        if not self.enabled or not names or not text:
            return text
        codes = ";".join(_SGR[name] for name in names)
        return f"\x1b[{codes}m{text}\x1b[0m"


#: The colour of each class in ``classify``, ``ls`` and ``stats``.
CLASS_COLORS: Final = {
    "healthy": ("green",),
    "client-abort": ("yellow",),
    "incomplete": ("magenta",),
    "cut-by-writer": ("magenta",),
    "unclassified": ("magenta",),
}


def class_color(name: str) -> tuple[str, ...]:
    return CLASS_COLORS.get(name, ("red", "bold"))


class Progress:
    """``cvdiag CMD: 1.2 of 3.4 GB (35%)`` on stderr, rewritten in place, for reads longer than
    ``after`` seconds, and only when stderr is a terminal (never in a CI log or a pipe)."""

    def __init__(self, command: str, total: int | None, *, after: float = 2.0) -> None:
        self.command = command
        self.total = total
        self.start = time.monotonic()
        self.after = after
        self.enabled = is_terminal(sys.stderr)
        self.shown = False
        self._next = self.start + after

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 0.25
        figure = _size(done)
        if self.total:
            figure += f" of {_size(self.total)} ({min(100, done * 100 // self.total)}%)"
        rate = done / max(now - self.start, 1e-9)
        self._write(f"\rcvdiag {self.command}: {figure}, {_size(int(rate))}/s ")
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self._write("\r\x1b[K")
            self.shown = False

    @staticmethod
    def _write(text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _size(count: int) -> str:
    if count >= 1 << 30:
        return f"{count / (1 << 30):.1f} GB"
    return f"{count / (1 << 20):.0f} MB"
