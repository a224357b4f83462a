"""Secret redaction for every value an envelope carries (the rules are in ``scrub_rules``).

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
from typing import Any, Final, NamedTuple
from urllib.parse import unquote

from cvdiag import scrub_rules as _rules

REDACTED: Final = "[REDACTED]"
#: Characters of input scanned; envelopes are at most 16 KiB, so more could never be shown.
SCAN_LIMIT: Final = 16_384
_MARKER_ROOM: Final = 32  # "…[unscanned:N]" fits in this, so a scrubbed string is never re-cut
_MARKER: Final = re.compile(r"…\[unscanned:[0-9]{1,15}\]\Z")
#: A cut looks this far back for whitespace, where no token (so no credential) can be split.
_CUT_LOOKBACK: Final = 512
_CACHEABLE: Final = 64  # short strings (event types, names) repeat; their result is memoized
#: Percent-encoding is undone at most this many times, looking for a credential it hides.
_DECODE_ROUNDS: Final = 2
#: A redaction can reveal another (a key whose value was a vendor token): passes to a fixed point.
_PASSES: Final = 4
#: Characters of a value or token one match may take; a scanned string is never longer.
_RUN: Final = SCAN_LIMIT
IDENTIFIER_PREFIX: Final = "redacted-"
_IDENTIFIER: Final = re.compile(r"redacted-[0-9a-f]{16}")


def _trie_pattern(words: Iterable[str]) -> str:
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
_PRIVATE_KEYS: Final = re.compile(_rules.PRIVATE_KEY_BLOCK)
_USERINFO: Final = re.compile(
    r"(?<=[A-Za-z0-9])://(?P<user>[^\s/?#@\"'<>:\\]{0,256})(?::(?P<pw>[^\s/?#\"'<>\\]{0,256}))?@"
)
_CRED: Final = rf"[A-Za-z0-9._~+/=:-]{{1,{_RUN}}}"
_PARAMS: Final = (
    r"(?:[ \t]*,?[ \t]*[A-Za-z][A-Za-z0-9_-]{0,40}="
    r"(?:\\?\"[^\"\\\r\n]{0,512}\\?\"|[^\s,\"\\]{1,2048})){1,32}"
)
_SCHEME: Final = re.compile(
    _WORD_START
    + r"(?:(?P<ps>(?i:"
    + _trie_pattern(_rules.PARAM_SCHEMES)
    + r"))(?P<pws>[ \t]+)(?P<params>"
    + _PARAMS
    + r")|(?P<s>(?i:"
    + _trie_pattern(_rules.SCHEMES)
    + r"))(?P<ws>[ \t]+)"
    # A scheme word before another ("SharedKey Bearer x"): the second one's token is the one.
    + r"(?!(?i:"
    + _trie_pattern((*_rules.SCHEMES, *_rules.PARAM_SCHEMES))
    + r")[ \t])(?P<cred>"
    + _CRED
    + "))"
)
_SCHEME_WORDS: Final = _trie_pattern((*_rules.SCHEMES, *_rules.PARAM_SCHEMES))
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


class _Rules(NamedTuple):
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
    allow: frozenset[str]
    extra_keys: tuple[str, ...]
    patterns: tuple[str, ...]


_PEM, _TOK, _URL, _SCH, _KV = 1, 2, 4, 8, 16


def _build(patterns: tuple[str, ...], keys: tuple[str, ...], allow: frozenset[str]) -> _Rules:
    tokens = re.compile(
        _START
        + "(?:"
        + "|".join(rule.pattern for rule in _rules.VENDOR_RULES)
        + ")[A-Za-z0-9_-]*"  # a token longer than its vendor documents still goes whole
    )
    user = re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None
    secret_keys = (*_rules.SECRET_KEYS, *keys)
    names = (
        "(?i:"
        + _trie_pattern({k.lower() for k in secret_keys})
        + "(?:[_.-](?:"
        + _trie_pattern(_rules.KEY_SUFFIXES)
        + "|[0-9]{1,2}))?)"
    )
    line_names = "(?i:" + _trie_pattern(_rules.LINE_KEYS) + ")"
    value = _VALUE.format(p="", n=_RUN)
    flag_value = _VALUE.format(p="f", n=_RUN)
    key_pattern = (
        # --name VALUE, -u user:password (curl), then name=value and the header lines.
        _FLAG_START + r"--?(?:[A-Za-z0-9]+-){0,3}(?P<fk>" + names + r")[ \t]+(?!-)"
        + flag_value
        + r"|" + _FLAG_START
        + r"(?:-u|--user)[ \t]+(?P<cu>[^\s:\"'@]{1,256}):(?P<cp>[^\s\"']{1,256})"
        + r"|" + _KEY_START + r"(?P<lk>" + line_names + r")(?P<lsep>" + _SEP + r")"
        + _LINE_VALUE.format(n=_RUN)
        + r"|" + _KEY_START + r"(?P<k>" + names + r")(?P<sep>" + _SEP + r")"
        + r"(?:(?P<sch>(?i:" + _SCHEME_WORDS + r"))[ \t]+)?" + value
        # .netrc and friends: ``password VALUE``, checked by the callback.
        + r"|" + _WORD_START + r"(?P<nk>(?i:password|passwd))[ \t]+(?P<nv>[^\s\"'\\]{1,256})"
    )  # fmt: skip
    hint_groups: dict[str, int] = {}

    def add(words: Iterable[str], group: int) -> None:
        for word in words:
            hint_groups[word.lower()] = hint_groups.get(word.lower(), 0) | group

    add(_rules.PRIVATE_KEY_HINTS, _PEM)
    for rule in _rules.VENDOR_RULES:
        add(rule.hints, _TOK)
    add(("://",), _URL)
    add((*_rules.SCHEMES, *_rules.PARAM_SCHEMES), _SCH)
    add((*secret_keys, *_rules.LINE_KEYS, "--user", "-u "), _KV)
    # A hint found also stands for every shorter hint it starts with (the search reports the
    # longest at each position).
    for word in list(hint_groups):
        for other, group in list(hint_groups.items()):
            if word != other and word.startswith(other):
                hint_groups[word] |= group
    hints = re.compile("(?=(" + _trie_pattern(hint_groups) + "))")
    return _Rules(
        tokens,
        user,
        re.compile(key_pattern),
        *_probe(hint_groups),
        _hump({k.lower() for k in secret_keys}),
        hints,
        hint_groups,
        allow,
        keys,
        patterns,
    )


def _probe(hints: Iterable[str]) -> tuple[re.Pattern[bytes], tuple[bytes, ...]]:
    """Every pattern but the user's needs one of its hints at a token start, so one search says
    "nothing to redact" for most text. It starts with a character class, which lets the regex
    engine skip every letter and digit in C: only positions after punctuation or space are
    tried. A hint that starts with punctuation (``://``, ``-u ``) is looked for after any such
    character (a superset: a false alarm only costs the full search); one that is a single
    punctuation mark (``~``) is looked for with ``in``.

    Escapes (``\\n``) and terminal colour codes before a token are left to the full search:
    ``_clean`` does not trust this probe on text holding a backslash or an ESC.
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
    return re.compile(f"[^a-z0-9]{_trie_pattern(words)}".encode()), tuple(sorted(marks))


def _hump(names: Iterable[str]) -> re.Pattern[bytes]:
    """Key names at a camelCase hump (``accessToken``): the capital, after a lowercase letter or
    digit, then the rest of a name in any case."""
    by_first: dict[str, set[str]] = {}
    for name in names:
        if name[0].isalpha():
            by_first.setdefault(name[0].upper(), set()).add(name[1:])
    parts = [
        f"{first}(?<=[a-z0-9]{first})(?i:{_trie_pattern(rests)})"
        for first, rests in sorted(by_first.items())
    ]
    return re.compile("|".join(parts).encode())


_active: _Rules = _build((), (), frozenset())


def use_rules(
    *, patterns: Iterable[str] = (), keys: Iterable[str] = (), allow: Iterable[str] = ()
) -> None:
    """Install the user's rules process-wide: extra token patterns, extra secret key names, and
    exact values never to redact. Raises ``re.error`` for a pattern that does not compile."""
    global _active
    wanted = (frozenset(allow), tuple(keys), tuple(patterns))
    if wanted == _active[-3:]:
        return  # every emitter installs its settings' rules: most install the same ones
    _active = _build(wanted[2], wanted[1], wanted[0])
    _scrub_short.cache_clear()
    _identifier_short.cache_clear()


# --- the callbacks --------------------------------------------------------------------------

_SYMBOLS: Final = frozenset("._~+/=:")


def credential_shaped(token: str, *, weak: bool = False) -> bool:
    """Whether ``token`` looks like a credential rather than a word: long enough and mixing
    character classes (an uppercase first letter does not count: that is a capitalised word).
    ``weak`` accepts shorter tokens, where the context already says "password"."""
    if len(token) < (6 if weak else 8) or token.lower() in _rules.EMPTY_VALUES:
        return False
    if len(token) >= 32 and not weak:
        return True
    digit = lower = upper = symbol = False
    for i, char in enumerate(token):
        if char.isdigit():
            digit = True
        elif char.islower():
            lower = True
        elif char.isupper():
            upper = upper or i > 0
        elif char in _SYMBOLS:
            symbol = True
    return digit + lower + upper + symbol >= 2


def _allowed(value: str) -> bool:
    return value in _active.allow


def _token(match: re.Match[str]) -> str:
    return match.group() if _allowed(match.group()) else REDACTED


def _userinfo(match: re.Match[str]) -> str:
    user, password = match.group("user"), match.group("pw")
    if password is not None:
        if password in ("", REDACTED) or _allowed(password):
            return match.group()
        if credential_shaped(user) and user != REDACTED and not _allowed(user):
            user = REDACTED  # a token as the user name, "x-oauth-basic" as the password
        return f"://{user}:{REDACTED}@"
    if user == REDACTED or _allowed(user) or not credential_shaped(user):
        return match.group()
    return f"://{REDACTED}@"


def _scheme(match: re.Match[str]) -> str:
    if match.group("ps") is not None:
        params = match.group("params")
        if _allowed(params.strip()):
            return match.group()
        return f"{match.group('ps')}{match.group('pws')}{REDACTED}"
    cred = match.group("cred")
    if not credential_shaped(cred, weak=True) or _allowed(cred):
        return match.group()
    return f"{match.group('s')}{match.group('ws')}{REDACTED}"


def _full_key(text: str, start: int, name: str) -> str:
    """The whole key a matched name ends (``next_page_token`` for ``token``), normalised."""
    i = start
    while i > 0 and start - i < 64 and (text[i - 1].isalnum() or text[i - 1] in "_.-"):
        i -= 1
    return (text[i:start] + name).lower().replace("_", "").replace("-", "").replace(".", "")


def _keep_value(value: str) -> bool:
    return value == REDACTED or value.lower() in _rules.EMPTY_VALUES or _allowed(value)


def _value_of(match: re.Match[str], *names: str) -> tuple[str, str]:
    """The value a key matched, and the name of the group holding it."""
    for name in names:
        value = match.group(name)
        if value is not None:
            return value, name
    return "", names[-1]  # pragma: no cover - one of the value groups always matched


def _key_value(match: re.Match[str]) -> str:
    # match.group by name, never groupdict(): the pattern has thirty groups, and this runs once
    # per key found (thousands of times on hostile text).
    text = match.string
    name = match.group("k")
    if name is not None:
        value, group = _value_of(match, "dq", "sq", "bare")
        if _keep_value(value):
            return match.group()
        key = _full_key(text, match.start(), name)
        if key in _rules.NOT_SECRET_KEYS:
            return match.group()
        if key.endswith(("token", "tokens")) and value.isdigit() and len(value) < 10:
            return match.group()  # a count (max_token: 100), not a token
        if key in ("pwd", "oldpwd") and value.startswith(("/", "~")):
            return match.group()  # the shell's working directory
        if group == "bare" and ":" in match.group("sep") and value.isalpha():
            after = text[match.end() : match.end() + 2]
            if len(after) == 2 and after[0] == " " and after[1].isalpha():
                return match.group()  # English: "Missing credentials: please log in"
        return _replace(match, group)
    if match.group("lk") is not None:  # Authorization: …, Cookie: …
        value, group = _value_of(match, "lquoted", "lbare")
        scheme, _, rest = value.partition(" ")
        if _keep_value(value) or (rest and _keep_value(rest.strip())):
            return match.group()
        if rest and re.fullmatch(_SCHEME_WORDS, scheme, re.IGNORECASE):
            start = match.start(group) + len(scheme) + 1
            return text[match.start() : start] + REDACTED
        return _replace(match, group)
    if match.group("fk") is not None:  # --password VALUE
        value, group = _value_of(match, "fdq", "fsq", "fbare")
        return match.group() if _keep_value(value) else _replace(match, group)
    if match.group("cu") is not None:  # curl -u user:password
        return match.group() if _keep_value(match.group("cp")) else _replace(match, "cp")
    value = match.group("nv")  # .netrc: ``password VALUE``
    context = text[max(0, match.start() - 200) : match.start()].lower()
    netrc = "login" in context or "machine" in context or "default" in context
    if _keep_value(value) or not (netrc or credential_shaped(value, weak=True)):
        return match.group()
    return _replace(match, "nv")


def _replace(match: re.Match[str], group: str) -> str:
    """The match with the named group's text replaced by ``[REDACTED]``."""
    start, end = match.span(group)
    text = match.string
    return text[match.start() : start] + REDACTED + text[end : match.end()]


def _private_key(match: re.Match[str]) -> str:
    return REDACTED


# --- the passes -----------------------------------------------------------------------------


def _groups(text: str, rules: _Rules) -> int:
    found = 0
    hint_groups = rules.hint_groups
    for hint in rules.hints.findall(text.lower()):
        found |= hint_groups[hint]
    return found


def _substitute(text: str, groups: int, rules: _Rules) -> str:
    if groups & _PEM:
        text = _PRIVATE_KEYS.sub(_private_key, text)
    if groups & _TOK:
        text = rules.tokens.sub(_token, text)
    if rules.user is not None:
        text = rules.user.sub(_token, text)
    if groups & _URL:
        text = _USERINFO.sub(_userinfo, text)
    if groups & _SCH:
        text = _SCHEME.sub(_scheme, text)
    if groups & _KV:
        text = rules.keys.sub(_key_value, text)
    return text


def _redact_once(text: str, *, prefilter: bool = True) -> str:
    """Every pattern, on the text and on its percent-decodings: a credential hidden under
    percent-encoding (``https%3A%2F%2Fuser%3Apw%40host`` in a path, an encoded redirect URL in
    an error message) is found there, and the decoded text is kept, redacted."""
    rules = _active
    every = _PEM | _TOK | _URL | _SCH | _KV
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


def _clean(text: str, rules: _Rules) -> bool:
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
    rules = _active
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
    if _clean(text, _active):
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
