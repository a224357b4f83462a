"""Numbers for percentiles in bounded memory: all of them up to a limit, a uniform sample beyond.

``stats`` keeps one ``Sample`` per figure (first byte, LLM latency, total duration) for the
whole log and for each slug. A parallel read builds one per range; ``merge`` joins them as one
sequential read would have, exactly while the numbers fit, else by drawing from both in
proportion (reservoir sampling, seeded, so a run is reproducible).
"""

from __future__ import annotations

import random
from array import array
from typing import Any

from cvdiag.stats.text import PERCENTILES

__all__ = ["Sample"]


class Sample:
    """Numbers for percentiles: all of them up to ``limit``, a uniform sample beyond."""

    __slots__ = ("count", "limit", "rng", "values")

    def __init__(self, limit: int, rng: random.Random) -> None:
        self.values = array("d")
        self.count = 0
        self.limit = limit
        self.rng = rng

    def add(self, value: float) -> None:
        self.count += 1
        if len(self.values) < self.limit:
            self.values.append(value)
            return
        slot = self.rng.randrange(self.count)
        if slot < self.limit:
            self.values[slot] = value

    def merge(self, other: Sample) -> None:
        """Add the numbers of ``other`` (later numbers): all of them while they fit, else a
        uniform sample of both. A part that holds all its numbers is fed to the other's
        reservoir as one read would have fed them (the cost is its own size, not the
        reservoir's); only two samples that both overflowed are drawn from in proportion."""
        if len(other.values) == other.count:
            self._feed(other.values)
        elif len(self.values) == self.count and len(other.values) <= self.limit:
            mine = self.values
            self.values, self.count = array("d", other.values), other.count
            self._feed(mine)
        else:
            self._mix(other)

    def _feed(self, values: array[float]) -> None:
        room = max(0, self.limit - len(self.values))
        self.values.extend(values[:room])  # what ``add`` does below the limit, in one call
        self.count += min(room, len(values))
        for value in values[room:]:
            self.add(value)

    def _mix(self, other: Sample) -> None:
        mine, theirs, take = self.count, other.count, 0
        for _ in range(self.limit):  # how many of ``limit`` draws fall on this sample
            if self.rng.randrange(mine + theirs) < mine:
                take, mine = take + 1, mine - 1
            else:
                theirs -= 1
        kept = self.rng.sample(list(self.values), take)
        kept += self.rng.sample(list(other.values), self.limit - take)
        self.values = array("d", kept)
        self.count += other.count

    def percentiles(self) -> dict[str, Any]:
        ordered = sorted(self.values)
        out: dict[str, Any] = {"count": self.count, "exact": self.count <= self.limit}
        for p in PERCENTILES:
            out[f"p{p}"] = _nearest_rank(ordered, p) if ordered else None
        return out


def _nearest_rank(ordered: list[float], p: int) -> float:
    rank = max(1, -(-p * len(ordered) // 100))  # ceil(p/100 · n), the nearest-rank method
    return ordered[rank - 1]
