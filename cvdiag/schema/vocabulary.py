"""The rules of the wire format, in one place.

Boundary names, the tier matrix, the closed metadata keys and the edge-header lists all come
from here; the metadata keys are read from the packaged ``schema.json`` so that the schema a CI
step validates against and the keys the emitter keeps can never disagree.
"""

from __future__ import annotations

import enum
import json
from functools import cache
from importlib import resources
from typing import Any, Final

SCHEMA_VERSION: Final = 1
LAYER: Final = "backend"


class Tier(enum.IntEnum):
    """How much a process tells: each tier includes everything below it."""

    DEFAULT = 0
    VERBOSE = 1
    DEBUG = 2

    @property
    def label(self) -> str:
        return self.name.lower()


#: Serialized JSON bytes an envelope may take at each tier (the ``CVDIAG `` prefix and the
#: newline are not counted).
BYTE_CAPS: Final[dict[Tier, int]] = {Tier.DEFAULT: 2048, Tier.VERBOSE: 4096, Tier.DEBUG: 16384}

#: The lowest tier at which each boundary is emitted. Accounting boundaries (``cvdiag.*``) are
#: emitted at every tier, so they sit at DEFAULT.
BOUNDARY_TIER: Final[dict[str, Tier]] = {
    "backend.agent.enter": Tier.DEFAULT,
    "backend.agent.exit": Tier.DEFAULT,
    "backend.sse.aborted": Tier.DEFAULT,
    "backend.response.complete": Tier.DEFAULT,
    "backend.error.caught": Tier.DEFAULT,
    "backend.request.ingress": Tier.VERBOSE,
    "backend.llm.call.start": Tier.VERBOSE,
    "backend.llm.call.heartbeat": Tier.VERBOSE,
    "backend.llm.call.response": Tier.VERBOSE,
    "backend.sse.first_byte": Tier.VERBOSE,
    "backend.sse.event": Tier.DEBUG,
    # The client's view (the ``probe`` layer, written by cvdiag.probe): how a test's request
    # began and ended at every tier, what it saw between at VERBOSE. ``probe.sse.event`` is
    # VERBOSE for a response's first event; its producer writes the others only at DEBUG.
    "probe.start": Tier.DEFAULT,
    "probe.exit": Tier.DEFAULT,
    "probe.sse.aborted": Tier.DEFAULT,
    "probe.network.error": Tier.DEFAULT,
    "probe.console.error": Tier.DEFAULT,
    "probe.message.send": Tier.VERBOSE,
    "probe.network.response": Tier.VERBOSE,
    "probe.navigate.complete": Tier.VERBOSE,
    "probe.dom.container.mount": Tier.VERBOSE,
    "probe.dom.firsttoken": Tier.VERBOSE,
    "probe.dom.alternate_content": Tier.VERBOSE,
    "probe.sse.event": Tier.VERBOSE,
    "cvdiag.purge_audit": Tier.DEFAULT,
    "cvdiag.collision_detected": Tier.DEFAULT,
    "cvdiag.queue_dropped": Tier.DEFAULT,
    "cvdiag.metadata_dropped": Tier.DEFAULT,
}

#: Each boundary's ``layer``: v1 names it by the boundary's prefix (``probe.*`` is the client's
#: view); cvdiag's own accounting lines (``cvdiag.*``) are written by the backend's emitter.
BOUNDARY_LAYER: Final[dict[str, str]] = {
    name: "probe" if name.startswith("probe.") else LAYER for name in BOUNDARY_TIER
}

OUTCOMES: Final = frozenset({"ok", "err", "timeout", "info"})

#: Edge headers copied into every ingress and completion envelope (absent → null).
EDGE_HEADER_KEYS: Final = (
    "cf-ray",
    "cf-mitigated",
    "cf-cache-status",
    "x-railway-edge",
    "x-railway-request-id",
    "x-hikari-trace",
    "retry-after",
    "via",
    "server",
)

#: Client-IP and geolocation headers. They are personal data, so no code path copies them:
#: edge headers are an allow-list, and this list exists so tests can prove they never leak.
DENIED_HEADERS: Final = (
    "cf-connecting-ip",
    "cf-connecting-ipv6",
    "x-forwarded-for",
    "true-client-ip",
    "x-real-ip",
    "forwarded",
    "x-client-ip",
    "x-cluster-client-ip",
    "cf-ipcountry",
    "cf-ipcity",
    "cf-iplatitude",
    "cf-iplongitude",
)

EDGE_VALUE_MAX: Final = 256
DEMO_MAX: Final = 256


@cache
def packaged_schema() -> dict[str, Any]:
    """The JSON Schema cvdiag's envelopes follow (v1 plus documented additive extensions)."""
    text = resources.files("cvdiag.schema").joinpath("schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _metadata_keys() -> dict[str, frozenset[str]]:
    keys = packaged_schema()["$defs"]["boundary_metadata_keys"]
    return {name: frozenset(names) for name, names in keys.items() if name in BOUNDARY_TIER}


#: Closed metadata: the keys each boundary may carry; anything else is dropped.
METADATA_KEYS: Final[dict[str, frozenset[str]]] = _metadata_keys()
