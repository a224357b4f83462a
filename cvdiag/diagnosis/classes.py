"""The flap classes, in the order their rules are checked (see ``classify``).

A module of its own so that the command line can offer them without importing the classifier.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Final

CLASSES: Final = (
    "mock-fixture-mismatch",
    "provider-rate-limited",
    "provider-error",
    "edge-interference",
    "backend-error",
    "stalled-backend",
    "slow-first-token",
    "provider-empty",
    "probe-runner-crash",
    "client-abort",
    "incomplete",
    "protocol-incomplete",
    "frontend-hydration",
    "strict-harness",
    "healthy",
    "unclassified",
)
DEFAULT_FIRST_TOKEN_TIMEOUT: Final = 60.0
