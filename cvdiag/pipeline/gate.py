"""The gate: the tier in force, whether an envelope of a tier is written now, and DEBUG's bounds.

``Emitter`` is a ``TierGate``; the gate is a base class rather than an object the emitter holds so
that ``admits``, on the path of every envelope (once per SSE event at the debug tier), stays one
method call on the emitter with no attribute hop. Apart from ``emitter.py`` because the bound is
its own small state machine: DEBUG, when the environment allows it at all, spends an envelope and
a time budget, and past either falls back to a lower tier for good, once, and says so in a
``cvdiag.purge_audit`` envelope.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cvdiag.core.guard import say
from cvdiag.core.settings import DEBUG_ENVIRONMENTS, ENVIRONMENT_LABEL_VARS, Settings
from cvdiag.pipeline.budget import DebugBudget
from cvdiag.schema.vocabulary import BOUNDARY_TIER, BYTE_CAPS, Tier


class TierGate:
    """The tier and byte cap in force under ``settings``, and the debug tier's budget."""

    settings: Settings
    enabled: bool

    if TYPE_CHECKING:

        def emit(
            self,
            boundary: str,
            *,
            metadata: Mapping[str, Any] | None = None,
            parent_span_id: str | None = None,
        ) -> None: ...

    def __init__(self, settings: Settings, *, line_limit: int | None = None) -> None:
        #: The longest line the sinks write whole beside other processes (a pipe's PIPE_BUF):
        #: no tier's cap goes past it (cvdiag/sinks/descriptor.py says why).
        self._line_limit = line_limit
        #: Envelopes emitted at the debug tier against its bounds, and the tier and cap as the
        #: templates read them (compiled: pipeline/budget.py).
        self._budget = DebugBudget(settings.debug_max_envelopes, settings.debug_max_seconds)
        self._set_tier(settings.tier)
        self._lock = threading.Lock()

    @property
    def tier(self) -> Tier:
        return self._tier

    def _set_tier(self, tier: Tier) -> None:
        self._tier = tier
        #: Kept as a flag: ``admits`` asks for every line, and ``Tier.DEBUG`` is a lookup on
        #: the enum class that costs more than the rest of the gate.
        self._debug = tier is Tier.DEBUG
        cap = BYTE_CAPS[tier]
        #: The envelope byte cap of the tier in force. An attribute, not a property: the
        #: templates read it for every line, and a property is a Python call each time.
        self.byte_cap = cap if self._line_limit is None else min(cap, self._line_limit)
        # Mirrored for the templates, which read these for every line (pipeline/budget.py).
        budget = self._budget
        budget.level, budget.debug, budget.byte_cap = int(tier), self._debug, self.byte_cap

    def admits(self, tier: Tier) -> bool:
        """The gate: whether an envelope of ``tier`` is written now. At the debug tier every
        envelope spends the budget, and the one that exhausts it is gated again."""
        if tier > self._tier:
            return False
        if self._debug:  # the templates ask the same inline (cvdiag/pipeline/template.py)
            over = self._budget.spend()
            if over is not None and self._fall_back(*over):
                return tier <= self._tier
        return True

    def allows(self, boundary: str) -> bool:
        """Whether ``boundary`` would be emitted now: lets producers skip building metadata."""
        if not self.enabled:
            return False
        tier = BOUNDARY_TIER.get(boundary)
        return tier is not None and tier <= self._tier

    def _say_debug_refused(self) -> None:
        """Why the tier in force is not the DEBUG that ``CVDIAG_DEBUG`` asked for."""
        allowed = ", ".join(sorted(DEBUG_ENVIRONMENTS))
        names = ", ".join(ENVIRONMENT_LABEL_VARS)
        label = self.settings.environment
        found = f"is {label!r}" if label is not None else "is unset"
        say(
            f"CVDIAG_DEBUG refused: the environment label ({names}, the first one set)"
            f" {found}, not one of {allowed}; running at tier {self.tier.label}"
        )

    def _fall_back(self, count: int, elapsed: float) -> bool:
        """DEBUG is bounded: past its time or envelope budget (``count`` envelopes, ``elapsed``
        seconds since the first), fall back for good, once. Returns whether the tier changed,
        so the envelope at hand is gated again; the lock is taken only to fall back."""
        with self._lock:
            if self._tier is not Tier.DEBUG:
                return True  # another thread fell back first
            reason = (
                "debug_time_bound"
                if elapsed > self.settings.debug_max_seconds
                else "debug_envelope_bound"
            )
            self._set_tier(self.settings.debug_fallback_tier)
        self.emit(
            "cvdiag.purge_audit",
            metadata={
                "reason": reason,
                "from_tier": Tier.DEBUG.label,
                "to_tier": self._tier.label,
                "envelope_count": count - 1,
                "elapsed_ms": round(elapsed * 1000),
            },
            parent_span_id=None,
        )
        return True
