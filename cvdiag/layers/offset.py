"""The clock offset between a probe and its backend, bounded from pairs of envelopes.

θ is the backend's clock minus the probe's. A request reaches the backend after the client sent
it, so each send and its ingress give an upper bound (θ ≤ ingress − send); whatever the client
receives comes after the backend sent it, so each response head after its ingress, and each
first event after the backend's first byte, gives a lower bound (θ ≥ sent − received). θ is
taken as the middle of the tightest interval, give or take half its width. Each stamp is a wall
clock read to the millisecond (``RESOLUTION_MS``), so every bound is loosened by that much: the
true offset always lies inside (tests/layers/test_offset.py holds it to random clocks and
latencies).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Final

#: How far a wall-clock stamp may be from the moment it stands for: writers stamp to the
#: millisecond, truncated or rounded.
RESOLUTION_MS: Final = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Offset:
    """What the pairs say about θ (backend − probe, ms)."""

    lower: float | None = None
    upper: float | None = None
    #: Pairs the bounds come from.
    pairs: int = 0
    #: The bounds disagreed (a stamp taken after its send): the interval was widened to the
    #: smallest that holds them all, by this many ms in all.
    widened_ms: float = 0.0

    @property
    def known(self) -> bool:
        return self.lower is not None or self.upper is not None

    @property
    def theta_ms(self) -> float:
        """The offset to add to a probe's time to read it on the backend's clock: the middle of
        the interval, its one bound when only one side is known (requests and answers taken to
        cost nothing on the way), 0 with no pair (the wall clocks as they are)."""
        if self.lower is not None and self.upper is not None:
            return (self.lower + self.upper) / 2
        # One side: the pairs' own difference, the stamps' resolution taken back off.
        if self.upper is not None:
            return self.upper - 2 * RESOLUTION_MS
        return self.lower + 2 * RESOLUTION_MS if self.lower is not None else 0.0

    @property
    def half_width_ms(self) -> float | None:
        """How far θ may be from ``theta_ms``; None when a side is unbounded."""
        if self.lower is None or self.upper is None:
            return None
        return (self.upper - self.lower) / 2

    def said(self) -> str:
        """The alignment in words, as verdicts and the report give it."""
        if not self.known:
            return "layers joined on the wall clock alone (no send/ingress or answer pair)"
        many = f"{self.pairs} pair{'s' if self.pairs != 1 else ''}"
        half = self.half_width_ms
        if half is None:
            side = "sends" if self.upper is not None else "answers"
            return f"aligned from {many}, bounded on one side only ({side}, taken as instant)"
        widened = (
            f"; the pairs disagreed by {self.widened_ms:.0f} ms (a stamp taken after its send),"
            " widened to hold them"
            if self.widened_ms
            else ""
        )
        return f"aligned to ±{half:.0f} ms from {many}{widened}"

    def to_json(self) -> dict[str, Any]:
        half = self.half_width_ms
        return {
            "theta_ms": round(self.theta_ms, 3),
            "half_width_ms": None if half is None else round(half, 3),
            "pairs": self.pairs,
            "widened_ms": round(self.widened_ms, 3),
        }


def bound(uppers: Iterable[float], lowers: Iterable[float]) -> Offset:
    """The interval θ lies in, from raw bounds (``ingress − send`` and ``sent − received``,
    ms), each loosened by the stamps' resolution on both of its ends."""
    ups = [u + 2 * RESOLUTION_MS for u in uppers]
    lows = [low - 2 * RESOLUTION_MS for low in lowers]
    upper = min(ups) if ups else None
    lower = max(lows) if lows else None
    widened = 0.0
    if upper is not None and lower is not None and lower > upper:
        # No θ satisfies every pair: a stamp was taken after its event. The smallest interval
        # that holds every pair's bound is between the two that disagree.
        widened = lower - upper
        lower, upper = upper, lower
    return Offset(lower, upper, len(ups) + len(lows), widened)
