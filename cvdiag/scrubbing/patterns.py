"""The scrubber's patterns, compiled from ``rules.py`` and ``vendors.py`` (plus the user's).

Each pattern, once its literal anchor matches, takes a bounded run of characters with nothing
required after it, so a failed attempt never rescans the text (cvdiag/scrubbing/redact.py says
why). The hints build the prefilter: one search for every anchor says which groups of patterns to
run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Final, NamedTuple

from cvdiag.scrubbing import rules as _rules
from cvdiag.scrubbing.vendors import VENDOR_RULES

#: Characters of input scanned; envelopes are at most 16 KiB, so more could never be shown.
SCAN_LIMIT: Final = 16_384
#: Characters of a value or token one match may take; a scanned string is never longer.
RUN: Final = SCAN_LIMIT


def trie_pattern(words: Iterable[str]) -> str:
    """One regex for many literals, shaped as a trie: it branches once per character."""
    trie: dict[str, dict[str, Any]] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def pattern(node: dict[str, Any]) -> str:
        branches = [re.escape(c) + pattern(sub) for c, sub in sorted(node.items()) if c]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
        return f"(?:{body})?" if "" in node else body

    return pattern(trie)


# --- the patterns ---------------------------------------------------------------------------

#: Where a token may start: not inside a word. An escape (``\n`` in a JSON string) or a terminal
#: colour code before it does not glue it to a word.
_START: Final = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt])|(?<=\x1b\[[0-9]m)|(?<=\x1b\[[0-9][0-9]m))"
#: A key name starts a word, or a camelCase hump (``clientSecret``, ``accessToken``).
_KEY_START: Final = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt])|(?<=[a-z0-9])(?=[A-Z]))"
#: Where a command-line flag may start.
_FLAG_START: Final = r"(?:(?<![A-Za-z0-9-])|(?<=\\[nrt]))"
#: Where a scheme word or a ``password VALUE`` pair may start.
_WORD_START: Final = r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrt]))"
PRIVATE_KEYS: Final = re.compile(_rules.PRIVATE_KEY_BLOCK)
USERINFO: Final = re.compile(
    r"(?<=[A-Za-z0-9])://(?P<user>[^\s/?#@\"'<>:\\]{0,256})(?::(?P<pw>[^\s/?#\"'<>\\]{0,256}))?@"
)
_CRED: Final = rf"[A-Za-z0-9._~+/=:-]{{1,{RUN}}}"
_PARAMS: Final = (
    r"(?:[ \t]*,?[ \t]*[A-Za-z][A-Za-z0-9_-]{0,40}="
    r"(?:\\?\"[^\"\\\r\n]{0,512}\\?\"|[^\s,\"\\]{1,2048})){1,32}"
)
SCHEME: Final = re.compile(
    _WORD_START
    + r"(?:(?P<ps>(?i:"
    + trie_pattern(_rules.PARAM_SCHEMES)
    + r"))(?P<pws>[ \t]+)(?P<params>"
    + _PARAMS
    + r")|(?P<s>(?i:"
    + trie_pattern(_rules.SCHEMES)
    + r"))(?P<ws>[ \t]+)"
    # A scheme word before another ("SharedKey Bearer x"): the second one's token is the one.
    + r"(?!(?i:"
    + trie_pattern((*_rules.SCHEMES, *_rules.PARAM_SCHEMES))
    + r")[ \t])(?P<cred>"
    + _CRED
    + "))"
)
SCHEME_WORDS: Final = trie_pattern((*_rules.SCHEMES, *_rules.PARAM_SCHEMES))
#: Between a key and its value: quotes (JSON-escaped too) and ``=``, ``:``, ``=>``, ``:=``; or
#: the comma of a ``('password', 'x')`` tuple or an argv list.
_SEP: Final = (
    r"(?:\\{0,3}[\"']?[ \t]{0,4}(?:=>|:=|==|[:=>])[ \t]{0,4}"
    r"|\\{0,3}[\"'][ \t]*,[ \t]*(?=b?\\{0,3}[\"']))"
)
_VALUE: Final = (
    r"(?:(?P<{p}q>b?\\{{0,3}}\")(?P<{p}dq>[^\"\\\r\n]{{0,{n}}})"
    r"|(?P<{p}sq_>b?\\{{0,3}}')(?P<{p}sq>[^'\\\r\n]{{0,{n}}})"
    r"|(?P<{p}bare>\[REDACTED\]|[^\s\"'\\,;&<>(){{}}\[\]`…]{{1,{n}}}))"
)
_LINE_VALUE: Final = (
    r"(?:(?P<lq>b?\\{{0,3}}[\"'])(?P<lquoted>[^\"'\\\r\n]{{0,{n}}})"
    r"|(?P<lbare>[^\r\n\"'\\]{{1,{n}}}))"
)


class Rules(NamedTuple):
    """The compiled rule set in force: built-in rules plus the user's."""

    tokens: re.Pattern[str]
    user: re.Pattern[str] | None
    keys: re.Pattern[str]
    #: The fast "nothing here" test: every hint at a token start, on lowercased UTF-8 bytes.
    probe: re.Pattern[bytes]
    marks: tuple[bytes, ...]
    #: The same for key names at a camelCase hump (``clientSecret``), on the original bytes.
    hump: re.Pattern[bytes]
    hints: re.Pattern[str]
    #: Hint literal → the groups of patterns it wakes (bit flags below).
    hint_groups: dict[str, int]
    #: Hint literal → the vendor rules (indexes in ``VENDOR_RULES``) it may begin a match of.
    hint_rules: dict[str, tuple[int, ...]]
    allow: frozenset[str]
    extra_keys: tuple[str, ...]
    patterns: tuple[str, ...]


PEM, TOK, URL, SCH, KV = 1, 2, 4, 8, 16


def build_rules(patterns: tuple[str, ...], keys: tuple[str, ...], allow: frozenset[str]) -> Rules:
    tokens = re.compile(
        _START
        + "(?:"
        + "|".join(rule.pattern for rule in VENDOR_RULES)
        + ")[A-Za-z0-9_-]*"  # a token longer than its vendor documents still goes whole
    )
    user = re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None
    secret_keys = (*_rules.SECRET_KEYS, *keys)
    names = (
        "(?i:"
        + trie_pattern({k.lower() for k in secret_keys})
        + "(?:[_.-](?:"
        + trie_pattern(_rules.KEY_SUFFIXES)
        + "|[0-9]{1,2}))?)"
    )
    line_names = "(?i:" + trie_pattern(_rules.LINE_KEYS) + ")"
    value = _VALUE.format(p="", n=RUN)
    flag_value = _VALUE.format(p="f", n=RUN)
    key_pattern = (
        # --name VALUE, -u user:password (curl), then name=value and the header lines.
        _FLAG_START + r"--?(?:[A-Za-z0-9]+-){0,3}(?P<fk>" + names + r")[ \t]+(?!-)"
        + flag_value
        + r"|" + _FLAG_START
        + r"(?:-u|--user)[ \t]+(?P<cu>[^\s:\"'@]{1,256}):(?P<cp>[^\s\"']{1,256})"
        + r"|" + _KEY_START + r"(?P<lk>" + line_names + r")(?P<lsep>" + _SEP + r")"
        + _LINE_VALUE.format(n=RUN)
        + r"|" + _KEY_START + r"(?P<k>" + names + r")(?P<sep>" + _SEP + r")"
        + r"(?:(?P<sch>(?i:" + SCHEME_WORDS + r"))[ \t]+)?" + value
        # .netrc and friends: ``password VALUE``, checked by the callback.
        + r"|" + _WORD_START + r"(?P<nk>(?i:password|passwd))[ \t]+(?P<nv>[^\s\"'\\]{1,256})"
    )  # fmt: skip
    hint_groups: dict[str, int] = {}

    def add(words: Iterable[str], group: int) -> None:
        for word in words:
            hint_groups[word.lower()] = hint_groups.get(word.lower(), 0) | group

    add(_rules.PRIVATE_KEY_HINTS, PEM)
    for rule in VENDOR_RULES:
        add(rule.hints, TOK)
    add(("://",), URL)
    add((*_rules.SCHEMES, *_rules.PARAM_SCHEMES), SCH)
    add((*secret_keys, *_rules.LINE_KEYS, "--user", "-u "), KV)
    by_hint: dict[str, set[int]] = {}
    for index, rule in enumerate(VENDOR_RULES):
        for hint in rule.hints:
            by_hint.setdefault(hint.lower(), set()).add(index)
    # A hint found also stands for every shorter hint it starts with (the search reports the
    # longest at each position).
    for word in list(hint_groups):
        for other, group in list(hint_groups.items()):
            if word != other and word.startswith(other):
                hint_groups[word] |= group
                by_hint.setdefault(word, set()).update(by_hint.get(other, ()))
    hints = re.compile("(?=(" + trie_pattern(hint_groups) + "))")
    return Rules(
        tokens,
        user,
        re.compile(key_pattern),
        *_probe(hint_groups),
        _hump({k.lower() for k in secret_keys}),
        hints,
        hint_groups,
        {hint: tuple(sorted(found)) for hint, found in by_hint.items()},
        allow,
        keys,
        patterns,
    )


#: Past this many vendor rules woken, the whole alternation (``Rules.tokens``) runs instead.
FEW_RULES: Final = 8


@lru_cache(maxsize=256)
def vendor_tokens(indexes: tuple[int, ...]) -> re.Pattern[str]:
    """``Rules.tokens`` cut to the vendor rules whose hints a text holds, in the same order: the
    same matches (a rule matches only where one of its hints occurs), and the engine tries a few
    branches per position rather than every vendor's. On 10 MB of ``AGE-SECRET-KEY-1`` and
    percent escapes the whole alternation cost 30 ms of the scan (issue 37)."""
    return re.compile(
        _START + "(?:" + "|".join(VENDOR_RULES[i].pattern for i in indexes) + ")[A-Za-z0-9_-]*"
    )


def _probe(hints: Iterable[str]) -> tuple[re.Pattern[bytes], tuple[bytes, ...]]:
    """Every pattern but the user's needs one of its hints at a token start, so one search says
    "nothing to redact" for most text. It starts with a character class, which lets the regex
    engine skip every letter and digit in C: only positions after punctuation or space are
    tried. A hint that starts with punctuation (``://``, ``-u ``) is looked for after any such
    character (a superset: a false alarm only costs the full search); one that is a single
    punctuation mark (``~``) is looked for with ``in``.

    Escapes (``\\n``) and terminal colour codes before a token are left to the full search:
    ``passes.clean`` does not trust this probe on text holding a backslash or an ESC.
    """
    words: set[str] = set()
    marks: set[bytes] = set()
    for hint in hints:
        if hint[0].isalnum():
            words.add(hint)
        elif len(hint) > 1:
            words.add(hint[1:])
        else:
            marks.add(hint.encode())
    # No group around the trie: the engine then tries its branches directly (measured 1.5×).
    return re.compile(f"[^a-z0-9]{trie_pattern(words)}".encode()), tuple(sorted(marks))


def _hump(names: Iterable[str]) -> re.Pattern[bytes]:
    """Key names at a camelCase hump (``accessToken``): the capital, after a lowercase letter or
    digit, then the rest of a name in any case."""
    by_first: dict[str, set[str]] = {}
    for name in names:
        if name[0].isalpha():
            by_first.setdefault(name[0].upper(), set()).add(name[1:])
    parts = [
        f"{first}(?<=[a-z0-9]{first})(?i:{trie_pattern(rests)})"
        for first, rests in sorted(by_first.items())
    ]
    return re.compile("|".join(parts).encode())
