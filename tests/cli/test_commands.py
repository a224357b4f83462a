"""Every command as a subprocess on hand-written logs: output, filters, inputs (gzip, stdin,
collector prefixes), malformed lines, and every documented exit code with its one-line error."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from cvdiag import cli
from tests.support.cli import cvdiag
from tests.support.stories import STORIES, Story, healthy, stalled, write_log


def one_error(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """The documented failure shape: the exit code and one ``cvdiag: error:`` line, no trace."""
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cvdiag: error: ")
    for word in words:
        assert word in lines[0]
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("logs")
    paths = {name: root / f"{name}.log" for name in ("all", "a", "b", "docker", "bad", "big")}
    write_log(paths["all"], [make() for make in STORIES.values()])
    write_log(paths["a"], [healthy("split")], noise=False)
    late = Story("split", start_ms=100.0, mono0=9 * 10**12)
    late.emit("backend.sse.event", 0.0, metadata={"sequence_num": 99})
    write_log(paths["b"], [late, stalled("other")], noise=False)
    paths["docker"].write_text(
        "".join(f"web-1  | {line}\n" for line in healthy("dock").lines())
        + "".join(f"2026-11-22T03:00:00.0000000Z {line}\n" for line in stalled("ci").lines())
    )
    lines = healthy("mixed").lines()
    paths["bad"].write_text(
        "\n".join(
            [
                lines[0],
                "CVDIAG {broken",
                lines[1].replace('"outcome":"info"', '"outcome":"maybe"'),
                'CVDIAG {"test_id": "mixed"}',
                *lines[2:],
            ]
        )
        + "\n"
    )
    paths["gz"] = root / "all.log.gz"
    paths["gz"].write_bytes(gzip.compress(paths["all"].read_bytes()))
    paths["cut"] = root / "cut.log.gz"
    paths["cut"].write_bytes(paths["gz"].read_bytes()[:-40])
    big = Story("big")
    big.ingress()
    big.events(1, 20_000, step=0.01)
    write_log(paths["big"], [big], noise=False)
    return paths


# --- grep -----------------------------------------------------------------------------------


def test_grep_by_test_id_prints_re_readable_envelope_lines(logs: dict[str, Path]) -> None:
    result = cvdiag("grep", "--test-id", "t-stalled", str(logs["all"]))
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) == len(STORIES["stalled-backend"]().envelopes)
    for line in lines:
        assert line.startswith("CVDIAG {")
        assert orjson.loads(line[7:])["test_id"] == "t-stalled"
    again = cvdiag("grep", "-", stdin=result.stdout.encode())
    assert again.stdout == result.stdout


def test_grep_filters_combine(logs: dict[str, Path]) -> None:
    path = str(logs["all"])
    beats = cvdiag("grep", "--boundary", "backend.llm.call.heartbeat", "--json", path)
    data = json.loads(beats.stdout)
    assert {e["boundary"] for e in data} == {"backend.llm.call.heartbeat"}
    assert len(data) == 3 + 7  # stalled and slow stories
    llm = json.loads(cvdiag("grep", "--boundary", "backend.llm.*", "--json", path).stdout)
    assert {e["boundary"] for e in llm} == {
        "backend.llm.call.start",
        "backend.llm.call.heartbeat",
        "backend.llm.call.response",
    }
    errs = json.loads(
        cvdiag(
            "grep", "--outcome", "err", "--boundary", "backend.sse.aborted", "--json", path
        ).stdout
    )
    assert sorted(e["test_id"] for e in errs) == ["t-abort", "t-stalled"]
    window = json.loads(
        cvdiag(
            "grep",
            "--since",
            "2026-11-22T03:00:30Z",
            "--until",
            "2026-11-22T03:01:10",
            "--json",
            path,
        ).stdout
    )
    assert window
    assert all("2026-11-22T03:00:30" <= e["ts"] < "2026-11-22T03:01:10" for e in window)
    assert cvdiag("grep", "--slug", "nope", path).returncode == 1


def test_grep_without_a_match_exits_1_silently(logs: dict[str, Path]) -> None:
    result = cvdiag("grep", "--test-id", "absent", str(logs["all"]))
    assert (result.returncode, result.stdout, result.stderr) == (1, "", "")
    as_json = cvdiag("grep", "--test-id", "absent", "--json", str(logs["all"]))
    assert (as_json.returncode, as_json.stdout) == (1, "[]\n")


def test_inputs_are_merged_by_time(logs: dict[str, Path]) -> None:
    result = cvdiag("grep", "--json", str(logs["b"]), str(logs["a"]))
    data = json.loads(result.stdout)
    assert [e["ts"] for e in data] == sorted(e["ts"] for e in data)
    split = [e for e in data if e["test_id"] == "split"]
    assert split[-1]["metadata"] == {"sequence_num": 99}


def test_collector_prefixes_are_read(logs: dict[str, Path]) -> None:
    result = cvdiag("grep", "--json", str(logs["docker"]))
    data = json.loads(result.stdout)
    assert {e["test_id"] for e in data} == {"dock", "ci"}
    assert len(data) == len(healthy().envelopes) + len(stalled().envelopes)


def test_gzip_stdin_and_plain_agree(logs: dict[str, Path]) -> None:
    plain = cvdiag("stats", "--json", str(logs["all"]))
    packed = cvdiag("stats", "--json", str(logs["gz"]))
    piped = cvdiag("stats", "--json", "-", stdin=logs["gz"].read_bytes())
    implicit = cvdiag("stats", "--json", stdin=logs["all"].read_bytes())
    assert plain.returncode == 0
    assert plain.stdout == packed.stdout == piped.stdout == implicit.stdout


def test_malformed_lines_are_reported_as_file_line_reason_and_skipped(
    logs: dict[str, Path],
) -> None:
    result = cvdiag("grep", str(logs["bad"]))
    assert result.returncode == 0
    # Reading asks only for what the commands use: the odd outcome still reads (validate
    # flags it); the line without JSON and the one without a boundary are skipped.
    assert len(result.stdout.splitlines()) == len(healthy().envelopes)
    # grep does not count lines (it shows none): a bad line is located by its byte offset.
    text = logs["bad"].read_bytes()
    lines = text.split(b"\n")
    at = [sum(len(line) + 1 for line in lines[:n]) for n in range(len(lines))]
    first, second = result.stderr.splitlines()
    assert first.startswith(f"cvdiag: warning: {logs['bad']} byte {at[1]}: invalid JSON: ")
    assert first.endswith("; skipped")
    assert second == (
        f"cvdiag: warning: {logs['bad']} byte {at[3]}: missing field 'boundary'; skipped"
    )
    located = cvdiag("validate", str(logs["bad"])).stdout
    assert f"{logs['bad']}:2: malformed: invalid JSON" in located
    # With a test id, only lines holding it are parsed, so only those are reported.
    by_id = cvdiag("grep", "--test-id", "mixed", str(logs["bad"]))
    assert by_id.stderr.splitlines() == [second]


def test_broken_pipe_is_not_an_error(logs: dict[str, Path]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cvdiag", "grep", str(logs["big"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b"CVDIAG {")
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert err == b""


# --- replay and classify --------------------------------------------------------------------


def test_replay_text_and_json(logs: dict[str, Path]) -> None:
    text = cvdiag("replay", "t-slow", str(logs["all"]))
    assert text.returncode == 0
    assert "├─ backend.agent.enter" in text.stdout
    assert "│     ├─ backend.llm.call.heartbeat" in text.stdout
    data = json.loads(cvdiag("replay", "T-SLOW", str(logs["all"]), "--json").stdout)
    assert set(data) == {"test_id", "events"}
    assert data["test_id"] == "t-slow"
    first = data["events"][0]
    assert first["offset_ms"] == 0
    assert first["boundary"] == "backend.request.ingress"
    assert {"depth", "outcome", "duration_ms", "summary", "metadata", "source"} <= set(first)


def test_replay_of_an_unknown_id_exits_1(logs: dict[str, Path]) -> None:
    one_error(cvdiag("replay", "nobody", str(logs["all"])), 1, "no envelope", "nobody")


@pytest.mark.parametrize("name", ["stalled-backend", "provider-empty", "client-abort"])
def test_classify_json(logs: dict[str, Path], name: str) -> None:
    test_id = STORIES[name]().test_id
    result = cvdiag("classify", test_id, str(logs["all"]), "--json")
    data = json.loads(result.stdout)
    assert data["flap_class"] == name
    assert set(data) == {
        "test_id",
        "flap_class",
        "reason",
        "log_tier",
        "unchecked",
        "caveat",
        "layers",
        "joined",
        "deciding",
        "evidence",
    }
    assert data["layers"] == ["backend"]


def test_classify_text_names_class_reason_and_evidence(logs: dict[str, Path]) -> None:
    result = cvdiag("classify", "t-slow", str(logs["all"]), "--first-token-timeout", "100")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[1] == "class     healthy"
    assert lines[2].startswith("reason    completed ok")
    assert "evidence" in lines
    assert f"({logs['all']}:" in result.stdout


# --- stats and validate ---------------------------------------------------------------------


def test_stats_text(logs: dict[str, Path]) -> None:
    result = cvdiag("stats", "--by-class", str(logs["all"]))
    assert result.returncode == 0
    for word in ("overall", "requests", "aborted", "first byte", "LLM latency", "classes"):
        assert word in result.stdout


def test_validate_passes_a_clean_log(logs: dict[str, Path]) -> None:
    result = cvdiag("validate", str(logs["all"]), str(logs["gz"]))
    assert result.returncode == 0, result.stdout
    count = 2 * sum(len(make().envelopes) for make in STORIES.values())
    assert result.stdout.splitlines()[-1] == (
        f"{count} envelopes: {count} valid, 0 invalid; 0 malformed lines; 0 lines set aside"
    )


def test_validate_fails_on_invalid_envelopes(logs: dict[str, Path]) -> None:
    result = cvdiag("validate", str(logs["bad"]))
    assert result.returncode == 1
    out = result.stdout.splitlines()
    assert out[0].startswith(f"{logs['bad']}:2: malformed: invalid JSON")
    assert out[1].startswith(f"{logs['bad']}:3 backend.agent.enter: outcome: 'maybe'")
    assert out[2].startswith(f"{logs['bad']}:4: ")
    assert "required fields missing: schema_version, trace_id, span_id," in out[2]
    assert out[-1].endswith("2 invalid (schema 2); 1 malformed lines; 0 lines set aside")


def test_nothing_to_read_exits_1(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("just a log line\n")
    for command in ("stats", "validate"):
        one_error(cvdiag(command, str(empty)), 1, "no CVDIAG envelope")


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("frobnicate",), ("unknown command", "frobnicate", "grep")),
        ((), ("a command is required",)),
        (("replay",), ("replay", "required")),
        (("replay", "#!?", "x.log"), ("not a test id",)),
        (("classify", "t", "x.log", "--first-token-timeout", "0"), ("positive",)),
        (("grep", "--boundary", "backend.nope"), ("names no boundary",)),
        (("grep", "--since", "yesterday"), ("ISO-8601",)),
        (("grep", "--outcome", "fine"), ("grep:", "not an outcome")),
        (("ls", "--class", "weird", "x.log"), ("ls:", "not a class")),
        (("tail", "--tier", "loud", "x.log"), ("tail:", "not a tier")),
        (("stats", "-", "-"), ("only once",)),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: tuple[str, ...], words: tuple[str, ...]) -> None:
    one_error(cvdiag(*args), 2, *words)


def test_unreadable_input_exits_2(logs: dict[str, Path], tmp_path: Path) -> None:
    one_error(
        cvdiag("grep", str(tmp_path / "missing.log")), 2, "grep:", "missing.log", "no such file"
    )
    one_error(cvdiag("stats", str(tmp_path)), 2, "is a directory")
    cut = cvdiag("stats", str(logs["cut"]))
    one_error(cut, 2, "cut.log.gz", "ends early")
    garbage = tmp_path / "garbage.gz"
    garbage.write_bytes(b"\x1f\x8b" + b"\x00" * 50)
    one_error(cvdiag("validate", str(garbage)), 2, "garbage.gz")


def test_help_and_version_exit_0() -> None:
    helped = cvdiag("--help")
    assert helped.returncode == 0
    assert "classify" in helped.stdout
    version = cvdiag("--version")
    assert (version.returncode, version.stdout.startswith("cvdiag ")) == (0, True)


def test_an_internal_error_is_one_line_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], logs: dict[str, Path]
) -> None:
    def broken(args: Any) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cli, "_commands", lambda: {"stats": broken})
    assert cli.main(["stats", str(logs["all"])]) == 3
    err = capsys.readouterr().err
    assert err == (
        "cvdiag: error: stats: internal error (ZeroDivisionError: a bug); please report it\n"
    )
