"""How classes and figures look on the page: never by colour alone. Each class has a shape
beside its name, each bar's outcome is written beside it, and each mark has a line style of its
own as well as a colour."""

from __future__ import annotations

import math
from typing import Final

from cvdiag.report.markup import text

#: A shape for each class, shown beside its name (the CSS gives it a colour too).
BADGES: Final = {
    "mock-fixture-mismatch": "⊘",
    "provider-rate-limited": "▲",
    "provider-error": "■",
    "edge-interference": "◆",
    "backend-error": "✕",
    "stalled-backend": "‖",
    "slow-first-token": "◔",
    "provider-empty": "○",
    "client-abort": "↩",
    "cut-by-writer": "✂",
    "incomplete": "◌",
    "protocol-incomplete": "◐",
    "healthy": "✓",
    "unclassified": "?",
}


def badge(name: str) -> str:
    shape = BADGES.get(name, "?")
    css = name if name in BADGES else "unclassified"
    return f'<span class="badge c-{css}"><i aria-hidden="true">{shape}</i> {text(name)}</span>'


def duration(value: float | None) -> str:
    """A duration without false precision: ``34 ms``, ``1.52 s``, ``61.2 s``."""
    if value is None or not math.isfinite(value):
        return "–"
    if abs(value) >= 1e9:  # a log's figure past ten days (up to 1.7e308): not 300 digits
        return f"{value / 1000:.3g} s"
    if abs(value) < 1000:
        return f"{value:.0f} ms" if abs(value) >= 10 else f"{value:.1f} ms"
    if abs(value) < 10_000:
        return f"{value / 1000:.2f} s"
    return f"{value / 1000:.1f} s"
