"""The suite's ``cvdiag`` runner (tests/support/cli.py) says what ``python -m cvdiag`` says.

The runner forks each command from a warm interpreter instead of starting a new one; every CLI
test would be testing the runner if that changed anything a user sees. So each case runs both
ways, in the same folder and environment, and stdout, stderr and the exit status must be the
same, byte for byte.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import cli
from tests.support.cli import cvdiag
from tests.support.stories import STORIES, write_log

LOG = "app.log"
CASES = [
    ("--version",),
    ("--help",),
    ("help", "report"),
    ("nope",),
    ("ls", LOG),
    ("ls", "--json", "--failed", LOG),
    ("classify", "t-edge", LOG),
    ("classify", "t-edge", "--json", LOG),
    ("replay", "t-edge", LOG),
    ("stats", "--by-class", LOG),
    ("grep", "--test-id", "t-edge", LOG),
    ("validate", LOG),
    ("report", "-o", "-", LOG),
    ("report", "-o", "page.html", LOG),
    ("tail", "--no-follow", "--color", "always", LOG),
    ("ls", "missing.log"),
    ("ls", "-"),
    ("tail", "--no-follow", "-"),
    ("classify", "t-edge", "-"),
]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a log of every story, the current folder of both runs."""
    write_log(tmp_path / LOG, [make() for make in STORIES.values()])
    monkeypatch.chdir(tmp_path)
    return tmp_path


#: The report's "written" stamp: the clock's second when the page was written, which two runs of
#: the same command need not share.
WRITTEN = re.compile(rb"written \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")


def _same(text: bytes) -> bytes:
    return WRITTEN.sub(b"written (when)", text)


def _real(args: tuple[str, ...], stdin: bytes | None) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: _same(path.read_bytes()) for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("args", CASES, ids=" ".join)
def test_a_forked_run_says_what_a_new_interpreter_says(args: tuple[str, ...], folder: Path) -> None:
    stdin = (folder / LOG).read_bytes() if "-" in args else None
    before = cli.forked_runs
    warm = cvdiag(*args, stdin=stdin)
    assert cli.forked_runs == before + 1  # it did run forked, not as a new interpreter
    written = _files(folder)
    code, out, err = _real(args, stdin)
    assert (warm.returncode, warm.stderr) == (code, err)
    assert _same(warm.stdout.encode()) == _same(out.encode())
    assert _files(folder) == written  # and wrote the same files (report -o page.html)


@pytest.mark.parametrize(
    "env",
    [{"NO_COLOR": "1"}, {"FORCE_COLOR": "1"}, {"TZ": "Asia/Kolkata"}, {"COLUMNS": "40"}],
    ids=lambda env: ",".join(env),
)
def test_the_tests_environment_reaches_the_command(
    env: dict[str, str], folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment is the test's at the time of the run, not the warm interpreter's."""
    cvdiag("--version")  # the warm interpreter starts with the environment before the change
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = ("ls", LOG)
    before = cli.forked_runs
    warm = cvdiag(*args)
    assert cli.forked_runs == before + 1
    assert (warm.returncode, warm.stdout, warm.stderr) == _real(args, None)


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "latin-1"}, {"LC_ALL": "C"}, {"PYTHONUTF8": "0"}],
    ids=lambda env: ",".join(env),
)
def test_what_python_reads_as_it_starts_runs_a_new_interpreter(
    env: dict[str, str], folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment a fork would not honour (the streams' encoding is chosen at start-up)
    runs ``python -m cvdiag`` itself."""
    cvdiag("--version")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = ("grep", "--test-id", "t-edge", LOG)
    before = cli.forked_runs
    warm = cvdiag(*args)
    assert cli.forked_runs == before
    assert (warm.returncode, warm.stdout, warm.stderr) == _real(args, None)


def test_a_command_past_its_time_is_killed_and_the_next_one_runs(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tail`` follows its log until stopped: past the runner's time it is killed, as
    ``subprocess.run`` kills, and the next command still runs forked."""
    monkeypatch.setattr(cli, "TIMEOUT", 1)
    children_before = _children_of_warm()
    with pytest.raises(subprocess.TimeoutExpired):
        cvdiag("tail", LOG)
    assert _children_of_warm() == children_before  # the killed command is gone, not a zombie
    before = cli.forked_runs
    done = cvdiag("--version")
    assert (done.returncode, cli.forked_runs) == (0, before + 1)


def _children_of_warm() -> set[int]:
    warm = cli._Warm.get()
    assert warm is not None
    deadline = time.monotonic() + 10
    while True:
        path = Path(f"/proc/{warm.process.pid}/task/{warm.process.pid}/children")
        children = {int(pid) for pid in path.read_text().split()}
        if not children or time.monotonic() > deadline:
            return children
        time.sleep(0.05)


def test_a_warm_interpreter_that_died_leaves_runs_to_new_interpreters(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cvdiag("--version")
    warm = cli._Warm.get()
    assert warm is not None
    os.kill(warm.process.pid, signal.SIGKILL)
    warm.process.wait()
    try:
        before = cli.forked_runs
        done = cvdiag("ls", LOG)
        assert cli.forked_runs == before
        assert (done.returncode, done.stdout, done.stderr) == _real(("ls", LOG), None)
    finally:
        cli._Warm._current = None  # the next test starts a new one
