"""The flap classes, in the order their rules are checked (see ``classify``).

A module of its own so that the command line can offer them without importing the classifier.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Any, Final

CLASSES: Final = (
    "cut-by-writer",
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
#: The accounting boundary that says envelopes were not written.
DROPPED: Final = "cvdiag.queue_dropped"


def accounting(envelope: dict[str, Any]) -> bool:
    """An envelope of cvdiag's own accounting, under a test id of its own: every ``cvdiag.``
    boundary but the report that names a story whose terminal its writer lost (a
    ``cvdiag.queue_dropped`` with outcome ``err`` under that story's test id), which is part
    of that story."""
    boundary: str = envelope["boundary"]
    return boundary.startswith("cvdiag.") and not (
        boundary == DROPPED and envelope.get("outcome") == "err"
    )


#: Not failed, and never healthy: the log says its writer did not write the story's terminal
#: (a ``cvdiag.queue_dropped`` line under its test id, at shutdown or when the queue was full).
NOT_FAILED: Final = frozenset({"healthy", "cut-by-writer"})
