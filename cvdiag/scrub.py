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
from urllib.parse import unquote

REDACTED: Final = "[REDACTED]"
#: Characters of input scanned; envelopes are at most 16 KiB, so more could never be shown.
SCAN_LIMIT: Final = 16_384
_MARKER_ROOM: Final = 32  # "…[unscanned:N]" fits in this, so a scrubbed string is never re-cut
_CACHEABLE: Final = 64  # short strings (event types, names) repeat; their result is memoized
#: Percent-encoding is undone at most this many times, looking for a credential it hides.
_DECODE_ROUNDS: Final = 2


def _spellings(*stems: str) -> tuple[str, ...]:
    """``api key`` → api_key, api-key, apikey: the ways a two-word key name is written."""
    return tuple(stem.replace(" ", sep) for stem in stems for sep in ("_", "-", ""))


#: Key names whose value is a secret (compared case-insensitively). Literal words, so that the
#: pattern built from them is a trie: one branch per character, whatever the number of names.
_SENSITIVE_NAMES: Final = (
    "password", "passwd", "pwd", "passphrase", "secret", "token", "auth", "authorization",
    "credential", "credentials", "cookie", "signature", "sig",
    *_spellings("api key", "access key", "private key", "session id"),
    # Keys that are secrets although their names say neither "secret" nor "token": Azure's
    # AccountKey, Datadog's app key, and their kin.
    *_spellings("account key", "app key", "application key", "master key", "signing key",
                "encryption key", "client key", "shared key"),
)  # fmt: skip

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
            # SendGrid's fixed shape, glued to text too (the \bSG. form above needs a word start).
            r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",
            r"whsec_[A-Za-z0-9+/=]{16,}",  # Stripe webhook signing secrets
            # xAI, Perplexity, Replicate
            r"xai-[A-Za-z0-9]{20,}|pplx-[A-Za-z0-9]{20,}|r8_[A-Za-z0-9]{20,}",
            r"lin_api_[A-Za-z0-9]{20,}",  # Linear
            r"ATATT[A-Za-z0-9_\-=]{20,}",  # Atlassian
            r"NRAK-[A-Z0-9]{20,}",  # New Relic
            r"hv[sbr]\.[A-Za-z0-9_\-]{20,}",  # HashiCorp Vault
            r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{16,}",  # Doppler
            r"AGE-SECRET-KEY-1[A-Z0-9]{20,}",  # age
            r"1//0[A-Za-z0-9_\-]{20,}",  # Google OAuth refresh tokens
            r"key-[0-9A-Za-z]{32,}",  # Mailgun
            # Webhook URLs whose path is the credential; Telegram bot tokens (id:AA…).
            r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{8,}",
            r"discord(?:app)?\.com/api/webhooks/[A-Za-z0-9_/\-]{8,}",
            r"(?<=[0-9]):AA[A-Za-z0-9_\-]{30,}",
        )
    )
)
# Redactions that keep their context: the scheme, the header word, the key name.
_BEARER: Final = re.compile(r"(?i)(bearer|\bbasic)(\s+)(?!\[REDACTED\])[^\s\"'<>,;]+")
_USERINFO: Final = re.compile(r"(?i)([a-z][a-z0-9+.\-]{0,20}://)[^\s/?#@\"'<>]{1,512}@")
# The key-value pattern (``_KEY_VALUE``) is built below, once ``_trie_pattern`` is defined.


# Every pattern above starts with one of these literals (compared lowercased). Most text holds
# none of them, and one search for all of them costs a fraction of running the patterns.
_HINT_WORDS: Final = (
    "-----begin", "sk-", "sk_", "pk-", "pk_", "rk-", "rk_", "akia", "asia", "agpa", "aida",
    "aroa", "anpa", "anva", "aipa", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "glpat-", "gldt-", "glrt-", "glptt-", "glsoat-", "glft-", "glimt-", "glcbt-", "gloas-", "xox",
    "xapp-", "hf_", "aiza", "ya29.", "npm_", "pypi-", "sq0", "sg.", "dop_v1_", "shpat_", "shpss_",
    "shpca_", "shppa_", "eyj", "bearer", "basic", "://", "password", "passwd", "pwd", "secret",
    "token", "key", "auth", "credential", "session", "cookie", "sig", "whsec_", "xai-", "pplx-",
    "r8_", "lin_api_", "atatt", "nrak-", "hvs.", "hvb.", "hvr.", "dp.", "age-secret-key-", "1//0",
    "hooks.slack.com/", "discord", ":aa", "passphrase",
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
# A key naming a secret directly followed by ``=`` or ``:`` (quoted or not): the value goes.
# ``max_tokens=5`` keeps its value: the separator must follow the name at once.
_KEY_VALUE: Final = re.compile(
    r"(?i)(" + _trie_pattern(_SENSITIVE_NAMES) + r")(\"?'?\s{0,4}[:=]\s{0,4})"
    r"(?!\[REDACTED\])(?:\"[^\"\n]{0,1024}\"?|'[^'\n]{0,1024}'?|[^\s\"'&,;}<>]{1,1024})"
)


def _keep_key(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}{REDACTED}"


def _redact(text: str) -> str:
    probe = text
    for _ in range(_DECODE_ROUNDS + 1):
        if _HINTS.search(probe.lower()) is not None:
            return _apply_patterns(text)
        if "%" not in probe:
            return text
        decoded = unquote(probe)
        if decoded == probe:
            return text
        probe = decoded
    return text


def _substitute(text: str) -> str:
    text = _TOKENS.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _KEY_VALUE.sub(_keep_key, text)


def _apply_patterns(text: str) -> str:
    """Every pattern, on the text and on its percent-decodings: a credential hidden under
    percent-encoding (``https%3A%2F%2Fuser%3Apw%40host`` in a path, an encoded redirect URL in
    an error message) is found there, and the decoded text is kept, redacted."""
    out = probe = _substitute(text)
    for _ in range(_DECODE_ROUNDS):
        if "%" not in probe:
            break
        decoded = unquote(probe)
        if decoded == probe:
            break
        probe = _substitute(decoded)
        if probe != decoded:
            out = probe
    return out


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
