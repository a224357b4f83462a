"""Secret redaction for every value an envelope carries.

The rules are data in ``rules.py`` and ``vendors.py``, compiled in ``patterns.py``; what each
match becomes is in ``matches.py``; the passes run in ``passes.py``. This module bounds them,
caches what repeats, and scrubs identifiers and values that are not strings.

Four promises shape this module:

- **Recall with precision.** Vendor prefixes match only at a token boundary, auth-scheme words
  only before a credential-shaped token, key names only directly before their separator.
- **Linear and bounded.** Only a bounded prefix of a value is scanned (the rest becomes an
  ``…[unscanned:N]`` marker), and every pattern, once its
  literal anchor matches, takes a bounded run of characters with nothing required after it, so a
  failed attempt never rescans the text. A prefilter (one search for every anchor) skips the
  patterns whose anchors a text does not hold.
- **Scrubbed before cut.** Wherever a value is cut, what is kept is scrubbed as part of a window
  ``SEAM`` characters wider than the cut, and only what the head and that window agree on is kept
  (``_seamless``): a credential straddling the cut is seen whole there, so no fragment of it is
  kept, even one too short for any pattern.
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
from cvdiag.scrubbing.passes import clean, quiet, redact
from cvdiag.scrubbing.patterns import SCAN_LIMIT

__all__ = [
    "IDENTIFIER_PREFIX",
    "REDACTED",
    "SCAN_LIMIT",
    "SEAM",
    "placeholder",
    "scrub",
    "scrub_head",
    "scrub_identifier",
    "scrub_text",
    "use_rules",
]

_MARKER_ROOM: Final = 32  # "…[unscanned:N]" fits in this, so a scrubbed string is never re-cut
_MARKER: Final = re.compile(r"…\[unscanned:[0-9]{1,15}\]\Z")
#: A cut looks this far back for whitespace, so that what is kept ends on a whole word.
_CUT_LOOKBACK: Final = 512
#: Characters past a cut read to scrub what is kept: at least what any built-in rule needs, from a
#: credential's first character, to recognise it (the longest is a URL's ``://user:password@``,
#: 3 + 256 + 1 + 256 + 1; a vendor token needs at most about 100, a ``key=`` or scheme word a few
#: more than its name). A caller that cuts a value before handing it here (to bound its own work)
#: must keep at least this many characters past what it shows.
SEAM: Final = 1024
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
    """At most ``limit`` characters of ``text``, ending after whitespace when there is some in
    the last ``_CUT_LOOKBACK`` (a whole word reads better), else ``_CUT_LOOKBACK`` earlier.
    Readability only: ``_seamless`` is what keeps a split credential out."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    floor = max(limit - _CUT_LOOKBACK, 0)
    for i in range(limit - 1, floor - 1, -1):
        if head[i].isspace():
            return head[: i + 1]
    return head[:floor]


def _seamless(text: str, cut: int, out: str) -> str:
    """``out`` (``text[:cut]`` scrubbed) without any fragment of a credential the cut split.

    The scrubber cannot recognise ``ghp_abc`` as a token once the cut took the rest of it. So
    ``text`` is scrubbed again over a window ``SEAM`` characters past the cut, where such a
    credential is whole enough to be recognised, and only the common prefix of the two results
    is kept: both agree up to where the window redacted what the head could not (a credential
    there starts before the cut, and the window replaces it from its start), and everything
    of the head from there on is dropped. What the window itself may have split at its own end
    lies past the cut, so never in ``out``. Nothing near the cut to recognise (the common
    case: one prefilter search over the seam) costs no second scrub.
    """
    if cut >= len(text):
        return out
    rules = _matches.active
    if quiet(text[max(cut - SEAM, 0) : cut + SEAM], rules):
        return out  # no anchor of any rule near the cut: nothing can straddle it
    whole = redact(text[: cut + SEAM])
    size = min(len(out), len(whole))
    same = 0
    while same < size and out[same] == whole[same]:
        same += 1
    if same == len(out):
        return out
    # Scrubbed once more: the prefix may end on a key whose value it dropped (``password=``),
    # which a later scrub would redact; this keeps ``scrub(scrub(x)) == scrub(x)``.
    return redact(out[:same])


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
    kept = _seamless(text, len(head), out)
    if len(kept) > room:  # that last scrub lengthened it: rare enough to show nothing
        kept = ""
    # What the seam dropped is counted as left out (about: a redaction may have changed its size).
    left_out = (length or len(text)) - len(head) + len(out) - len(kept)
    return f"{kept}…[unscanned:{left_out}]"


def scrub_head(text: str, keep: int) -> str:
    """At most the first ``keep`` characters of ``text``, scrubbed before they are cut (no
    marker): for names and short fields a line shows only the start of. A credential the cut
    splits is dropped whole (``_seamless``), never shortened into a fragment no rule knows.
    ``keep`` is at most ``SCAN_LIMIT``."""
    if len(text) <= keep:
        return scrub_text(text)
    head = text[:keep]
    return _seamless(text, keep, scrub_text(head))[:keep]


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
        return scrub_head(_text_of(value, limit), limit)  # an object's text: scrubbed, then cut
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
        # At least limit + SEAM characters whatever the encoding (≤ 4 bytes each), so the cut
        # made here lies past the seam of the scrubber's own cut.
        return bytes(value[: (limit + SEAM) * 4]).decode("utf-8", "replace")
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
    """Any value as a string with its secrets replaced by ``[REDACTED]``; never raises.

    ``None`` is the empty string: a message that is absent says nothing (not ``"None"``)."""
    if value is None:
        return ""
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
