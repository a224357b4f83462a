"""Escaping for the report: a log is untrusted input.

Values from a log reach the page in exactly two contexts, text and double-quoted attributes,
and always through ``text`` or ``attr``. None reaches a script, a style, a URL or an element or
attribute name: links point at the page's own ``#t<n>`` anchors, numbers drawn from the log are
formatted as numbers (``num``), and the script reads the page's own markup. What could still
deceive a reader is made visible instead: control characters and the bidirectional overrides
(which can make text read in another order) are shown as ``\\u`` escapes.

A log's values are as long as its lines (a reader takes lines up to 1 MiB), so every value is
shown cut to a ``limit`` of characters where the page needs a bound: an escaped character is at
most ``WIDEST`` characters of the page (and as many UTF-8 bytes), so a value shown with a limit
of ``n`` costs at most ``WIDEST * n``.
"""

from __future__ import annotations

import math
import re
from typing import Final

#: C0 and C1 controls (not tab or newline), DEL, the bidi embeddings, overrides and isolates,
#: the line and paragraph separators, the BOM, and lone surrogates (a file name's undecodable
#: bytes, which UTF-8 cannot write).
_HIDDEN: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
_ESCAPES: Final = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;", "`": "&#x60;"}
)
#: The most characters (and UTF-8 bytes) one character of a value becomes: ``&quot;``,
#: ``\\u202e``; a character left as it is takes at most 4 bytes.
WIDEST: Final = 6
#: What stands for the middle of a value cut to its limit.
CUT: Final = "…"


def _visible(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def cut(value: object, limit: int) -> str:
    """``value`` as at most ``limit`` characters: its head and its tail, the middle elided (two
    long test ids that differ only at their end still read apart)."""
    out = value if isinstance(value, str) else str(value)
    if len(out) <= limit:
        return out
    tail = limit // 4
    return out[: max(limit - 1 - tail, 0)] + CUT + (out[-tail:] if tail else "")


def text(value: object, limit: int | None = None) -> str:
    """Any value as HTML text (or a double-quoted attribute's value): markup shown, not run;
    cut to ``limit`` characters first when given."""
    out = value if isinstance(value, str) else str(value)
    if limit is not None:
        out = cut(out, limit)
    return _HIDDEN.sub(_visible, out).translate(_ESCAPES)


def attr(name: str, value: object, limit: int | None = None) -> str:
    """`` name="value"``: ``name`` is the page's own, ``value`` escaped (and cut to ``limit``)."""
    return f' {name}="{text(value, limit)}"'


def num(value: float) -> str:
    """A coordinate or figure for the page's own markup: always a plain finite number, and
    short (a log's durations reach 1.7e308: not 309 digits)."""
    if not math.isfinite(value):
        return "0"
    if abs(value) >= 1e9:
        return f"{value:.9g}"
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"
