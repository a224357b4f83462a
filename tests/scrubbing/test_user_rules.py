"""User rules: extra patterns, extra secret key names and an allow-list, in code and from the
environment; they reach every envelope through the emitter that installs them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cvdiag import MemorySink, Settings, Tier, configure, emit, scrub
from cvdiag.scrubbing.rules import fake

ACME = "acme_live_" + fake("lo", 24)
DEMO_KEY = "sk-" + fake("an", 48)  # a published demo key, allowed on purpose


@pytest.fixture(autouse=True)
def default_rules() -> Iterator[None]:
    yield
    configure(Settings(), sinks=[MemorySink()])  # the next emitter installs no user rules


def test_rules_given_in_code_reach_the_envelope() -> None:
    sink = MemorySink()
    configure(
        Settings(
            enabled=True,
            tier=Tier.DEBUG,
            scrub_patterns=(r"acme_live_[a-z0-9]{20,}",),
            scrub_keys=("ssn", "pin_code"),
            scrub_allow=(DEMO_KEY,),
        ),
        sinks=[sink],
    )
    message = f"failed with {ACME}; ssn=123-45-6789 pin_code: 4321 demo key {DEMO_KEY}"
    emit("backend.error.caught", metadata={"message_scrubbed": message})
    line = sink.lines[-1].decode()
    assert ACME not in line
    assert "123-45-6789" not in line
    assert "4321" not in line
    assert DEMO_KEY in line  # allowed: an exact value the user says is no secret
    assert "ssn=[REDACTED]" in line


def test_without_user_rules_nothing_extra_is_redacted() -> None:
    configure(Settings(), sinks=[MemorySink()])
    assert scrub(f"{ACME} ssn=123") == f"{ACME} ssn=123"
    assert DEMO_KEY not in scrub(DEMO_KEY)


def test_environment_syntax() -> None:
    settings = Settings.from_env(
        {
            "CVDIAG_SCRUB_PATTERNS": '["acme_live_[a-z0-9]{20,}", "tok-[0-9]{6,}", "(unclosed"]',
            "CVDIAG_SCRUB_KEYS": "ssn, pin_code,,x-internal-auth",
            "CVDIAG_SCRUB_ALLOW": f'["{DEMO_KEY}", "a,b"]',
        }
    )
    assert settings.scrub_patterns == ("acme_live_[a-z0-9]{20,}", "tok-[0-9]{6,}")
    assert settings.scrub_rejected == ("(unclosed",)
    assert settings.scrub_keys == ("ssn", "pin_code", "x-internal-auth")
    assert settings.scrub_allow == (DEMO_KEY, "a,b")
    single = Settings.from_env({"CVDIAG_SCRUB_PATTERNS": "acme_[a-z]{8,}"})
    assert single.scrub_patterns == ("acme_[a-z]{8,}",)  # one pattern as is: commas allowed


def test_an_invalid_pattern_in_code_is_refused() -> None:
    with pytest.raises(ValueError, match="regular expression"):
        Settings(scrub_patterns=("(unclosed",))


def test_an_invalid_pattern_from_the_environment_is_reported_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = Settings.from_env(
        {"CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_SCRUB_PATTERNS": '["(unclosed"]'}
    )
    configure(settings, sinks=[MemorySink()])
    assert "CVDIAG_SCRUB_PATTERNS" in capsys.readouterr().err
