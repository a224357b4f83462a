"""Configuration, resolved once.

Reading ``os.environ`` on every emit is what made earlier emitters slow and hard to test, so
settings are a frozen value built once (``Settings.from_env``) or given in code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Final

from cvdiag.schema.vocabulary import Tier

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})
_FLAGS: Final = ("CVDIAG_BACKEND_EMITTER", "CVDIAG_VERBOSE", "CVDIAG_DEBUG", "CVDIAG_OTEL")
_NUMBERS: Final = {
    "CVDIAG_HEARTBEAT_INTERVAL": "a positive number of seconds",
    "CVDIAG_QUEUE_SIZE": "a positive whole number",
    "CVDIAG_SHUTDOWN_FLUSH_SECONDS": "a positive number of seconds",
}
_LISTS: Final = (
    "CVDIAG_SCRUB_PATTERNS",
    "CVDIAG_SCRUB_KEYS",
    "CVDIAG_SCRUB_ALLOW",
    "CVDIAG_FORWARD_HOSTS",
)
#: Problems already reported on stderr: each is said once per process, however often the
#: environment is read.
_reported: set[str] = set()
#: Environment labels under which DEBUG may be granted; anything else (or none) refuses it.
DEBUG_ENVIRONMENTS: Final = frozenset(
    {"development", "dev", "test", "staging", "local", "ci", "preview"}
)
ENVIRONMENT_LABEL_VARS: Final = ("SHOWCASE_ENV", "RAILWAY_ENVIRONMENT_NAME", "PYTHON_ENV")


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in _TRUE


def _positive_float(environ: Mapping[str, str], name: str, default: float) -> float:
    try:
        value = float(environ.get(name, "").strip())
    except ValueError:
        return default
    return value if value > 0 and value != float("inf") else default


def _positive_int(environ: Mapping[str, str], name: str, default: int) -> int:
    try:
        value = int(environ.get(name, "").strip())
    except ValueError:
        return default
    return value if value > 0 else default


def _list(environ: Mapping[str, str], name: str, *, commas: bool) -> tuple[str, ...]:
    """A JSON array of strings, or else (``commas``) comma-separated items, or one item."""
    raw = environ.get(name, "").strip()
    if not raw:
        return ()
    if raw.startswith("["):
        try:
            items = json.loads(raw)
        except ValueError:
            items = None
        if isinstance(items, list):
            return tuple(item for item in items if isinstance(item, str) and item)
    if commas:
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    return (raw,)


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def _tier(value: Tier | str | int) -> Tier:
    try:
        if isinstance(value, str) and not isinstance(value, Tier):
            return Tier[value.strip().upper()]
        return Tier(value)
    except (KeyError, ValueError):
        raise ValueError(
            f"tier {value!r} is not one of {', '.join(t.label for t in Tier)}"
        ) from None


def _shown(raw: str) -> str:
    """A mistyped value as stderr shows it: scrubbed, then cut (a token pasted into the wrong
    variable must not reach the terminal, not even its first 40 characters)."""
    from cvdiag.scrubbing.redact import scrub_head  # late: the CLI starts without the scrubber

    return scrub_head(raw, 40)


def environment_problems(environ: Mapping[str, str]) -> list[str]:
    """What in ``environ`` cvdiag does not understand: flag values other than the accepted
    words, numbers that are not positive, ``CVDIAG_*`` names cvdiag does not read."""
    problems = []
    for name in _FLAGS:
        raw = environ.get(name)
        if raw is not None and raw.strip().lower() not in _TRUE | _FALSE:
            problems.append(
                f"{name}={_shown(raw)!r} is not recognised (accepted: 1, true, yes, on to turn it"
                " on; 0, false, no, off or empty for off): taken as off"
            )
    defaults = {
        "CVDIAG_HEARTBEAT_INTERVAL": "10",
        "CVDIAG_QUEUE_SIZE": "5000",
        "CVDIAG_SHUTDOWN_FLUSH_SECONDS": "5",
    }
    for name, expected in _NUMBERS.items():
        raw = environ.get(name)
        if raw is None or not raw.strip():
            continue
        ok = (
            _positive_float({name: raw}, name, -1.0) > 0
            if name != "CVDIAG_QUEUE_SIZE"
            else _positive_int({name: raw}, name, -1) > 0
        )
        if not ok:
            problems.append(
                f"{name}={_shown(raw)!r} is not {expected}: the default {defaults[name]} is used"
            )
    forward = environ.get("CVDIAG_FORWARD_HOSTS")
    if forward is not None:
        from cvdiag.core.forwarding import split_forward_hosts

        _, rejected = split_forward_hosts(_list({"v": forward}, "v", commas=True))
        for item in rejected:
            problems.append(
                f"CVDIAG_FORWARD_HOSTS item {item[:64]!r} is not a host name, an IP address,"
                " *.suffix or *: ignored"
            )
    known = {*_FLAGS, *_NUMBERS, *_LISTS}
    for name in sorted(environ):
        if name.startswith("CVDIAG_") and name not in known:
            problems.append(
                f"{name} is not a cvdiag variable (cvdiag reads {', '.join(sorted(known))})"
            )
    return problems


def _report(problems: list[str]) -> None:
    from cvdiag.core.guard import say

    for problem in problems:
        if problem not in _reported:
            _reported.add(problem)
            say(problem)


def environment_label(environ: Mapping[str, str]) -> str | None:
    """The first non-blank of SHOWCASE_ENV, RAILWAY_ENVIRONMENT_NAME, PYTHON_ENV, normalized."""
    for name in ENVIRONMENT_LABEL_VARS:
        value = environ.get(name, "").strip().lower()
        if value:
            return value
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the emitter needs to know, fixed for its lifetime.

    Settings built in code are trusted as given (``Settings(enabled=True, tier="debug")``);
    the DEBUG guard applies to what comes from the environment, where a stray variable in
    production must not turn on the verbose, larger envelopes.
    """

    enabled: bool = False
    tier: Tier = Tier.DEFAULT
    heartbeat_interval: float = 10.0
    otel: bool = False
    queue_size: int = 5000
    #: How long shutdown (lifespan shutdown, SIGTERM, exit) waits for a slow reader before it
    #: counts what is still queued as not written and says so (docs/production.md).
    shutdown_flush_seconds: float = 5.0
    debug_max_seconds: float = 600.0
    debug_max_envelopes: int = 10_000
    #: The tier DEBUG falls back to when its bounds are reached: the tier the environment would
    #: have given without CVDIAG_DEBUG.
    debug_fallback_tier: Tier = Tier.DEFAULT
    #: Set by ``from_env`` when CVDIAG_DEBUG was asked for and refused; reported once.
    debug_refused: bool = False
    environment: str | None = None
    #: The user's scrubbing rules (docs/security.md): extra regular expressions whose matches
    #: are redacted, extra key names whose values are, and exact values never to redact. They
    #: apply process-wide, installed by the emitter built from these settings.
    scrub_patterns: tuple[str, ...] = ()
    scrub_keys: tuple[str, ...] = ()
    scrub_allow: tuple[str, ...] = ()
    #: Set by ``from_env``: patterns from CVDIAG_SCRUB_PATTERNS that did not compile; reported once.
    scrub_rejected: tuple[str, ...] = ()
    #: Outbound hosts that receive the test id and slug headers besides local ones
    #: (docs/agents-and-llm-calls.md): host names, IP addresses, ``*.suffix``, or ``*`` for all.
    forward_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "scrub_patterns",
            "scrub_keys",
            "scrub_allow",
            "scrub_rejected",
            "forward_hosts",
        ):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        for pattern in self.scrub_patterns:
            if not _compiles(pattern):
                raise ValueError(f"scrub_patterns: {pattern!r} is not a valid regular expression")
        from cvdiag.core.forwarding import split_forward_hosts

        _, rejected = split_forward_hosts(self.forward_hosts)
        if rejected:
            raise ValueError(f"forward_hosts: {rejected[0]!r} is not a host name or *.suffix")
        object.__setattr__(self, "tier", _tier(self.tier))
        object.__setattr__(self, "debug_fallback_tier", _tier(self.debug_fallback_tier))
        if self.heartbeat_interval <= 0:
            raise ValueError("heartbeat_interval must be positive")
        if self.queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if not self.shutdown_flush_seconds >= 0:
            raise ValueError("shutdown_flush_seconds must not be negative")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Resolve settings from ``environ`` (default ``os.environ``); never raises."""
        env = os.environ if environ is None else environ
        _report(environment_problems(env))
        label = environment_label(env)
        verbose = _flag(env, "CVDIAG_VERBOSE")
        debug_asked = _flag(env, "CVDIAG_DEBUG")
        debug_allowed = label in DEBUG_ENVIRONMENTS
        if debug_asked and debug_allowed:
            tier = Tier.DEBUG
        elif verbose:
            tier = Tier.VERBOSE
        else:
            tier = Tier.DEFAULT
        patterns = _list(env, "CVDIAG_SCRUB_PATTERNS", commas=False)
        from cvdiag.core.forwarding import split_forward_hosts

        forward, _ = split_forward_hosts(_list(env, "CVDIAG_FORWARD_HOSTS", commas=True))
        return cls(
            scrub_patterns=tuple(p for p in patterns if _compiles(p)),
            scrub_keys=_list(env, "CVDIAG_SCRUB_KEYS", commas=True),
            scrub_allow=_list(env, "CVDIAG_SCRUB_ALLOW", commas=True),
            scrub_rejected=tuple(p for p in patterns if not _compiles(p)),
            forward_hosts=forward,
            enabled=_flag(env, "CVDIAG_BACKEND_EMITTER"),
            tier=tier,
            heartbeat_interval=_positive_float(env, "CVDIAG_HEARTBEAT_INTERVAL", 10.0),
            otel=_flag(env, "CVDIAG_OTEL"),
            queue_size=_positive_int(env, "CVDIAG_QUEUE_SIZE", 5000),
            shutdown_flush_seconds=_positive_float(env, "CVDIAG_SHUTDOWN_FLUSH_SECONDS", 5.0),
            debug_fallback_tier=Tier.VERBOSE if verbose else Tier.DEFAULT,
            debug_refused=debug_asked and not debug_allowed,
            environment=label,
        )
