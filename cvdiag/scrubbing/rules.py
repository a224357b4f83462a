"""What the scrubber redacts, as data: the form of a vendor rule, auth schemes and secret key names.

The vendor token shapes themselves are the table in ``vendors.py``; this module gives each its form
(``VendorRule``, with the prefilter hint read off the pattern's literal prefix) and its fake
example: assembled at import time from a prefix and a patterned filler, so no file in the
repository holds a credential-shaped literal (push protection and secret scanners stay quiet, and
nobody mistakes one for a real key). The tests build their fake credentials the same way.
"""

from __future__ import annotations

from itertools import cycle, islice
from typing import Final, NamedTuple


class VendorRule(NamedTuple):
    family: str
    #: The token's regex. The engine puts a token-boundary check in front of it.
    pattern: str
    #: A fake credential of this shape (the test suite checks the rule redacts it whole).
    example: str
    #: Lowercase literals of which one always occurs in a match: the prefilter looks for them.
    hints: tuple[str, ...]


_FILLERS: Final = {
    "an": "Fake0Xmpl1Dummy2Test3Sample4Token5Value6Zz7Qq8Ww9",
    "hex": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    "HEX": "0F1E2D3C4B5A69788796A5B4C3D2E1F0",
    "up": "FAKE0EXAMPLE1DUMMY2TEST3KEY4VALUE5",
    "lo": "fake0example1dummy2test3key4value5",
    "dig": "0123456789",
    "b64": "Fake0Xmpl+Dummy2/Test3Sample4+Value5/Zz7",
    "url": "Fake0-Xmpl_Dummy2-Test3_Sample4-Value5_Zz7",
    "b32": "FAKE2EXAMP7LE9QPZRY3TVDW0",
    "alpha": "FakeXmplDummyTestSampleTokenValueZzQqWw",
}


def fake(kind: str, length: int) -> str:
    """``length`` characters of an obviously patterned, never random, filler."""
    return "".join(islice(cycle(_FILLERS[kind]), length))


def _hints_of(pattern: str) -> tuple[str, ...]:
    """The literal characters a pattern starts with, lowercased: its prefilter hint."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            out.append(pattern[i + 1])
            i += 2
            continue
        if char in "[(.{*+?|^$\\":
            break
        out.append(char)
        i += 1
    if len(out) > 1 and pattern[i : i + 1] in ("?", "*", "{"):
        out.pop()  # the last literal is optional or repeated: not always there
    hint = "".join(out).lower()
    if len(hint) < 2:
        raise ValueError(f"no literal prefix in {pattern!r}: give hints")
    return (hint,)


def vendor_rule(
    family: str, pattern: str, example: str, hints: tuple[str, ...] | None = None
) -> VendorRule:
    """A rule of ``vendors.VENDOR_RULES``; its hint is its literal prefix unless given."""
    return VendorRule(family, pattern, example, hints or _hints_of(pattern))


#: Private-key blocks: PEM of every kind (PKCS#1/#8, EC, DSA, OpenSSH, encrypted), PGP private
#: key blocks and SSH2's four-dash variant, to their END line (or the end of the text, when cut).
PRIVATE_KEY_BLOCK: Final = (
    r"-{4,5} ?BEGIN (?P<label>[A-Z0-9 ]{0,40}?(?:PRIVATE|SECRET) KEY(?: BLOCK)?) ?-{4,5}"
    r"[\s\S]*?(?:-{4,5} ?END [A-Z0-9 ]{0,40}?(?:PRIVATE|SECRET) KEY(?: BLOCK)? ?-{4,5}|\Z)"
    # PuTTY's .ppk: the private half follows its line count.
    r"|Private-Lines: ?[0-9]{1,4}(?:\s+(?:\\n)?(?!Private-)[A-Za-z0-9+/=]{4,})+"
    r"(?:\s+(?:\\n)?Private-MAC: ?[0-9a-fA-F]+)?"
)
PRIVATE_KEY_HINTS: Final = ("-----begin", "---- begin", "private-lines")

#: Authorization schemes. A scheme word redacts the token after it only when that token is
#: credential-shaped ("Basic plan users" and "Missing bearer token" are English).
SCHEMES: Final = (
    "bearer", "basic", "token", "apikey", "api-key", "negotiate", "ntlm", "kerberos",
    "hoba", "mutual", "ssws", "bot", "dpop", "jwt", "paseto", "splunk", "sharedkey",
    "sharedkeylite", "gapps", "googlelogin", "zoho-oauthtoken", "client-id", "sso-key",
    "apitoken", "api-token", "access-token", "privatetoken",
)  # fmt: skip
#: Words a scheme word is followed by in prose ("Basic authentication is required"): after a
#: capitalised scheme word a lower-case token of 8 or more letters is a credential
#: ("Bearer secrettoken"), unless it is one of these. Shorter ones ("Bearer token expired",
#: "Basic plan users") are words.
SCHEME_PROSE: Final = frozenset(
    {
        "authentication", "authorization", "authorisation", "credentials", "credential",
        "required", "requires", "supported", "expected", "rejected", "provided", "accepted",
        "invalid", "missing", "expired", "tokens", "headers", "scheme", "schemes", "password",
        "passwords", "username", "challenge", "protocol", "security", "instead", "endpoint",
        "requests", "response", "responses", "settings", "features", "includes", "customers",
        "accounts", "therefore", "however", "although", "everything", "something", "anything",
    }
)  # fmt: skip
#: Schemes whose credential is a list of ``name=value`` parameters: the whole list goes.
PARAM_SCHEMES: Final = (
    "digest", "oauth", "hawk", "mac", "aws4-hmac-sha256", "sharedaccesssignature",
    "scram-sha-1", "scram-sha-256", "vapid", "signature",
)  # fmt: skip


def spellings(*stems: str) -> tuple[str, ...]:
    """``api key`` → api_key, api-key, apikey, api.key: how a multi-word key name is written."""
    return tuple(stem.replace(" ", sep) for stem in stems for sep in ("_", "-", "", "."))


#: Key names whose value is a secret (case-insensitive). A name counts only at a word start (or a
#: camelCase hump: ``clientSecret``) and directly followed by its separator.
SECRET_KEYS: Final = (
    "password", "passwd", "pwd", "pass", "passphrase", "pswd", "secret", "secrets", "token",
    "auth", "credential", "credentials", "creds", "signature", "sig", "dsn",
    *spellings(
        "api key", "access key", "secret key", "private key", "session id", "session token",
        "session key", "account key", "app key", "application key", "master key", "signing key",
        "encryption key", "client key", "shared key", "shared access key", "subscription key",
        "license key", "consumer key", "auth key", "admin key",
        "jsession id", "php sess id", "api secret", "access secret",
    ),
    "apiKey", "x-api-key", "xsrf-token", "csrf-token",
)  # fmt: skip
#: Endings a secret key name may carry (``SECRET_KEY_BASE``, ``DB_PASSWORD_PROD``): the name
#: still names a secret. Anything else after the name (``password_reset_url``) does not.
KEY_SUFFIXES: Final = (
    "base", "prod", "production", "dev", "development", "staging", "test", "live", "value",
    "b64", "base64", "hex", "raw", "old", "new", "current", "previous", "primary", "secondary",
)  # fmt: skip
#: Key names whose value runs to the end of the line: a header's whole value is the secret.
LINE_KEYS: Final = ("authorization", "proxy-authorization", "cookie", "set-cookie")

#: Full key names (lowercased, separators removed) that end in a secret word but name no
#: secret: pagination and counting. Their values stay.
NOT_SECRET_KEYS: Final = frozenset(
    {
        "pagetoken", "nextpagetoken", "nexttoken", "continuationtoken", "paginationtoken",
        "synctoken", "resumetoken", "cursortoken", "prevtoken", "previoustoken", "pagingtoken",
        "maxtoken", "mintoken", "numtoken", "idempotencytoken",
    }
)  # fmt: skip
#: Values that hide nothing: placeholders and empties, kept as written.
EMPTY_VALUES: Final = frozenset(
    {
        "", "null", "none", "nil", "true", "false", "undefined", "redacted", "[redacted]",
        "<redacted>", "hidden", "<hidden>", "masked", "***", "****", "*****", "******",
        "********", "xxx", "xxxx", "<secret>", "<token>", "<password>",
    }
)  # fmt: skip
