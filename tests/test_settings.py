from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag import MemorySink, Settings, configure
from cvdiag.schema import Tier
from cvdiag.settings import DEBUG_ENVIRONMENTS


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


def test_numeric_variables() -> None:
    settings = Settings.from_env({"CVDIAG_HEARTBEAT_INTERVAL": "2.5", "CVDIAG_QUEUE_SIZE": "10"})
    assert settings.heartbeat_interval == 2.5
    assert settings.queue_size == 10
    bad = Settings.from_env({"CVDIAG_HEARTBEAT_INTERVAL": "-1", "CVDIAG_QUEUE_SIZE": "x"})
    assert (bad.heartbeat_interval, bad.queue_size) == (10.0, 5000)


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
