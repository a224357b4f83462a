"""Secret redaction for every value an envelope carries.

The rules are data in ``rules.py`` and ``vendors.py``, compiled in ``patterns.py``; what each
match becomes is in ``matches.py``; the passes run in ``passes.py``. This module bounds them,
caches what repeats, and scrubs identifiers and values that are not strings.

Four promises shape this module:

- **Recall with precision.** Vendor prefixes match only at a token boundary, auth-scheme words
  only before a credential-shaped token, key names only directly before their separator.
- **Linear and bounded.** Only a bounded prefix of a value is scanned (the rest becomes an
  ``…[unscanned:N]`` marker, cut where no credential can be split), and every pattern, once its
  literal anchor matches, takes a bounded run of characters with nothing required after it, so a
  failed attempt never rescans the text. A prefilter (one search for every anchor) skips the
  patterns whose anchors a text does not hold.
- **Idempotent.** ``scrub(scrub(x)) == scrub(x)`` at every length.
- **Identifiers stay distinct.** ``scrub_identifier`` never edits an identifier in place: a test id,
  slug or agent name holding a secret becomes ``redacted-<digest>``, so two never collide.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Final

from cvdiag.scrubbing import matches as _matches
from cvdiag.scrubbing.matches import REDACTED
from cvdiag.scrubbing.passes import clean, redact
from cvdiag.scrubbing.patterns import SCAN_LIMIT

__all__ = [
    "IDENTIFIER_PREFIX",
    "REDACTED",
    "SCAN_LIMIT",
    "placeholder",
    "scrub",
    "scrub_identifier",
    "scrub_text",
    "use_rules",
]

_MARKER_ROOM: Final = 32  # "…[unscanned:N]" fits in this, so a scrubbed string is never re-cut
_MARKER: Final = re.compile(r"…\[unscanned:[0-9]{1,15}\]\Z")
#: A cut looks this far back for whitespace, where no token (so no credential) can be split.
_CUT_LOOKBACK: Final = 512
_CACHEABLE: Final = 64  # short strings (event types, names) repeat; their result is memoized
IDENTIFIER_PREFIX: Final = "redacted-"
_IDENTIFIER: Final = re.compile(r"redacted-[0-9a-f]{16}")


def use_rules(
    *, patterns: Iterable[str] = (), keys: Iterable[str] = (), allow: Iterable[str] = ()
) -> None:
    """Install the user's rules process-wide: extra token patterns, extra secret key names, and
    exact values never to redact. Raises ``re.error`` for a pattern that does not compile."""
    if _matches.install(patterns=patterns, keys=keys, allow=allow):
        _scrub_short.cache_clear()
        _identifier_short.cache_clear()


# --- strings, cut to a bound ----------------------------------------------------------------


def _safe_head(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text``, ending where no credential can be split: after
    whitespace, else ``_CUT_LOOKBACK`` characters earlier (a token that long is cut, and what
    is left of it still holds its prefix, which the patterns recognise)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    floor = max(limit - _CUT_LOOKBACK, 0)
    for i in range(limit - 1, floor - 1, -1):
        if head[i].isspace():
            return head[: i + 1]
    return head[:floor]


def _cut_and_scrub(text: str, limit: int, length: int | None = None) -> str:
    room = max(limit - _MARKER_ROOM, 0)
    head = _safe_head(text, room)
    out = redact(head)
    for _ in range(8):  # a redaction lengthened the text (pwd=x → pwd=[REDACTED]): scan less
        if len(out) <= room:
            break
        head = _safe_head(head, max(len(head) - (len(out) - room) - 1, 0))
        out = redact(head)
    else:
        head, out = "", ""
    return f"{out}…[unscanned:{(length or len(text)) - len(head)}]"


@lru_cache(maxsize=4096)
def _scrub_short(text: str) -> str:
    # clean inlined here: this is the path of most strings an envelope carries.
    if clean(text, _matches.active):
        return text
    return redact(text)


def scrub_text(text: str, limit: int = SCAN_LIMIT, *, length: int | None = None) -> str:
    """Redact secrets in a string; at most ``limit`` characters come out. Idempotent.

    A longer string is cut first where no credential can be split (its unscanned rest is
    counted in a marker). ``length``: the length of the whole value when ``text`` is only its
    head (a header read up to a bound), so the marker counts what was really left out.
    """
    size = len(text)
    if size <= _CACHEABLE and text[-1:] != "]":
        return _scrub_short(text)  # the common case first: short, and no marker to keep aside
    limit = max(limit, 2 * _MARKER_ROOM)
    if size > limit:
        return _cut_and_scrub(text, limit, length)
    # A marker this module wrote is kept aside: the text before it was already scanned, and the
    # marker itself must not be read as a key's value.
    marker = _MARKER.search(text, max(size - _MARKER_ROOM, 0)) if text[-1:] == "]" else None
    if marker is None:
        if size <= _CACHEABLE:
            return _scrub_short(text)
        head, tail = text, ""
    else:
        head, tail = text[: marker.start()], marker.group()
    out = _scrub_short(head) if len(head) <= _CACHEABLE else redact(head)
    if len(out) + len(tail) <= limit:
        return out + tail
    return _cut_and_scrub(text, limit)


# --- values that are not strings ------------------------------------------------------------


def _bounded_repr(value: object, limit: int, depth: int = 0) -> str:
    """``repr`` of a container that stops early: a list of a million items costs what the first
    few do. Strings inside are scrubbed before being cut, so no credential is split."""
    if isinstance(value, str):
        return repr(scrub_text(value, limit))[:limit]
    if depth >= 3 or not isinstance(value, (list, tuple, set, frozenset, dict)):
        return _text_of(value, limit)[:limit]
    if isinstance(value, dict):
        items: Iterable[Any] = value.items()
        opening, closing = "{", "}"
    else:
        items = value
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
    parts: list[str] = []
    size = 0
    for i, item in enumerate(items):
        if size >= limit or i >= 64:
            parts.append("…")
            break
        if isinstance(value, dict):
            key, val = item
            part = f"{_bounded_repr(key, limit, depth + 1)}: {_bounded_repr(val, limit, depth + 1)}"
        else:
            part = _bounded_repr(item, limit, depth + 1)
        parts.append(part)
        size += len(part) + 2
    return f"{opening}{', '.join(parts)}{closing}"


def _text_of(value: object, limit: int) -> str:
    """``value`` as text, without building more than about ``limit`` characters where the type
    allows: exceptions of plain arguments and containers are converted piece by piece."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value[: limit * 2]).decode("utf-8", "replace")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"<int of {value.bit_length()} bits>"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return _bounded_repr(value, limit)
    if isinstance(value, BaseException) and type(value).__str__ is BaseException.__str__:
        args = value.args
        if not args:
            return ""
        if len(args) == 1:
            return (
                _text_of(args[0], limit)
                if isinstance(args[0], str)
                else _bounded_repr(args[0], limit)
            )
        return _bounded_repr(args, limit)
    return str(value)


def scrub(value: object, *, limit: int = SCAN_LIMIT) -> str:
    """Any value as a string with its secrets replaced by ``[REDACTED]``; never raises."""
    try:
        text = _text_of(value, limit)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"
    return scrub_text(text, limit)


# --- identifiers ----------------------------------------------------------------------------

#: Characters of an identifier hashed into its placeholder (and its length, so longer ones differ).
_DIGEST_INPUT: Final = 65_536


def placeholder(text: str) -> str:
    """``redacted-`` and 16 hex digits of a BLAKE2b digest of ``text``: stable across processes
    and runs, so the same input always joins, and distinct inputs stay distinct."""
    data = f"{len(text)}:{text[:_DIGEST_INPUT]}".encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(data, digest_size=8, person=b"cvdiag-id").hexdigest()
    return IDENTIFIER_PREFIX + digest


@lru_cache(maxsize=4096)
def _identifier_short(text: str) -> str:
    if _IDENTIFIER.fullmatch(text) or _scrub_short(text) == text:
        return text
    return placeholder(text)


def scrub_identifier(text: str) -> str:
    """An identifier (test id, slug, demo, agent, model, provider or event type) unchanged, or,
    when it holds a secret, its stable placeholder: never an identifier edited in place, which
    would make two different ones equal."""
    if len(text) <= _CACHEABLE:
        return _identifier_short(text)
    if _IDENTIFIER.fullmatch(text):
        return text
    return text if scrub_text(text) == text else placeholder(text)
