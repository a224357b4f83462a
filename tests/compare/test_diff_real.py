"""``cvdiag diff`` on real logs: the same scenario run by a real backend (uvicorn, the fake
provider through an instrumented httpx client) twice, once healthy and once with one thing
changed; ``diff`` must name the right first split, and two healthy runs are the same story."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cvdiag
from tests.support.scenarios import backend, run


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One log, every scenario in it under its own test id (one server run for the module)."""
    path = tmp_path_factory.mktemp("diff") / "backend.log"
    with backend(path) as url:
        run(url, path, "pass-1")
        run(url, path, "pass-2")
        # The provider holds its answer; the backend gives up on it after 0.5 s.
        run(url, path, "stall", provider="stall", llm_timeout=0.5)
        run(url, path, "prompt", prompt="plan my week")
        # The provider holds its answer; the client gives up first.
        run(url, path, "client-timeout", provider="stall", client_timeout=0.5)
        # A proxy in front (its via header) that cuts the stream after the first event.
        run(url, path, "proxy-cut", headers={"via": "1.1 squid"}, cut=True)
        # The agent asks the model the same thing twice in one turn.
        run(url, path, "loop", calls=2)
    return path


def diff(log: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = cvdiag("diff", *args, str(log), "--json")
    assert done.stderr == "" or "warning" in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_two_healthy_runs_tell_the_same_story_despite_ids_and_timings(log: Path) -> None:
    code, result = diff(log, "pass-1", "pass-2")
    assert (code, result["same"], result["differences"]) == (0, True, [])
    human = cvdiag("diff", "pass-1", "pass-2", str(log))
    assert human.returncode == 0
    assert "same story" in human.stdout


def test_a_stalled_provider_splits_at_the_llm_call(log: Path) -> None:
    code, result = diff(log, "pass-1", "stall")
    assert code == 1
    split = str(result["first_split"])
    assert split.startswith("at LLM openai/gpt-4o-mini:"), split
    assert "ReadTimeout" in split
    assert "first token at" in split
    assert result["shared"] == ["ingress POST /chat", "agent planner", "LLM openai/gpt-4o-mini"]
    found = {(d["where"], d["what"]) for d in result["differences"]}
    assert ("llm 1 openai/gpt-4o-mini #1 end", "error_class") in found
    assert ("request POST /chat #1 end", "event_names") in found
    # SSE events are compared by position and name: the first that differs is shown.
    [events] = [d for d in result["differences"] if d["what"] == "event_names"]
    assert (events["a"], events["b"]) == ("#0 TEXT_MESSAGE_CONTENT", "#0 RUN_ERROR")


def test_a_changed_prompt_is_named_at_the_call_it_went_to(log: Path) -> None:
    code, result = diff(log, "pass-1", "prompt")
    assert code == 1
    assert (
        result["first_split"] == "at LLM openai/gpt-4o-mini: the prompt sent to the model changed"
    )


def test_a_client_timeout_splits_where_the_call_was_still_waiting(log: Path) -> None:
    code, result = diff(log, "pass-1", "client-timeout")
    assert code == 1
    split = str(result["first_split"])
    assert split.startswith("at LLM openai/gpt-4o-mini:"), split
    assert "the client left at +" in split
    assert result["b"] == {"test_id": "client-timeout", "flap_class": result["b"]["flap_class"]}
    assert result["b"]["flap_class"] != "healthy"


def test_a_proxy_cut_splits_at_the_request_end_and_names_its_header(log: Path) -> None:
    code, result = diff(log, "pass-1", "proxy-cut")
    assert code == 1
    found = {d["what"]: d for d in result["differences"]}
    assert found["terminal"]["b"] == "aborted"
    assert found["edge_headers"]["b"] == {"via": "1.1 squid"}
    assert "aborted" in str(result["first_split"]) or "edge" in str(result["first_split"])


def test_stories_can_be_named_log_hash_id(log: Path) -> None:
    done = cvdiag("diff", f"{log}#pass-1", f"{log}#pass-2")
    assert done.returncode == 0, done.stderr


def test_stories_can_be_named_id_then_log(log: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.log"
    other.write_bytes(log.read_bytes())
    done = cvdiag("diff", "pass-1", str(log), "stall", str(other), "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["b"]["test_id"] == "stall"


def test_the_threshold_decides_what_timing_is_noise(log: Path) -> None:
    code, result = diff(log, "pass-1", "pass-2", "--threshold-ms", "0.001")
    strict = {d["what"] for d in result["differences"]}
    # Two real runs never take the very same microseconds: at a threshold of a microsecond,
    # their timings differ, and only their timings.
    assert code == 1
    assert strict
    assert strict <= {"duration_ms", "latency_ms", "first_token_ms", "first_byte_ms"}


def test_the_same_prompt_twice_in_one_turn_is_a_possible_loop(log: Path) -> None:
    code, result = diff(log, "pass-1", "loop")
    assert code == 1
    assert result["possible_loops"]["a"] == []
    [loop] = result["possible_loops"]["b"]
    assert loop["calls"] == 2
    split = result["first_split"]
    assert split == "the first run never reached LLM openai/gpt-4o-mini (beginning)", split
    human = cvdiag("diff", "pass-1", "loop", str(log))
    said = f"b: possible loop: the same prompt ({loop['request_fingerprint']}) sent 2 times"
    assert said in human.stdout
