"""The values a template line takes (cvdiag/pipeline/template.py), as JSON the way the one
serialize path writes them: strings line-safe, edge headers, event types as identifiers, the
aborted envelope's words. What repeats (slugs, demo names, words, protocols' event types) is
encoded once, in bounded memory.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Final

import orjson

from cvdiag.pipeline import envelope as _envelope
from cvdiag.pipeline import metadata as _metadata
from cvdiag.scrubbing.redact import scrub_identifier

NULL_EDGE: Final = orjson.dumps(_envelope.NULL_EDGE_HEADERS)
#: Slugs, demo names and the aborted envelope's words as JSON, the first ``_KNOWN_HELD`` seen.
_KNOWN: dict[str, bytes] = {}
_KNOWN_HELD: Final = 256
#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round).
_dumps: Final = orjson.dumps


def edge_json(edge: Mapping[str, str | None] | None) -> bytes | None:
    """The response's edge headers as JSON for a terminal line (all null without a response);
    None when they cannot be written as is (a lone surrogate: emit escapes the envelope)."""
    if edge is None:
        return NULL_EDGE
    try:
        return _envelope.line_safe(_dumps(edge))
    except orjson.JSONEncodeError:
        return None


def text_json(value: str) -> bytes:
    """A string as ``envelope.serialize`` writes it: JSON, line-safe, a lone surrogate (which
    orjson refuses) as its ``\\udXXX`` text."""
    try:
        encoded = _dumps(value)
    except orjson.JSONEncodeError:
        encoded = orjson.dumps(value.encode("utf-8", "backslashreplace").decode("utf-8"))
    return encoded if encoded.isascii() else _envelope.line_safe(encoded)


def known_json(value: str) -> bytes:
    """``text_json`` of a value a process sees a few of (a slug, a demo name, a v1 kind or a
    cause): the first 256 are kept (ever-new ones are encoded each time, in bounded memory)."""
    encoded = _KNOWN.get(value)
    if encoded is None:
        encoded = text_json(value)
        if len(_KNOWN) < _KNOWN_HELD:
            _KNOWN[value] = encoded
    return encoded


@functools.lru_cache(maxsize=256)  # a few protocols' types, repeated by every stream
def event_name(value: str | None) -> bytes:
    """An event type as closed metadata writes it (an identifier, scrubbed, then cut): each
    event's at the debug tier, a stream's first and last on its terminal."""
    return b"null" if value is None else text_json(scrub_identifier(value)[: _metadata.NAME_MAX])
