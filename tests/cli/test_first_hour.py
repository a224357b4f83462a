"""The rough edges a newcomer hits in the first hour with ``cvdiag`` (issue 27): arguments given
the other way round, options before the command, ``cvdiag help`` and "did you mean", test ids
as the test sent them, a full disk, a file named twice, a binary file, a long test id in
``tail``, and the help of ``--test-id`` and ``--class``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cvdiag.cli import main
from cvdiag.diagnosis.classes import CLASSES
from cvdiag.schema.ids import adopt_test_id
from tests.support.cli import cvdiag
from tests.support.stories import STORIES, client_abort, healthy, write_log

#: A minted test id: 36 characters, past the 20 of ``tail``'s column, where it is cut.
UUID = "01a20176-2ad5-77a3-aa3d-9a8c5a78b448"
#: What a test may send as ``x-test-id``; the middleware stores ``mytest1``.
SENT = "My Test #1"


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("first-hour") / "app.log"
    stories = [make() for make in STORIES.values()]
    write_log(path, [*stories, healthy(adopt_test_id(SENT)), client_abort(UUID)])
    return path


@pytest.fixture
def here(log: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The log's folder as the working directory, where a user names ``app.log``."""
    monkeypatch.chdir(log.parent)
    return log


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    """``cvdiag ARGV`` in this process: the exit code, stdout, and stderr's lines."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def one_error(err: list[str], *words: str) -> None:
    assert len(err) == 1, err
    assert err[0].startswith("cvdiag: error: "), err
    for word in words:
        assert word in err[0], err


# --- 1. TEST_ID and FILE given the other way round ------------------------------------------


@pytest.mark.parametrize("command", ["replay", "classify"])
def test_a_log_given_as_the_test_id_is_taken_the_other_way_round(
    capsys: pytest.CaptureFixture[str], here: Path, command: str
) -> None:
    code, out, err = run(capsys, command, "app.log", "t-healthy", "--json")
    assert code == 0, err
    assert json.loads(out)["test_id"] == "t-healthy"
    assert err == [
        f"cvdiag: warning: {command}: app.log is a file and t-healthy is not:"
        f" read as 'cvdiag {command} t-healthy app.log'"
    ]


def test_a_test_id_that_names_a_file_is_kept_when_every_file_exists(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    # Both words name files: nothing says the user swapped them, so they are read as given.
    code, _, err = run(capsys, "replay", "app.log", "app.log")
    assert code == 1
    one_error(err, "no envelope with test id app.log")


def test_a_log_alone_is_not_taken_for_a_test_id(
    capsys: pytest.CaptureFixture[str], here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cvdiag.cli.opening._interactive", lambda: True)
    code, _, err = run(capsys, "classify", "app.log")
    assert code == 2
    one_error(err, "classify: app.log is a file, not a test id: give TEST_ID first")


# --- 2. options before the command ----------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("--json", "ls", "{log}"),
        ("--json", "--test-id", "t-abort", "ls", "{log}"),
        ("--color", "never", "--json", "ls", "--test-id", "t-abort", "{log}"),
        ("--first-token-timeout", "100", "--json", "ls", "{log}"),
    ],
)
def test_options_before_the_command_are_the_commands(
    capsys: pytest.CaptureFixture[str], log: Path, argv: tuple[str, ...]
) -> None:
    code, out, err = run(capsys, *(word.format(log=log) for word in argv))
    assert code == 0, err
    rows = {row["test_id"]: row["flap_class"] for row in json.loads(out)}
    assert "t-abort" in rows
    if "--first-token-timeout" in argv:  # its first byte came after 75 s
        assert rows["t-slow"] == "healthy"


def test_version_and_help_still_work_before_a_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith("cvdiag ")
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "commands:" in out
    code, out, _ = run(capsys, "--help", "ls")
    assert code == 0
    assert out.startswith("usage: cvdiag ls")


# --- 3. cvdiag help, and "did you mean" -----------------------------------------------------


def test_help_lists_the_commands_and_describes_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "help")
    assert (code, err) == (0, [])
    assert "commands:" in out
    assert "  help " in out
    code, out, err = run(capsys, "help", "classify")
    assert (code, err) == (0, [])
    assert out.startswith("usage: cvdiag classify")
    assert "example:" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("lss", "x.log"), ("unknown command 'lss': did you mean 'ls'?", "grep")),
        (("help", "replya"), ("unknown command 'replya': did you mean 'replay'?",)),
        (("ls", "--jsn", "x.log"), ("ls: unrecognized arguments: --jsn (did you mean --json?)",)),
        (("grep", "--test-idd", "t-1", "x.log"), ("(did you mean --test-id?)",)),
        (("frobnicate",), ("unknown command 'frobnicate' (commands: grep",)),
    ],
)
def test_a_misspelt_command_or_option_gets_a_suggestion_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], words: tuple[str, ...]
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    one_error(err, *words)


# --- 4. test ids as the test sent them ------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("replay", SENT, "{log}"),
        ("classify", SENT, "{log}"),
        ("grep", "--test-id", SENT, "{log}"),
        ("ls", "--test-id", SENT, "{log}"),
        ("tail", "--no-follow", "-n", "1000", "--test-id", SENT, "{log}"),
        ("report", "--test-id", SENT, "-o", "{out}", "{log}"),
        ("replay", UUID.upper(), "{log}"),
    ],
)
def test_a_test_id_is_normalised_as_the_middleware_adopts_it(
    capsys: pytest.CaptureFixture[str], log: Path, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    page = tmp_path / "page.html"
    code, out, err = run(capsys, *(word.format(log=log, out=page) for word in argv))
    assert code == 0, err
    expected = UUID if UUID.upper() in argv else "mytest1"
    assert expected in (page.read_text() if argv[0] == "report" else out)


def test_a_credential_sent_as_a_test_id_finds_its_placeholder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The middleware scrubs an id before keeping it: one holding a key is stored as its
    # placeholder, which is what the id the test sent must find.
    sent = "api_key=sk-test-12345"
    path = tmp_path / "secret.log"
    write_log(path, [healthy(adopt_test_id(sent))])
    code, out, err = run(capsys, "grep", "--test-id", sent, str(path))
    assert code == 0, err
    assert adopt_test_id(sent).startswith("redacted-")
    assert adopt_test_id(sent) in out


@pytest.mark.parametrize("word", ["#!?", "", "   "])
def test_what_cannot_be_a_test_id_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], log: Path, word: str
) -> None:
    code, _, err = run(capsys, "replay", word, str(log))
    assert code == 2
    one_error(err, "replay: argument TEST_ID:", "is not a test id", "mints a UUID")


# --- 5. stdout that cannot be written -------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "argv",
    [
        ("ls", "{log}"),
        ("grep", "{log}"),
        ("grep", "--test-id", "t-healthy", "{log}"),
        ("replay", "t-healthy", "{log}"),
        ("classify", "t-healthy", "{log}"),
        ("stats", "{log}"),
        ("validate", "{log}"),
        ("tail", "--no-follow", "{log}"),
        ("report", "-o", "-", "{log}"),
        ("--version",),
        ("help",),
        ("ls", "--help"),
    ],
)
@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_full_disk_is_one_error_line_and_exit_2(
    log: Path, argv: tuple[str, ...], unbuffered: str
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [sys.executable, "-m", "cvdiag", *(word.format(log=log) for word in argv)],
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
            env=env,
            timeout=60,
        )
    err = done.stderr.decode().splitlines()
    assert done.returncode == 2, err
    one_error(err, "cannot write")
    assert "no space left on device" in err[0].lower()
    if argv[0] not in ("--version", "help", "report"):  # report says "cannot write stdout"
        assert err[0].startswith(f"cvdiag: error: {argv[0]}: cannot write output: "), err


# --- 6. a file named twice ------------------------------------------------------------------


def _envelopes(capsys: pytest.CaptureFixture[str], *files: str) -> tuple[int, int, list[str]]:
    """(envelopes counted by stats, lines printed by grep, stderr of the last)."""
    code, out, _ = run(capsys, "stats", "--json", *files)
    assert code == 0
    counted = json.loads(out)["envelopes"]
    code, out, err = run(capsys, "grep", *files)
    assert code == 0
    return counted, len(out.splitlines()), err


def test_a_file_named_twice_is_read_once(capsys: pytest.CaptureFixture[str], here: Path) -> None:
    Path("link.log").unlink(missing_ok=True)
    Path("link.log").symlink_to("app.log")
    once = _envelopes(capsys, "app.log")
    assert once[2] == []
    for other in ("app.log", "./app.log", str(here), "link.log"):
        counted, printed, err = _envelopes(capsys, "app.log", other)
        assert (counted, printed) == once[:2]
        assert err == [f"cvdiag: warning: grep: {other} is app.log again: read once"]
    code, out, _ = run(capsys, "ls", "--json", "app.log", "link.log")
    rows = {row["test_id"]: row for row in json.loads(out)}
    assert (code, rows["t-healthy"]["requests"]) == (0, 1)
    code, out, _ = run(capsys, "replay", "--json", "t-healthy", "app.log", "./app.log")
    assert (code, len(json.loads(out)["events"])) == (0, len(healthy().envelopes))


# --- 7. a binary file -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A program's first 64 KiB, as ``cvdiag tail /bin/ls`` would read."""
    path = tmp_path_factory.mktemp("binary") / "program"
    with open(sys.executable, "rb") as program:
        path.write_bytes(program.read(1 << 16))
    return path


@pytest.mark.parametrize("packed", [False, True])
def test_tail_refuses_a_binary_file_in_one_line(
    capsys: pytest.CaptureFixture[str], binary: Path, tmp_path: Path, packed: bool
) -> None:
    path = binary
    if packed:
        path = tmp_path / "program.gz"
        path.write_bytes(gzip.compress(binary.read_bytes()))
    code, out, err = run(capsys, "tail", "--no-follow", str(path))
    assert (code, out) == (2, "")
    assert err == [f"cvdiag: error: tail: {path} is not a text log (binary data)"]


def test_tail_refuses_binary_data_on_stdin(binary: Path) -> None:
    done = cvdiag("tail", stdin=binary.read_bytes())
    assert done.returncode == 2
    assert done.stderr == "cvdiag: error: tail: stdin is not a text log (binary data)\n"
    assert done.stdout == ""


def test_a_log_after_a_run_of_nul_bytes_is_still_a_log(
    capsys: pytest.CaptureFixture[str], log: Path, tmp_path: Path
) -> None:
    # copytruncate under a writer that kept its offset: the log starts with a hole of NULs.
    path = tmp_path / "truncated.log"
    path.write_bytes(b"\0" * 20_000 + log.read_bytes())
    code, out, err = run(capsys, "tail", "--no-follow", "-n", "2", str(path))
    assert (code, err) == (0, [])
    assert "complete" in out
    code, out, err = run(capsys, "ls", str(path))
    assert (code, err) == (0, [])


def test_a_short_line_of_terminal_controls_is_text() -> None:
    # A server's first line may set the terminal's title (ESC ] ... BEL): a pipe's first bytes
    # are few, and such a line is not binary data.
    done = cvdiag("tail", stdin=b"\x1b]0;my server\x07\n")
    assert (done.returncode, done.stderr) == (0, "")
    assert "\\x1b]0;my server\\x07" in done.stdout


def test_tail_on_a_damaged_gzip_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "damaged.gz"
    path.write_bytes(b"\x1f\x8b" + b"\x00" * 50)
    code, out, err = run(capsys, "tail", "--no-follow", str(path))
    assert (code, out) == (2, "")
    one_error(err, f"tail: cannot read {path}: ")


@pytest.mark.parametrize("command", ["grep", "ls", "stats", "validate"])
def test_other_commands_say_a_binary_file_holds_no_envelope(
    capsys: pytest.CaptureFixture[str], binary: Path, command: str
) -> None:
    code, out, err = run(capsys, command, str(binary))
    assert code == 1
    assert err[0] == f"cvdiag: warning: {command}: {binary} is not a text log (binary data)"
    if command != "grep":  # grep, like grep(1), says nothing more when nothing matched
        assert err[1:] == [f"cvdiag: error: {command}: no CVDIAG envelope in {binary}"]
    assert "\\x" not in out


# --- 8. a long test id in tail --------------------------------------------------------------


def test_fitted_cuts_a_long_id_in_its_middle() -> None:
    from cvdiag.cli.tail import fitted

    assert fitted("t-healthy") == "t-healthy"
    assert fitted("x" * 20) == "x" * 20
    assert fitted(UUID) == "01a20176-…8c5a78b448"
    assert all(len(fitted("y" * n)) == 20 for n in range(20, 130))


def test_tail_keeps_its_columns_with_a_minted_test_id(
    capsys: pytest.CaptureFixture[str], log: Path
) -> None:
    code, out, err = run(capsys, "tail", "--no-follow", "--envelopes-only", "-n", "200", str(log))
    assert (code, err) == (0, [])
    lines = out.splitlines()
    assert any(line[15:35] == "01a20176-…8c5a78b448" for line in lines)
    # time (12), mark, test id (20): the boundary always starts in column 36
    assert {line[35] for line in lines} == {" "}
    assert " " not in {line[36] for line in lines}
    names = {line[36:49].rstrip() for line in lines}
    assert names <= {"ingress", "agent.enter", "agent.exit", "llm.start", "llm.heartbeat"} | {
        "llm.response",
        "first_byte",
        "event",
        "ABORTED",
        "complete",
        "ERROR",
    }


# --- 9. the help of --test-id and --class ---------------------------------------------------


def _help(capsys: pytest.CaptureFixture[str], command: str) -> str:
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    return " ".join(out.split())


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("grep", "--test-id ID only the envelopes of this test id, normalised"),
        ("tail", "--test-id ID only the envelopes of this test id, normalised"),
        ("ls", "--test-id ID only this test id, normalised"),
        ("report", "--test-id ID report only this test id, normalised"),
    ],
)
def test_test_id_help_reads_as_a_sentence(
    capsys: pytest.CaptureFixture[str], command: str, says: str
) -> None:
    text = _help(capsys, command)
    assert says in text
    assert "given of this" not in text


def test_class_help_lists_the_classes(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "ls")
    assert f"--class C only the test ids of class C: {', '.join(CLASSES)}; repeat" in text
