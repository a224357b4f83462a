"""What cvdiag reads of a request's and a response's headers and path, bounded and scrubbed.

Edge headers (the ones proxies and CDNs add, ``EDGE_HEADER_KEYS``) are cut before any work and
scrubbed before they are kept; a terminal carries the response's, with the request's where the
response has none. The demo name is the path's first segment, kept whole or replaced by its digest
placeholder, never edited.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from starlette.types import Message

from cvdiag.schema.vocabulary import DEMO_MAX, EDGE_HEADER_KEYS, EDGE_VALUE_MAX
from cvdiag.scrubbing.redact import SEAM, placeholder, scrub_head, scrub_identifier, scrub_text

EDGE: Final = {key.encode("latin-1"): key for key in EDGE_HEADER_KEYS}
#: Raw bytes of an edge header read before scrubbing; a 1 MB value costs no more than this. A
#: seam past what is kept (``SEAM``), so the scrubber sees whole any credential the cut splits.
_EDGE_RAW_MAX: Final = EDGE_VALUE_MAX + SEAM
PATH_MAX: Final = 2048
#: Demo names of recent short paths: the same few routes are requested over and over.
_DEMOS: dict[str, str] = {}
_DEMO_CACHE_SIZE: Final = 1024
_DEMO_CACHE_PATH: Final = 128
CONTENT_LENGTH: Final = b"content-length"
CONTENT_TYPE: Final = b"content-type"
CONTENT_ENCODING: Final = b"content-encoding"
#: The lengths of the response header names read: a name of any other length is passed over
#: without being lowercased (a method call, about 600 instructions compiled).
_READ_LENGTHS: Final = frozenset(map(len, (CONTENT_TYPE, CONTENT_ENCODING, CONTENT_LENGTH, *EDGE)))


def header_text(raw: bytes | str, limit: int) -> str:
    """A header value as text: latin-1 (never fails), cut to ``limit`` before any other work."""
    if isinstance(raw, str):
        return raw[:limit]
    return raw[:limit].decode("latin-1")


def edge_value(raw: bytes | str) -> str:
    # Scrubbed, then cut: read a seam past what is kept, so a credential the cut splits is seen
    # whole and dropped, never kept as a fragment no rule recognises.
    return scrub_head(header_text(raw, _EDGE_RAW_MAX), EDGE_VALUE_MAX)


def content_length(raw: bytes | str | None) -> int | None:
    if raw is None:
        return None
    text = header_text(raw, 32).strip()
    return int(text) if text.isdigit() and text.isascii() and len(text) <= 19 else None


def demo_name(path: str) -> str:
    """The first path segment ("default" for "/"), scrubbed and bounded like any field."""
    demo = _DEMOS.get(path)
    if demo is None:
        # An identifier: kept whole or replaced by its digest placeholder, never edited. A
        # credential holding "/" spans segments, so the whole path is scrubbed too: a first
        # segment the scrubber touched there is a fragment of one.
        segment = path.lstrip("/").partition("/")[0][: DEMO_MAX * 2]
        if not segment:
            demo = "default"
        elif scrub_text(path, PATH_MAX).lstrip("/").partition("/")[0] != segment:
            demo = placeholder(segment)
        else:
            demo = scrub_identifier(segment)[:DEMO_MAX]
        if len(path) <= _DEMO_CACHE_PATH:
            if len(_DEMOS) >= _DEMO_CACHE_SIZE:
                _DEMOS.clear()
            _DEMOS[path] = demo
    return demo


def response_facts(
    headers: Iterable[Any],
) -> tuple[Any, Any, Any, dict[str, str | None] | None]:
    """A response's content type, content coding, declared length and edge headers (None when
    it has none), in one pass over its headers. Typed ``Any`` as the app hands them: compiled
    (docs/production.md), a declared ``bytes`` would refuse what pure Python reads."""
    content_type: Any = None
    encoding: Any = None
    length: Any = None
    edge: dict[str, str | None] | None = None
    for name, value in headers:
        if len(name) not in _READ_LENGTHS:
            continue
        lower = name.lower()
        if lower == CONTENT_TYPE:
            content_type = value
        elif lower == CONTENT_ENCODING:
            encoding = value
        elif lower == CONTENT_LENGTH:
            length = value
        else:
            key = EDGE.get(lower)
            if key is not None and (edge is None or edge[key] is None):
                if edge is None:
                    edge = dict.fromkeys(EDGE_HEADER_KEYS)
                edge[key] = edge_value(value)
    return content_type, encoding, length, edge


def merged_edge(
    request: dict[str, str | None] | None, response: dict[str, str | None] | None
) -> dict[str, str | None] | None:
    """The edge headers a terminal carries: the response's, and the request's where the response
    has none (a proxy's request ``via``, Cloudflare's ``cf-ray``), so that the edge shows at the
    default tier, where no ingress is written. Once per request, at the response's start."""
    if request is None:
        return response
    if response is None:
        return request
    return {key: request[key] if value is None else value for key, value in response.items()}


def with_header(message: Message, name: bytes, value: bytes) -> Message:
    """A copy of the response start (or handshake) ``message`` with ``name: value`` added; the
    message itself when the app set that header already (its own value wins)."""
    headers = list(message.get("headers") or ())
    size = len(name)
    for key, _ in headers:  # a plain loop: any() over a generator costs twice this
        if len(key) == size and key.lower() == name:  # lowercased only when it could match
            return message
    headers.append((name, value))
    return {**message, "headers": headers}  # the app's own message stays unchanged
