"""The gate's state as the templates read it, compiled with the request path: the tier in
force, its byte cap, and the debug tier's budget, one envelope spent per line.

At the debug tier every envelope spends the budget (``TierGate.admits``, cvdiag/pipeline/gate.py),
once per SSE event: compiled, the spend is a native call and the gate's one Python frame less per
line. The gate mirrors its tier and cap here whenever it sets them (``TierGate._set_tier``), so a
template line reads them as native fields rather than three attributes of the emitter. Past
either bound the gate falls back (``TierGate._fall_back``), which stays the gate's.
"""

from __future__ import annotations

import itertools
import time
from typing import Final

#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round).
_monotonic: Final = time.monotonic


class DebugBudget:
    """Envelopes emitted at the debug tier, and when the first was, against their bounds."""

    def __init__(self, max_envelopes: int, max_seconds: float) -> None:
        # ``next()`` on a counter is atomic: lock-free on the way through, in either build.
        self._count = itertools.count(1)
        self._started: float | None = None
        self.max_envelopes = max_envelopes
        self.max_seconds = max_seconds
        #: The gate's tier in force as a number, whether it is DEBUG, and its byte cap: set by
        #: the gate with its own (``TierGate._set_tier``), read by every template line.
        self.level = 0
        self.debug = False
        self.byte_cap = 0

    def spend(self) -> tuple[int, float] | None:
        """Spend one envelope: None while within both bounds, else the count and the seconds
        since the first (the gate falls back)."""
        count = next(self._count)
        now = _monotonic()
        started = self._started
        if started is None:
            started = self._started = now
        if count <= self.max_envelopes and now - started <= self.max_seconds:
            return None
        return count, now - started
