"""What each match becomes, under the rule set in force (the user's allow list included)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Final

from cvdiag.scrubbing import rules as _rules
from cvdiag.scrubbing.patterns import SCHEME_WORDS, Rules, build_rules

REDACTED: Final = "[REDACTED]"

#: The rule set in force; ``install`` replaces it (cvdiag/scrubbing/redact.py ``use_rules``).
#: Compiled on first use (``__getattr__`` below), not on import: the compile takes about 40 ms, and
#: the ``cvdiag`` command, which scrubs nothing, starts in half the time without it. An emitter
#: installs its rules when it is built, so a server pays at start-up, never in a request.
active: Rules


def __getattr__(name: str) -> Rules:
    if name != "active":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _in_force()


#: Taken to compile or replace the rules: a first scrub racing an emitter's ``install`` must
#: not put the built-in rules back over the user's.
_compiling = threading.Lock()


def _in_force() -> Rules:
    global active
    try:
        return active
    except NameError:
        pass
    with _compiling:
        try:
            return active
        except NameError:
            active = build_rules((), (), frozenset())
            return active


def install(*, patterns: Iterable[str], keys: Iterable[str], allow: Iterable[str]) -> bool:
    """Make the user's rules the ones in force; False when they already were (every emitter
    installs its settings' rules: most install the same ones). Raises ``re.error``."""
    global active
    wanted = (frozenset(allow), tuple(keys), tuple(patterns))
    if wanted == _in_force()[-3:]:
        return False
    rules = build_rules(wanted[2], wanted[1], wanted[0])
    with _compiling:
        active = rules
    return True


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
    return value in active.allow


def token(match: re.Match[str]) -> str:
    return match.group() if _allowed(match.group()) else REDACTED


def userinfo(match: re.Match[str]) -> str:
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


def scheme(match: re.Match[str]) -> str:
    if match.group("ps") is not None:
        params = match.group("params")
        if _allowed(params.strip()):
            return match.group()
        return f"{match.group('ps')}{match.group('pws')}{REDACTED}"
    cred = match.group("cred")
    if _allowed(cred) or not (
        _lower_token(match.group("s"), cred.partition("/")[0])
        or (credential_shaped(cred, weak=True) and not _path_words(cred))
    ):
        return match.group()
    return f"{match.group('s')}{match.group('ws')}{REDACTED}"


def _path_words(cred: str) -> bool:
    """Lower-case words between slashes (``expired/retry`` in ``/Bearer token expired/retry``):
    a path read on past a scheme word, not a credential."""
    return "/" in cred and all(
        part.isalpha() and part.islower() for part in cred.split("/") if part
    )


def _lower_token(scheme_word: str, cred: str) -> bool:
    """A one-class token after a scheme word written as in a header (``Bearer secrettoken``):
    the word capitalised, the token 8 or more lower-case letters and digits, and no word prose
    puts after a scheme (``rules.SCHEME_PROSE``)."""
    return (
        scheme_word[:1].isupper()
        and len(cred) >= 8
        and cred.isalnum()
        and cred.islower()
        and cred not in _rules.SCHEME_PROSE
        and cred.lower() not in _rules.EMPTY_VALUES
    )


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


def key_value(match: re.Match[str]) -> str:
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
        if group == "bare" and _source_code(match, key, value):
            return match.group()
        return _replace(match, group)
    if match.group("lk") is not None:  # Authorization: …, Cookie: …
        value, group = _value_of(match, "lquoted", "lbare")
        scheme, _, rest = value.partition(" ")
        credential = rest.strip()
        # Only an auth scheme's credential ("Bearer <token>") is judged apart from its line: a
        # blank or placeholder-looking rest after any other value ("session_id=… " with a
        # trailing space) must not keep the value before it.
        schemed = bool(credential) and re.fullmatch(SCHEME_WORDS, scheme, re.IGNORECASE)
        if _keep_value(value.strip()) or (schemed and _keep_value(credential)):
            return match.group()
        if schemed:
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


#: A type annotation's name after ``auth:`` (``AuthTypes | None``): a capitalised word and
#: what only code puts after it.
_ANNOTATION: Final = re.compile(r"[A-Z][A-Za-z]*")
_AFTER_ANNOTATION: Final = (" | ", " = ", "]", "[")


def _source_code(match: re.Match[str], key: str, value: str) -> bool:
    """Whether a bare value is a line of source code a traceback quotes, which holds no
    secret: a variable named as its key (``auth=auth``), an attribute of ``self`` or ``cls``,
    a call (``token = get_token()``), a type (``auth: AuthTypes | None``)."""
    if value.lower().replace("_", "").replace("-", "") == key:
        return True  # a literal "password" as a password hides nothing either
    if value.startswith(("self.", "cls.")) and value.replace(".", "_").isidentifier():
        return True
    after = match.string[match.end() : match.end() + 3]
    if after.startswith("(") and value.replace(".", "_").isidentifier():
        return not any(c.isdigit() for c in value)  # ``get_token(``, never ``hunter2(``
    return (
        ":" in match.group("sep")
        and _ANNOTATION.fullmatch(value) is not None
        and after.startswith(_AFTER_ANNOTATION)
    )


def _replace(match: re.Match[str], group: str) -> str:
    """The match with the named group's text replaced by ``[REDACTED]``."""
    start, end = match.span(group)
    text = match.string
    return text[match.start() : start] + REDACTED + text[end : match.end()]


def private_key(match: re.Match[str]) -> str:
    return REDACTED
