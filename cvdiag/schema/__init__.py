"""The CVDIAG v1 wire format: what a line may say, and the ids that join lines.

Holds the boundary names, the tier matrix and byte caps, the closed metadata keys and the
edge-header lists (``vocabulary.py``), the packaged JSON Schema (``schema.json``), and the ids
(``ids.py``: UUIDv7, span ids, test-id adoption). Every other part of cvdiag builds on it.

``cvdiag.schema.packaged_schema()`` and the vocabulary's names are re-exported here, the
documented way to reach them.

May import: cvdiag.scrubbing.
"""

from cvdiag.schema.vocabulary import (
    BOUNDARY_LAYER,
    BOUNDARY_TIER,
    BYTE_CAPS,
    DEMO_MAX,
    DENIED_HEADERS,
    EDGE_HEADER_KEYS,
    EDGE_VALUE_MAX,
    LAYER,
    METADATA_KEYS,
    OUTCOMES,
    SCHEMA_VERSION,
    Tier,
    packaged_schema,
)

__all__ = [
    "BOUNDARY_LAYER",
    "BOUNDARY_TIER",
    "BYTE_CAPS",
    "DEMO_MAX",
    "DENIED_HEADERS",
    "EDGE_HEADER_KEYS",
    "EDGE_VALUE_MAX",
    "LAYER",
    "METADATA_KEYS",
    "OUTCOMES",
    "SCHEMA_VERSION",
    "Tier",
    "packaged_schema",
]
