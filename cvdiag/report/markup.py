"""Escaping for the report: a log is untrusted input.

Values from a log reach the page in exactly two contexts, text and double-quoted attributes,
and always through ``text`` or ``attr``. None reaches a script, a style, a URL or an element or
attribute name: links point at the page's own ``#t<n>`` anchors, numbers drawn from the log are
formatted as numbers (``num``), and the script reads the page's own markup. What could still
deceive a reader is made visible instead: control characters and the bidirectional overrides
(which can make text read in another order) are shown as ``\\u`` escapes.
"""

from __future__ import annotations

import math
import re
from typing import Final

#: C0 and C1 controls (not tab or newline), DEL, the bidi embeddings, overrides and isolates,
#: the line and paragraph separators, and the BOM.
_HIDDEN: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]"
)
_ESCAPES: Final = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;", "`": "&#x60;"}
)


def _visible(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def text(value: object) -> str:
    """Any value as HTML text (or a double-quoted attribute's value): markup shown, not run."""
    out = value if isinstance(value, str) else str(value)
    return _HIDDEN.sub(_visible, out).translate(_ESCAPES)


def attr(name: str, value: object) -> str:
    """`` name="value"``: ``name`` is the page's own, ``value`` escaped."""
    return f' {name}="{text(value)}"'


def num(value: float) -> str:
    """A coordinate or figure for the page's own markup: always a plain finite number."""
    if not math.isfinite(value):
        return "0"
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"
