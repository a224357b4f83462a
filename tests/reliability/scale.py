"""How big a run is: ``CVDIAG_RELIABILITY_SCALE=fast`` (default) or ``full`` (the issue's)."""

from __future__ import annotations

import os
from typing import NamedTuple


class Scale(NamedTuple):
    name: str
    load_requests: int  # concurrent SSE requests through one uvicorn server
    fault_requests: int  # requests per fault
    memory_requests: int  # in-process requests of the memory run
    hypothesis_examples: int  # examples per property test
    lifecycle_envelopes: int  # envelopes a subprocess emits before it is ended


FAST = Scale("fast", 200, 50, 5_000, 40, 2_000)
FULL = Scale("full", 2_000, 1_000, 100_000, 500, 20_000)


def current() -> Scale:
    name = os.environ.get("CVDIAG_RELIABILITY_SCALE", "fast").strip().lower()
    return FULL if name == "full" else FAST


SCALE = current()
#: The share of load clients that disconnect at a random point of their stream.
DISCONNECT_SHARE = 0.3
