"""Every example a command's ``--help`` prints, run as written (issue 47) in a folder holding
the files it names, each a real backend's log (``tests/support/scenarios``) or a JUnit file as
pytest and Playwright write them. An example that ends in a usage error fails here, so a help
text can no longer show a command that does not work.

Two examples need what a test cannot be: ``uvicorn app:app | cvdiag tail`` reads a live server,
here the log the server wrote (``cat app.log``); ``cvdiag tail ... app.log`` follows its file
until stopped, so it is stopped once it has shown the test id's lines."""

from __future__ import annotations

import glob
import gzip
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cvdiag.cli.arguments import COMMANDS
from tests.support import junit
from tests.support.cli import cvdiag
from tests.support.scenarios import backend, renamed, run

PYTEST_JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite
 name="pytest" errors="0" failures="0" skipped="0" tests="2" time="1.2">
<testcase classname="test_chat" name="test_stream" time="0.6"><properties><property
 name="cvdiag_test_id" value="stream-fail"/><property name="cvdiag_failure"
 value="httpx.ReadTimeout: timed out"/></properties></testcase>
<testcase classname="test_chat" name="test_stream" time="0.1"><properties><property
 name="cvdiag_test_id" value="stream-pass"/></properties></testcase>
</testsuite></testsuites>"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the examples name, in one folder."""
    where = tmp_path_factory.mktemp("examples")
    log = where / "app.log"
    with backend(log) as url:
        run(url, log, "t-pass")
        run(url, log, "t-fail", provider="stall", client_timeout=0.5)
        run(url, log, "t-42", provider="stall", client_timeout=0.5)
    (where / "app.log.gz").write_bytes(gzip.compress(log.read_bytes()))
    (where / "run1.log").write_text(renamed(log, "t-pass", "t-42"))
    (where / "run2.log").write_text(renamed(log, "t-fail", "t-42"))
    (where / "backend.log").write_text(
        renamed(log, "t-fail", "stream-fail") + renamed(log, "t-pass", "stream-pass")
    )
    (where / "results.xml").write_text(PYTEST_JUNIT, encoding="utf-8")
    for number, (outcome, source) in enumerate([("passed", "t-pass"), ("failed", "t-fail")], 1):
        (where / f"run-{number}.log").write_text(renamed(log, source, f"chat-{number}"))
        cases = [("chat", outcome, [f"chat-{number}"], [])]
        junit.playwright(where / f"results-{number}.xml", cases)
    return where


def examples(command: str) -> list[str]:
    """The lines under ``example:`` in ``cvdiag COMMAND --help``."""
    done = cvdiag(command, "--help")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("example:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [line.strip() for line in lines if line.strip()]


def test_every_command_shows_an_example() -> None:
    assert all(examples(command) for command in COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_help_example_runs(
    command: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder)
    for example in examples(command):
        producer, _, consumer = example.rpartition("|")
        words = shlex.split(consumer)
        assert words[0] == "cvdiag", example
        # What a shell does with a glob: each file it matches, in order.
        args = [m for w in words[1:] for m in (sorted(glob.glob(w)) if "*" in w else [w]) or [w]]
        if producer:  # a live server piped in: here the log it wrote
            assert producer.strip() == "uvicorn app:app", example
            done = cvdiag(*args, stdin=(folder / "app.log").read_bytes())
        elif command == "tail":
            done = _followed(args, "t-42")
        else:
            done = cvdiag(*args)
        allowed = (0, 1) if command == "diff" else (0,)  # diff: 1 when the stories differ
        assert done.returncode in allowed, f"{example}\n{done.stderr}"
        assert "error" not in done.stderr, f"{example}\n{done.stderr}"
        assert done.stdout or "wrote" in done.stderr, example


def _followed(args: list[str], test_id: str) -> subprocess.CompletedProcess[str]:
    """``cvdiag tail`` on a file follows it: stopped once it showed ``test_id``'s lines."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cvdiag", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        seen.append(line)
        if test_id in line and "ABORTED" in line:  # its story's last line: all shown
            break
    process.terminate()
    out, err = process.communicate(timeout=30)
    return subprocess.CompletedProcess(args, 0, "".join(seen) + out, err)


def test_a_wrong_form_names_every_form(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)
    forms = ("ID-A ID-B LOG...", "ID LOG ID LOG", "LOG#ID LOG#ID", "with --junit XML a test name")
    for args, said in [
        (["backend.log", "--junit", "results.xml"], "no test named"),
        (["t-42", "app.log"], "give two stories, not 1"),
        (["t-42", "t-pass"], "no log given"),
    ]:
        done = cvdiag("diff", *args)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"cvdiag: error: diff: {said}: "), line
        assert all(form in line for form in forms), line
    # Given JUnit files and no name, it names the flaky tests it could compare.
    done = cvdiag("diff", "backend.log", "--junit", "results.xml")
    assert "(flaky in results.xml: test_chat::test_stream)" in done.stderr
    # One JUnit file per --junit: the log after it is a log, whatever the order.
    done = cvdiag("diff", "--junit", "results.xml", "backend.log", "test_chat.py::test_stream")
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("a  stream-pass  healthy\nb  stream-fail  ")
