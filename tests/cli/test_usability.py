"""The command line used on real logs: options anywhere, help, errors naming their command,
case-folded and repeated filters, ``ls``, colour and NO_COLOR, terminal safety, lines set aside,
and ``tail`` on a file and on a pipe (the live pipe from a real server is in
tests/cli/test_tail_live.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from cvdiag.cli import arguments
from tests.support.cli import cvdiag
from tests.support.stories import STORIES, Story, client_abort, healthy, stalled, write_log


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("usability") / "app.log"
    write_log(path, [make() for make in STORIES.values()])
    return path


def _json(result: subprocess.CompletedProcess[str]) -> object:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# --- options anywhere, help, errors -----------------------------------------------------------


@pytest.mark.parametrize(
    "order",
    [
        ("replay", "t-healthy", "--json", "{log}"),
        ("replay", "--json", "t-healthy", "{log}"),
        ("replay", "t-healthy", "{log}", "--json"),
        ("--color", "never", "replay", "t-healthy", "{log}", "--json"),
    ],
)
def test_options_stand_anywhere(log: Path, order: tuple[str, ...]) -> None:
    data = _json(cvdiag(*(w.format(log=log) for w in order)))
    assert isinstance(data, dict)
    assert data["test_id"] == "t-healthy"


def test_grep_filters_after_the_file(log: Path) -> None:
    result = cvdiag("grep", str(log), "--test-id", "t-abort", "--boundary", "backend.sse.aborted")
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 1


@pytest.mark.parametrize("command", list(arguments.COMMANDS))
def test_every_command_has_a_description_and_an_example(command: str) -> None:
    result = cvdiag(command, "--help")
    assert result.returncode == 0
    assert "example:" in result.stdout
    assert f"cvdiag {command}" in result.stdout.split("example:")[1]
    description = result.stdout.split("\n\n")[1]
    assert len(description) > 30


def test_errors_name_their_command(log: Path, tmp_path: Path) -> None:
    for args, command in [
        (("replay", "t-nothing", str(log)), "replay"),
        (("classify", "t-nothing", str(log)), "classify"),
        (("stats", str(tmp_path / "none.log")), "stats"),
        (("ls", str(tmp_path / "none.log")), "ls"),
        (("tail", "--no-follow", str(tmp_path / "none.log")), "tail"),
    ]:
        result = cvdiag(*args)
        assert result.returncode in (1, 2)
        assert result.stderr.startswith(f"cvdiag: error: {command}: "), result.stderr
        assert result.stderr.count("\n") == 1
        assert "Traceback" not in result.stderr


def test_filters_case_fold_and_repeat_as_either(log: Path) -> None:
    upper = cvdiag("grep", "--slug", "CHAT", "--outcome", "ERR", "--json", str(log))
    lower = cvdiag("grep", "--slug", "chat", "--outcome", "err", "--json", str(log))
    assert upper.stdout == lower.stdout
    assert json.loads(upper.stdout)
    both = _json(
        cvdiag("grep", "--test-id", "T-ABORT", "--test-id", "t-healthy", "--json", str(log))
    )
    assert isinstance(both, list)
    ids = {e["test_id"] for e in both}
    assert ids == {"t-abort", "t-healthy"}
    assert len(both) == len(client_abort().envelopes) + len(healthy().envelopes)
    outcomes = _json(cvdiag("grep", "--outcome", "err", "--outcome", "timeout", "--json", str(log)))
    assert isinstance(outcomes, list)
    assert {e["outcome"] for e in outcomes} == {"err"}


# --- ls -------------------------------------------------------------------------------------------


def test_ls_lists_every_test_id_with_its_class(log: Path) -> None:
    rows = _json(cvdiag("ls", "--json", str(log)))
    assert isinstance(rows, list)
    assert {r["test_id"]: r["flap_class"] for r in rows} == {
        make().test_id: name for name, make in STORIES.items()
    }
    first = [r["first_seen"] for r in rows]
    assert first == sorted(first)
    abort = next(r for r in rows if r["test_id"] == "t-abort")
    assert abort["status"].startswith("aborted")
    assert abort["requests"] == 1
    text = cvdiag("ls", "--color", "never", str(log))
    assert text.returncode == 0
    assert "t-stalled" in text.stdout
    assert "stalled-backend" in text.stdout
    assert len(text.stdout.splitlines()) == len(STORIES) + 1


def test_ls_filters_by_class_failure_and_time(log: Path) -> None:
    failed = _json(cvdiag("ls", "--failed", "--json", str(log)))
    assert isinstance(failed, list)
    assert "t-healthy" not in {r["test_id"] for r in failed}
    assert len(failed) == len(STORIES) - 1
    stalled_only = _json(
        cvdiag("ls", str(log), "--class", "STALLED-BACKEND", "--class", "client-abort", "--json")
    )
    assert isinstance(stalled_only, list)
    assert {r["test_id"] for r in stalled_only} == {"t-stalled", "t-abort"}
    none = cvdiag("ls", "--since", "2030-01-01", str(log))
    assert (none.returncode, none.stdout) == (1, "")


# --- colour and terminal safety -------------------------------------------------------------


def _tty_run(*args: str, env: dict[str, str]) -> str:
    """Run cvdiag with stdout on a pseudo-terminal; its output, as bytes decoded."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cvdiag", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


def test_colour_on_a_terminal_never_in_a_pipe_and_no_color_wins(log: Path) -> None:
    env = {"NO_COLOR": "", "FORCE_COLOR": "", "TERM": "xterm"}
    on_tty = _tty_run("classify", "t-stalled", str(log), env=env)
    assert "\x1b[" in on_tty
    assert "\x1b[" not in _tty_run("classify", "t-stalled", str(log), env={**env, "NO_COLOR": "1"})
    assert "\x1b[" not in _tty_run("classify", "t-stalled", str(log), "--color=never", env=env)
    piped = cvdiag("classify", "t-stalled", str(log))
    assert "\x1b[" not in piped.stdout
    forced = cvdiag("classify", "t-stalled", str(log), "--color", "always")
    assert "\x1b[31" in forced.stdout


def test_control_characters_from_a_log_are_shown_escaped(tmp_path: Path) -> None:
    story = Story("evil", slug="chat")
    story.ingress()
    story.error(3, exception_type="Bad\x1b[31mRed\x1b]0;owned\x07\u202eTitle")
    story.complete(5, status=500, outcome="err", events=0)
    for env in story.envelopes:
        env["slug"] = "x\x1b[31my"
    path = tmp_path / "evil.log"
    write_log(path, [story], noise=False)
    with path.open("a") as out:
        out.write("host says \x1b]0;retitled\x07 hello\n")
    for args in (
        ("replay", "evil"),
        ("classify", "evil"),
        ("ls",),
        ("stats",),
        ("tail", "--no-follow", "-n", "100"),
    ):
        result = cvdiag(*args, str(path), "--color", "always")
        assert result.returncode == 0, (args, result.stderr)
        painted = result.stdout.replace("\x1b[0m", "")
        for code in ("\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[35m"):
            painted = painted.replace(code, "")
        painted = painted.replace("\x1b[31;1m", "").replace("\x1b[1;31m", "")
        assert not any(ord(c) < 32 and c != "\n" for c in painted), (args, painted)
        assert "\x07" not in result.stdout
        assert "\u202e" not in result.stdout
        assert "\\x1b" in result.stdout or args in (("stats",), ("ls",)), args


# --- lines you can trust --------------------------------------------------------------------


def test_envelopes_after_other_text_are_set_aside_and_counted(tmp_path: Path) -> None:
    real, forged = healthy("real"), healthy("forged")
    path = tmp_path / "glued.log"
    lines = real.lines() + [f"host log 0 {line}" for line in forged.lines()]
    lines.append(f"printed{real.lines()[0]}")
    path.write_text("\n".join(lines) + "\n")
    aside = len(forged.lines()) + 1
    grep = cvdiag("grep", "--json", str(path))
    assert {e["test_id"] for e in json.loads(grep.stdout)} == {"real"}
    assert f"grep: {aside} line(s) hold CVDIAG {{ after other text" in grep.stderr
    assert cvdiag("replay", "forged", str(path)).returncode == 1
    validate = cvdiag("validate", str(path))
    assert validate.returncode == 0
    assert f"{aside} lines set aside" in validate.stdout
    assert validate.stdout.count("set aside") == aside + 1
    strict = cvdiag("validate", "--strict", str(path))
    assert strict.returncode == 1


# --- tail on a file and a pipe ----------------------------------------------------------------


def test_tail_renders_envelopes_and_passes_host_lines(log: Path) -> None:
    result = cvdiag("tail", "--no-follow", "-n", "1000", str(log), "--color", "never")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert any("INFO:" in line for line in lines)
    aborted = [line for line in lines if "ABORTED" in line]
    assert aborted
    assert all(" ! " in line for line in aborted)
    assert all(len(line) < 400 for line in lines)
    only = cvdiag(
        "tail", "--no-follow", "-n", "1000", str(log), "--test-id", "t-stalled", "--tier", "default"
    )
    kept = only.stdout.splitlines()
    assert kept
    assert all("t-stalled" in line for line in kept)
    assert not any("llm." in line for line in kept)


def test_tail_reads_a_pipe_to_its_end(log: Path) -> None:
    result = cvdiag("tail", "--color", "never", stdin=log.read_bytes())
    assert result.returncode == 0
    assert sum("t-healthy" in line for line in result.stdout.splitlines()) == len(
        healthy().envelopes
    )


def test_tail_n_0_shows_none_of_what_the_file_already_holds(log: Path) -> None:
    """``-n 0`` starts at the end: nothing already written is shown (following a file from
    there is the test below, which starts at its last line so that no sleep decides the order)."""
    result = cvdiag("tail", "--no-follow", "-n", "0", str(log), "--color", "never")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert cvdiag("tail", "--no-follow", "-n", "1", str(log), "--color", "never").stdout != ""


def test_tail_follows_a_growing_file(tmp_path: Path) -> None:
    """No sleep decides the order: tail shows the file's last line once it has reached the end,
    and only then is the log appended to (a busy machine once started tail after the append,
    and ``-n 0`` then waited for lines already behind it)."""
    path = tmp_path / "live.log"
    path.write_text("old line\n" + stalled("ready").lines()[-1] + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cvdiag", "tail", str(path), "-n", "1", "--color", "never"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        shown = proc.stdout.readline().decode()  # tail is at the end of the file
        with path.open("a") as out:
            for line in stalled("grow").lines():
                out.write(line + "\n")
                out.flush()
        seen = [proc.stdout.readline().decode() for _ in stalled("grow").envelopes]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "ready" in shown
    assert all("grow" in line for line in seen)
    assert any("ABORTED" in line for line in seen)
    assert not any("old line" in line for line in [shown, *seen])


def test_a_repeated_test_id_in_records_means_either(log: Path) -> None:
    found = orjson.loads(
        cvdiag("grep", "--json", "--test-id", "t-error", "--test-id", "t-empty", str(log)).stdout
    )
    assert {e["test_id"] for e in found} == {"t-error", "t-empty"}


def test_ls_times_a_default_tier_request_from_its_start(tmp_path: Path) -> None:
    """At the default tier a request's only envelope may be its terminal: its duration comes
    from that terminal's ``duration_ms``, not from the span of one envelope (0 ms)."""
    story = Story("lone-completion")
    story.complete(22)
    log = tmp_path / "default.log"
    write_log(log, [story], noise=False)
    (row,) = _json(cvdiag("ls", "--json", str(log)))
    assert row["duration_ms"] == 22
