"""The passes: every pattern of the rule set in force, run to a fixed point over a text and its
percent-decodings, behind the prefilter that skips the patterns a text holds no anchor of.

Apart from ``redact.py`` (the entry points, the cut to a bound, identifiers and values that are
not strings) because these see only a text and the rule set in force: no bound, no cache, no
marker, so what they promise (nothing found is missed, a fixed point is reached) is checked here
on its own.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import unquote

from cvdiag.scrubbing import matches as _matches
from cvdiag.scrubbing.matches import key_value, private_key, scheme, token, userinfo
from cvdiag.scrubbing.patterns import (
    FEW_RULES,
    KV,
    PEM,
    PRIVATE_KEYS,
    SCH,
    SCHEME,
    TOK,
    URL,
    USERINFO,
    Rules,
    vendor_tokens,
)

#: Percent-encoding is undone at most this many times, looking for a credential it hides.
_DECODE_ROUNDS: Final = 2
#: A redaction can reveal another (a key whose value was a vendor token): passes to a fixed point.
_PASSES: Final = 4


def _groups(text: str, rules: Rules) -> tuple[int, tuple[int, ...]]:
    """The groups of patterns the text's hints wake, and the vendor rules among them."""
    found = 0
    hint_groups = rules.hint_groups
    hints = set(rules.hints.findall(text.lower()))
    for hint in hints:
        found |= hint_groups[hint]
    if not found & TOK:
        return found, ()
    hint_rules = rules.hint_rules
    woken: set[int] = set()
    for hint in hints:
        woken.update(hint_rules.get(hint, ()))
    return found, tuple(sorted(woken))


def _substitute(text: str, woken: tuple[int, tuple[int, ...]], rules: Rules) -> str:
    groups, vendors = woken
    if groups & PEM:
        text = PRIVATE_KEYS.sub(private_key, text)
    if groups & TOK:
        tokens = rules.tokens if not vendors or len(vendors) > FEW_RULES else vendor_tokens(vendors)
        text = tokens.sub(token, text)
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
    every = (PEM | TOK | URL | SCH | KV, ())
    groups = _groups(text, rules) if prefilter else every
    out = _substitute(text, groups, rules) if groups[0] or rules.user is not None else text
    # The decodings start from the text as written: a redaction of the encoded form may end at a
    # ``%`` and split what the encoding hid (``APIKEY DD_API_KEY%3D<hex>`` redacts the name and
    # keeps the value, which no key precedes once decoded).
    probe = text
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


def clean(text: str, rules: Rules) -> bool:
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


def quiet(text: str, rules: Rules) -> bool:
    """True when no pattern can match, as ``clean``, or when no hint of any rule occurs in the
    text nor in its percent-decodings: every built-in match holds one of its hints. A run of
    percent escapes near a cut (``%25%25…``) is not ``clean`` but is quiet, and costs no second
    scrub of the whole head (``redact._seamless``; issue 37)."""
    if clean(text, rules):
        return True
    if rules.user is not None:
        return False
    probe = text
    for _ in range(_DECODE_ROUNDS + 1):
        if rules.hints.search(probe.lower()) is not None:
            return False
        if "%" not in probe:
            return True
        decoded = unquote(probe)
        if decoded == probe:
            return True
        probe = decoded
    return False


def redact(text: str, *, prefilter: bool = True) -> str:
    """``text`` with what the rule set in force finds redacted, to a fixed point, unbounded.
    ``prefilter=False`` runs every pattern: the tests' proof that the prefilter hides nothing."""
    rules = _matches.active
    if (prefilter and clean(text, rules)) or text in rules.allow:
        return text
    out = _redact_once(text, prefilter=prefilter)
    for _ in range(_PASSES - 1):
        if out == text:
            break
        text, out = out, _redact_once(out, prefilter=prefilter)
    return out
