"""``cvdiag flakes`` over 20 runs with a planted cause.

The real backend (tests/support/scenarios.py) runs each distinct conversation once; the 20 runs'
logs reuse those real lines under each run's own test id (``renamed``), which keeps the module
to one server start. Every failure came through the same proxy (``via: 1.1 squid``), one pass
did too, and the prompts vary in passes and failures alike: the proxy is the cause to name.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from cvdiag import (
    FileSink,
    MemorySink,
    Settings,
    Tier,
    adopt_test_id,
    agent_scope,
    cli,
    configure,
    flush,
)
from cvdiag.cli import flaking
from cvdiag.compare.flakes import stable_part
from tests.support import junit
from tests.support.cli import cvdiag
from tests.support.scenarios import backend, renamed, run

RUNS = 20
FAILING = {3, 7, 11, 15, 19}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("flakes")
    recorded = folder / "recorded.log"
    with backend(recorded) as url:
        run(url, recorded, "p-day", prompt="plan my day")
        run(url, recorded, "p-week", prompt="plan my week")
        run(url, recorded, "p-proxy", prompt="plan my day", headers={"via": "1.1 squid"})
        for name, prompt in (("f-day", "plan my day"), ("f-week", "plan my week")):
            run(url, recorded, name, prompt=prompt, headers={"via": "1.1 squid"},
                provider="stall", client_timeout=0.5)  # fmt: skip
    logs = []
    for number in range(RUNS):
        if number in FAILING:
            chat = ("f-day", "f-week")[sorted(FAILING).index(number) % 2]
        else:
            chat = "p-proxy" if number == 4 else ("p-day" if number % 2 else "p-week")
        log = folder / f"run-{number:02}.log"
        log.write_text(
            renamed(recorded, chat, f"d4-chat-run{number}")
            + renamed(recorded, "p-day", f"d4-search-run{number}")
        )
        logs.append(log)
    return logs


def test_the_planted_cause_is_named_first(runs: list[Path]) -> None:
    done = cvdiag("flakes", *map(str, runs), "--json")
    assert done.returncode == 0, done.stderr
    chat, search = json.loads(done.stdout)
    assert (chat["test"], chat["attempts"], chat["failures"]) == ("d4-chat", RUNS, len(FAILING))
    assert (search["test"], search["failures"], search["flake_rate"]) == ("d4-search", 0, 0.0)
    [cause] = chat["causes"]
    assert cause["count"] == len(FAILING)
    assert cause["provider"] == "openai"
    assert cause["flap_class"] != "healthy"
    first = chat["separating_facts"][0]
    assert first == {
        "fact": "via: 1.1 squid",
        "kind": "input",
        "failures": len(FAILING),
        "of_failures": len(FAILING),
        "passes": 1,
        "of_passes": RUNS - len(FAILING),
    }
    # The prompts were the same in passes and failures: no fingerprint separates them.
    assert not any(f["fact"].startswith("fingerprint=") for f in chat["separating_facts"])


def test_the_human_listing_puts_the_flakiest_test_first(runs: list[Path]) -> None:
    done = cvdiag("flakes", *map(str, runs))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("d4-chat ")
    assert "25%" in lines[1]
    assert any(
        "separates: via: 1.1 squid (in 5 of 5 failures, 1 of 15 passes)" in line for line in lines
    )
    assert lines[-1].startswith("d4-search ")


def test_one_log_with_many_attempts_is_read_as_well(runs: list[Path], tmp_path: Path) -> None:
    joined = tmp_path / "all.log"
    joined.write_text("".join(log.read_text() for log in runs))
    done = cvdiag("flakes", str(joined), "--json")
    assert json.loads(done.stdout)[0]["failures"] == len(FAILING)


@pytest.mark.parametrize(
    ("test_id", "stable"),
    [("d4-chat-run7", "d4-chat"), ("chat-attempt-2", "chat"), ("t-42", "t"), ("plain", "plain"),
     ("d4-x.retry1", "d4-x"), ("123", "123")],
)  # fmt: skip
def test_the_stable_part_drops_the_run_number(test_id: str, stable: str) -> None:
    assert stable_part(test_id) == stable


def test_junit_names_the_tests_and_says_which_attempts_passed(
    runs: list[Path], tmp_path: Path
) -> None:
    # One JUnit file per run: a flaky run (failed, then passed on a retry that forwarded the
    # search story's id) where the log failed, a plain pass elsewhere. The JUnit outcome decides,
    # and stories no test forwarded are left out.
    files = []
    for number in range(RUNS):
        chat, search = f"d4-chat-run{number}", f"d4-search-run{number}"
        if number in FAILING:
            case = ("chat streams", "passed", [search], [("flakyFailure", chat)])
        else:
            case = ("chat streams", "passed", [chat], [])
        files.append(str(junit.playwright(tmp_path / f"results-{number}.xml", [case])))
    done = cvdiag("flakes", *map(str, runs), "--json", "--junit", *files)
    assert done.returncode == 0, done.stderr
    [test] = json.loads(done.stdout)
    assert test["test"] == "chat.spec.ts::chat streams"
    assert (test["attempts"], test["failures"]) == (RUNS + len(FAILING), len(FAILING))
    assert test["separating_facts"][0]["fact"] == "via: 1.1 squid"


def test_failures_read_again_one_by_one_or_together_are_classed_alike(
    runs: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # One log with five failing attempts: each searched for alone, then all read in one pass.
    joined = tmp_path / "all.log"
    joined.write_text("".join(log.read_text() for log in runs))
    said = []
    for alone in (flaking.SEARCHED_ALONE, 0):
        monkeypatch.setattr(flaking, "SEARCHED_ALONE", alone)
        assert cli.main(["flakes", str(joined), "--json"]) == 0
        said.append(json.loads(capfd.readouterr().out))
    assert said[0] == said[1]
    [cause] = said[0][0]["causes"]
    assert cause["count"] == len(FAILING)
    assert cause["flap_class"] not in ("healthy", "unknown")


def test_a_background_agent_alone_is_judged_by_its_class(tmp_path: Path) -> None:
    """A run with no request or LLM call (an agent adopted by a background worker) has only its
    class to say whether it passed: its facts are gathered before the class is asked for."""
    log = tmp_path / "background.log"
    configure(Settings(enabled=True, tier=Tier.VERBOSE), sinks=[FileSink(log)])
    try:
        for number in range(3):
            with adopt_test_id(f"d4-nightly-run{number}"), agent_scope("planner"):
                pass
        with (
            contextlib.suppress(RuntimeError),
            adopt_test_id("d4-nightly-run3"),
            agent_scope("planner"),
        ):
            raise RuntimeError("the planner gave up")
        flush()
    finally:
        configure(Settings(), sinks=[MemorySink()])
    result = cvdiag("flakes", str(log), "--json")
    assert result.returncode == 0, result.stderr
    (test,) = json.loads(result.stdout)
    assert (test["test"], test["attempts"], test["failures"]) == ("d4-nightly", 4, 1)
    (cause,) = test["causes"]
    assert cause["flap_class"] == "backend-error"  # the error the scope saw, not a guess
    assert cause["error"] == "RuntimeError: the planner gave up"  # its type and message
    words = cvdiag("flakes", str(log))
    assert "1 backend-error (RuntimeError: the planner gave up)" in words.stdout


def test_a_cause_names_its_error_scrubbed_whatever_the_log_says(tmp_path: Path) -> None:
    """The log is untrusted: a message that kept a key (a hand-made log, another writer) is
    scrubbed again before ``flakes`` prints it; an LLM call's error is named the same way."""
    from tests.support.report import envelope, write

    key = "sk-proj-" + "Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0n"
    envelopes = []
    for number in range(3):
        test_id = f"d4-chat-run{number}"
        envelopes += [
            envelope(test_id, "backend.request.ingress", 0, "r", metadata={"method": "POST",
                     "path": "/chat"}),
            *([envelope(test_id, "backend.error.caught", 5, "e", "r", outcome="err",
                        metadata={"exception_type": "ValueError",
                                  "message_scrubbed": f"bad key {key} for the model"})]
              if number else []),
            envelope(test_id, "backend.response.complete", 9, "c", "r", outcome="ok" if not number
                     else "err", metadata={"http_status": 500 if number else 200}),
        ]  # fmt: skip
    done = cvdiag("flakes", str(write(tmp_path / "runs.log", envelopes)), "--json")
    assert done.returncode == 0, done.stderr
    (test,) = json.loads(done.stdout)
    (cause,) = test["causes"]
    assert cause["count"] == 2
    assert cause["error"].startswith("ValueError: bad key ")
    assert cause["error"].endswith(" for the model")
    assert key not in done.stdout
    assert key[:16] not in done.stdout
