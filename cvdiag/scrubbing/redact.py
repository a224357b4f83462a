"""Secret redaction for every value an envelope carries.

The rules are data in ``scrub_rules``, compiled in ``scrub_patterns``; what each match becomes
is in ``scrub_matches``. This module runs the passes, bounds them, and scrubs identifiers.

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
from urllib.parse import unquote

from cvdiag.scrubbing import matches as _matches
from cvdiag.scrubbing.matches import REDACTED, key_value, private_key, scheme, token, userinfo
from cvdiag.scrubbing.patterns import (
    KV,
    PEM,
    PRIVATE_KEYS,
    SCAN_LIMIT,
    SCH,
    SCHEME,
    TOK,
    URL,
    USERINFO,
    Rules,
)

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
#: Percent-encoding is undone at most this many times, looking for a credential it hides.
_DECODE_ROUNDS: Final = 2
#: A redaction can reveal another (a key whose value was a vendor token): passes to a fixed point.
_PASSES: Final = 4
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


# --- the passes -----------------------------------------------------------------------------


def _groups(text: str, rules: Rules) -> int:
    found = 0
    hint_groups = rules.hint_groups
    for hint in rules.hints.findall(text.lower()):
        found |= hint_groups[hint]
    return found


def _substitute(text: str, groups: int, rules: Rules) -> str:
    if groups & PEM:
        text = PRIVATE_KEYS.sub(private_key, text)
    if groups & TOK:
        text = rules.tokens.sub(token, text)
    if rules.user is not None:
        text = rules.user.sub(token, text)
    if groups & URL:
        text = USERINFO.sub(userinfo, text)
    if groups & SCH:
        text = SCHEME.sub(scheme, text)
    if groups & KV:
        text = rules.keys.sub(key_value, text)
    return text


def _redact_once(text: str, *, prefilter: bool = True) -> str:
    """Every pattern, on the text and on its percent-decodings: a credential hidden under
    percent-encoding (``https%3A%2F%2Fuser%3Apw%40host`` in a path, an encoded redirect URL in
    an error message) is found there, and the decoded text is kept, redacted."""
    rules = _matches.active
    every = PEM | TOK | URL | SCH | KV
    groups = _groups(text, rules) if prefilter else every
    out = _substitute(text, groups, rules) if groups or rules.user is not None else text
    probe = out
    for _ in range(_DECODE_ROUNDS):
        if "%" not in probe:
            break
        decoded = unquote(probe)
        if decoded == probe:
            break
        groups = _groups(decoded, rules) if prefilter else every
        probe = _substitute(decoded, groups, rules)
        if probe != decoded:
            out = probe
    return out


def _clean(text: str, rules: Rules) -> bool:
    """True when no pattern can match: the common case, decided in a few C calls (this runs for
    every string an envelope carries, so it avoids even a generator)."""
    if rules.user is not None or "%" in text or "\\" in text or "\x1b" in text:
        return False
    raw = text.encode("utf-8", "surrogatepass")
    low = raw.lower()
    if rules.probe.search(b" " + low) is not None:
        return False
    for mark in rules.marks:
        if mark in low:
            return False
    return raw.islower() or raw.isupper() or rules.hump.search(raw) is None


def _redact(text: str, *, prefilter: bool = True) -> str:
    rules = _matches.active
    if (prefilter and _clean(text, rules)) or text in rules.allow:
        return text
    out = _redact_once(text, prefilter=prefilter)
    for _ in range(_PASSES - 1):
        if out == text:
            break
        text, out = out, _redact_once(out, prefilter=prefilter)
    return out


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
    out = _redact(head)
    for _ in range(8):  # a redaction lengthened the text (pwd=x → pwd=[REDACTED]): scan less
        if len(out) <= room:
            break
        head = _safe_head(head, max(len(head) - (len(out) - room) - 1, 0))
        out = _redact(head)
    else:
        head, out = "", ""
    return f"{out}…[unscanned:{(length or len(text)) - len(head)}]"


@lru_cache(maxsize=4096)
def _scrub_short(text: str) -> str:
    # _clean inlined here: this is the path of most strings an envelope carries.
    if _clean(text, _matches.active):
        return text
    return _redact(text)


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
    out = _scrub_short(head) if len(head) <= _CACHEABLE else _redact(head)
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
