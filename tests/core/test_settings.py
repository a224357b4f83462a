from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag import MemorySink, Settings, configure
from cvdiag.core.settings import DEBUG_ENVIRONMENTS, environment_problems
from cvdiag.core.version import BUILD
from cvdiag.schema.vocabulary import Tier


@pytest.mark.parametrize("value", ["1", "true", "TRUE", " yes ", "On", "\ton\n"])
def test_enabling_values(value: str) -> None:
    assert Settings.from_env({"CVDIAG_BACKEND_EMITTER": value}).enabled


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off", "enabled", "2", "y"])
def test_anything_else_disables(value: str) -> None:
    assert not Settings.from_env({"CVDIAG_BACKEND_EMITTER": value}).enabled


def test_unset_disables() -> None:
    assert Settings.from_env({}).enabled is False


def test_tier_selection() -> None:
    env = {"CVDIAG_BACKEND_EMITTER": "1", "PYTHON_ENV": "test"}
    assert Settings.from_env(env).tier is Tier.DEFAULT
    assert Settings.from_env({**env, "CVDIAG_VERBOSE": "1"}).tier is Tier.VERBOSE
    assert Settings.from_env({**env, "CVDIAG_DEBUG": "1"}).tier is Tier.DEBUG
    assert Settings.from_env({**env, "CVDIAG_DEBUG": "1", "CVDIAG_VERBOSE": "1"}).tier is Tier.DEBUG


@pytest.mark.parametrize("label", sorted(DEBUG_ENVIRONMENTS))
def test_debug_granted_in_development_like_environments(label: str) -> None:
    settings = Settings.from_env({"CVDIAG_DEBUG": "1", "SHOWCASE_ENV": f"  {label.upper()} "})
    assert settings.tier is Tier.DEBUG
    assert not settings.debug_refused


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, Tier.DEFAULT),
        ({"PYTHON_ENV": "production"}, Tier.DEFAULT),
        ({"PYTHON_ENV": "prod", "CVDIAG_VERBOSE": "1"}, Tier.VERBOSE),
        ({"RAILWAY_ENVIRONMENT_NAME": "development-ish"}, Tier.DEFAULT),
    ],
)
def test_debug_refused_elsewhere(env: dict[str, str], expected: Tier) -> None:
    settings = Settings.from_env({"CVDIAG_DEBUG": "1", **env})
    assert settings.tier is expected
    assert settings.debug_refused


def test_label_is_the_first_non_blank_in_order() -> None:
    env = {"SHOWCASE_ENV": "  ", "RAILWAY_ENVIRONMENT_NAME": "production", "PYTHON_ENV": "dev"}
    settings = Settings.from_env({"CVDIAG_DEBUG": "1", **env})
    assert settings.environment == "production"
    assert settings.debug_refused
    env["RAILWAY_ENVIRONMENT_NAME"] = ""
    assert Settings.from_env({"CVDIAG_DEBUG": "1", **env}).tier is Tier.DEBUG


def test_refusal_is_said_once_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings.from_env(
        {"CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_DEBUG": "1", "PYTHON_ENV": "production"}
    )
    emitter = configure(settings, sinks=[MemorySink()])
    err = capsys.readouterr().err
    assert err.count("CVDIAG_DEBUG refused") == 1
    assert "'production'" in err
    assert emitter.tier is Tier.DEFAULT
    configure(Settings(), sinks=[MemorySink()])


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "CVDIAG_BACKEND_EMITTER",
                "CVDIAG_DEBUG",
                "CVDIAG_VERBOSE",
                "CVDIAG_HEARTBEAT_INTERVAL",
                "CVDIAG_QUEUE_SIZE",
                "CVDIAG_SHUTDOWN_FLUSH_SECONDS",
                "CVDIAG_OTEL",
                "PYTHON_ENV",
                "SHOWCASE_ENV",
            ]
        ),
        st.text(max_size=20),
    )
)
def test_misconfiguration_never_raises(env: dict[str, str]) -> None:
    settings = Settings.from_env(env)
    assert settings.heartbeat_interval > 0
    assert settings.queue_size >= 1
    assert 0 < settings.shutdown_flush_seconds < float("inf")


def test_numeric_variables() -> None:
    settings = Settings.from_env({"CVDIAG_HEARTBEAT_INTERVAL": "2.5", "CVDIAG_QUEUE_SIZE": "10"})
    assert settings.heartbeat_interval == 2.5
    assert settings.queue_size == 10
    bad = Settings.from_env({"CVDIAG_HEARTBEAT_INTERVAL": "-1", "CVDIAG_QUEUE_SIZE": "x"})
    assert (bad.heartbeat_interval, bad.queue_size) == (10.0, 5000)
    assert Settings.from_env({"CVDIAG_SHUTDOWN_FLUSH_SECONDS": "0.5"}).shutdown_flush_seconds == 0.5
    assert Settings.from_env({"CVDIAG_SHUTDOWN_FLUSH_SECONDS": "-2"}).shutdown_flush_seconds == 5.0


def test_frozen_and_keyword_only() -> None:
    settings = Settings(enabled=True, tier="verbose")
    assert settings.tier is Tier.VERBOSE
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.enabled = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        Settings(True)  # type: ignore[misc]


def test_settings_in_code_are_trusted() -> None:
    assert Settings(enabled=True, tier=Tier.DEBUG).tier is Tier.DEBUG


def test_debug_falls_back_to_the_tier_it_would_have_had() -> None:
    env = {"CVDIAG_DEBUG": "1", "PYTHON_ENV": "ci"}
    assert Settings.from_env(env).debug_fallback_tier is Tier.DEFAULT
    assert Settings.from_env({**env, "CVDIAG_VERBOSE": "1"}).debug_fallback_tier is Tier.VERBOSE
    assert Settings(tier="debug").debug_fallback_tier is Tier.DEFAULT


# --- configuration that speaks (issue 17) ---------------------------------------------------


def _stderr_of(code: str, **env: str) -> str:
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


_TWICE = "from cvdiag import Settings\nSettings.from_env(); Settings.from_env()"


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("CVDIAG_BACKEND_EMITTER", "maybe", ("1, true, yes, on", "taken as off")),
        ("CVDIAG_VERBOSE", "maybe", ("not recognised",)),
        ("CVDIAG_HEARTBEAT_INTERVAL", "-1", ("positive number", "default 10")),
        ("CVDIAG_QUEUE_SIZE", "lots", ("positive whole number",)),
        ("CVDIAG_SHUTDOWN_FLUSH_SECONDS", "soon", ("positive number", "default 5")),
        ("CVDIAG_VERBOS", "1", ("not a cvdiag variable", "CVDIAG_VERBOSE")),
    ],
)
def test_an_unrecognised_value_is_reported_once(
    name: str, value: str, words: tuple[str, ...]
) -> None:
    err = _stderr_of(_TWICE, **{name: value})
    lines = [line for line in err.splitlines() if name in line]
    assert len(lines) == 1, err
    assert all(word in lines[0] for word in words), lines[0]


def test_accepted_values_say_nothing() -> None:
    err = _stderr_of(_TWICE, CVDIAG_VERBOSE="off", CVDIAG_HEARTBEAT_INTERVAL="2.5")
    assert err == ""


def test_emission_on_says_its_tier_and_sinks_on_stderr_only() -> None:
    code = (
        "from cvdiag.pipeline.emitter import get_emitter\n"
        "get_emitter(); get_emitter()\n"
        "from cvdiag import configure\nconfigure()\n"
    )
    err = _stderr_of(code, CVDIAG_BACKEND_EMITTER="1", CVDIAG_VERBOSE="1")
    assert err.splitlines() == [f"cvdiag: on at the verbose tier ({BUILD}), writing to stdout"]
    assert _stderr_of(code) == ""


def test_a_refused_debug_names_the_variables_that_set_the_label() -> None:
    code = "from cvdiag.pipeline.emitter import get_emitter\nget_emitter()"
    err = _stderr_of(code, CVDIAG_BACKEND_EMITTER="1", CVDIAG_DEBUG="1")
    assert "SHOWCASE_ENV, RAILWAY_ENVIRONMENT_NAME, PYTHON_ENV" in err
    assert "is unset" in err
    assert "None" not in err


def test_a_bad_tier_names_the_tiers() -> None:
    with pytest.raises(ValueError, match="default, verbose, debug"):
        Settings(tier="bogus")


def test_every_variable_cvdiag_reads_is_known() -> None:
    env = dict.fromkeys(
        (
            "CVDIAG_SCRUB_PATTERNS",
            "CVDIAG_SCRUB_KEYS",
            "CVDIAG_SCRUB_ALLOW",
            "CVDIAG_FORWARD_HOSTS",
        ),
        "x",
    )
    assert environment_problems(env) == []
