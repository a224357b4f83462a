"""Secret redaction for every free-text value an envelope carries.

Two rules keep this safe on hostile input. Only a bounded prefix is scanned (the rest is replaced
by an ``…[unscanned:N]`` marker), and every pattern, once its anchor matches, succeeds on the
maximal run of token characters that follows: no pattern needs a suffix after an unbounded run, so
a failed attempt never rescans the text and the cost stays linear.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Final

REDACTED: Final = "[REDACTED]"
#: Characters of input scanned; envelopes are at most 16 KiB, so more could never be shown.
SCAN_LIMIT: Final = 16_384
_MARKER_ROOM: Final = 32  # "…[unscanned:N]" fits in this, so a scrubbed string is never re-cut
_CACHEABLE: Final = 64  # short strings (event types, names) repeat; their result is memoized

_SENSITIVE_NAMES: Final = (
    r"password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|auth|authorization|credentials?|session[_-]?id|cookie|signature|sig"
)

# Whole-match redactions: the credential itself, wherever it stands. Prefixes distinctive enough
# to be a credential even when glued to other text carry no word boundary.
_TOKENS: Final = re.compile(
    "|".join(
        (
            r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----"
            r"[\s\S]*?(?:-----END[A-Z ]{0,40}PRIVATE KEY-----|\Z)",
            r"sk-(?:proj|ant|admin|svcacct|or|live|test)-[A-Za-z0-9_\-]{4,}",
            # Generic sk-/pk-/rk- keys: at a word start, or glued to text when they hold a digit
            # (the lookahead is bounded, so it cannot rescan a long run).
            r"(?<![A-Za-z0-9])(?:sk|pk|rk)[-_][A-Za-z0-9_\-]{6,}",
            r"(?:sk|pk|rk)[-_](?=[A-Za-z_\-]{0,64}[0-9])[A-Za-z0-9_\-]{8,}",
            r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{12,}",
            r"gh[pousr]_[A-Za-z0-9_]{16,}|github_pat_[A-Za-z0-9_]{16,}",
            r"gl(?:pat|dt|rt|ptt|soat|ft|imt|cbt|oas)-[A-Za-z0-9_\-]{12,}",
            r"xox[abposre]-[A-Za-z0-9\-]{8,}",
            r"xapp-[A-Za-z0-9\-]{8,}",
            r"hf_[A-Za-z0-9]{16,}",
            r"AIza[0-9A-Za-z_\-]{20,}",
            r"ya29\.[0-9A-Za-z_\-.]{8,}",
            r"npm_[A-Za-z0-9]{20,}",
            r"pypi-[A-Za-z0-9_\-]{16,}",
            r"(?:sq0atp|sq0csp)-[A-Za-z0-9_\-]{16,}",
            r"\bSG\.[A-Za-z0-9_\-]{16,}\.?[A-Za-z0-9_\-]*",
            r"dop_v1_[a-f0-9]{16,}",
            r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{16,}",
            r"eyJ[A-Za-z0-9_\-]{6,}(?:\.[A-Za-z0-9_\-+/=]*){0,2}",
        )
    )
)
# Redactions that keep their context: the scheme, the header word, the key name.
_BEARER: Final = re.compile(r"(?i)(bearer|\bbasic)(\s+)(?!\[REDACTED\])[^\s\"'<>,;]+")
_USERINFO: Final = re.compile(r"(?i)([a-z][a-z0-9+.\-]{0,20}://)[^\s/?#@\"'<>]{1,512}@")
# A key naming a secret directly followed by ``=`` or ``:`` (quoted or not): the value goes.
# ``max_tokens=5`` keeps its value: the separator must follow the name at once.
_KEY_VALUE: Final = re.compile(
    r"(?i)(" + _SENSITIVE_NAMES + r")(\"?'?\s{0,4}[:=]\s{0,4})"
    r"(?!\[REDACTED\])(?:\"[^\"\n]{0,1024}\"?|'[^'\n]{0,1024}'?|[^\s\"'&,;}<>]{1,1024})"
)


# Every pattern above starts with one of these literals (compared lowercased). Most text holds
# none of them, and one search for all of them costs a fraction of running the patterns.
_HINT_WORDS: Final = (
    "-----begin", "sk-", "sk_", "pk-", "pk_", "rk-", "rk_", "akia", "asia", "agpa", "aida",
    "aroa", "anpa", "anva", "aipa", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "glpat-", "gldt-", "glrt-", "glptt-", "glsoat-", "glft-", "glimt-", "glcbt-", "gloas-", "xox",
    "xapp-", "hf_", "aiza", "ya29.", "npm_", "pypi-", "sq0", "sg.", "dop_v1_", "shpat_", "shpss_",
    "shpca_", "shppa_", "eyj", "bearer", "basic", "://", "password", "passwd", "pwd", "secret",
    "token", "key", "auth", "credential", "session", "cookie", "sig",
)  # fmt: skip


def _trie_pattern(words: tuple[str, ...]) -> str:
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


_HINTS: Final = re.compile(_trie_pattern(_HINT_WORDS))


def _keep_key(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}{REDACTED}"


def _redact(text: str) -> str:
    if _HINTS.search(text.lower()) is None:
        return text
    return _apply_patterns(text)


def _apply_patterns(text: str) -> str:
    text = _TOKENS.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _KEY_VALUE.sub(_keep_key, text)


def _cut(text: str) -> tuple[str, int]:
    """The prefix to scan, ending at a token boundary so no partial credential survives."""
    head = text[: SCAN_LIMIT - _MARKER_ROOM]
    for i in range(len(head) - 1, max(len(head) - 512, 0) - 1, -1):
        if head[i].isspace():
            head = head[: i + 1]
            break
    else:
        head = head[: max(len(head) - 512, 0)]
    return head, len(text) - len(head)


@lru_cache(maxsize=4096)
def _scrub_short(text: str) -> str:
    return _redact(text)


def scrub_text(text: str) -> str:
    """Redact secrets in a string; bounded and idempotent."""
    if len(text) <= _CACHEABLE:
        return _scrub_short(text)
    if len(text) <= SCAN_LIMIT:
        out = _redact(text)
        if len(out) <= SCAN_LIMIT:
            return out
        head, rest = out[: SCAN_LIMIT - _MARKER_ROOM], len(out) - SCAN_LIMIT + _MARKER_ROOM
        return f"{head}…[unscanned:{rest}]"
    head, rest = _cut(text)
    out = _redact(head)[: SCAN_LIMIT - _MARKER_ROOM]
    return f"{out}…[unscanned:{rest}]"


def scrub(value: object) -> str:
    """Any value as a string with its secrets replaced by ``[REDACTED]``; never raises."""
    try:
        if isinstance(value, str):
            text = value
        elif isinstance(value, (bytes, bytearray, memoryview)):
            text = bytes(value[: SCAN_LIMIT * 2]).decode("utf-8", "replace")
        else:
            text = str(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"
    return scrub_text(text)
