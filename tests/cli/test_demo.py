"""``cvdiag demo`` as a user runs it: a subprocess that ends by itself, shows the five scenarios
with their envelopes, replays and classes, and never shows the fake API key."""

from __future__ import annotations

import errno
import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cvdiag.cli.demo import FAKE_API_KEY, SCENARIOS, DemoUnavailable, run
from cvdiag.sinks import FileSink
from cvdiag.sinks.exit_flush import flush_all, live_sinks

_SGR = re.compile("\x1b\\[[0-9;]*m")


def test_the_demo_runs_every_scenario_and_classifies_it(tmp_path: Path) -> None:
    # A production-like environment label must not stop the demo's debug tier.
    env = {**os.environ, "SHOWCASE_ENV": "production", "CVDIAG_BACKEND_EMITTER": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    out = done.stdout
    assert "\x1b" not in out  # a pipe, --color auto: plain
    assert FAKE_API_KEY not in out + done.stderr
    assert "[REDACTED]" in out
    summary = out[out.index("=== summary") :].splitlines()[1:]
    shown = {line.split()[-1] for line in summary if line.strip()[:1].isalpha()}
    for scenario in SCENARIOS:
        assert f"$ cvdiag replay {scenario.test_id}" in out
        row = next(line for line in summary if scenario.test_id in line)
        assert row.split()[-1] == scenario.expected
    assert {"healthy", "slow-first-token", "client-abort", "backend-error"} <= shown
    # stdout is readable: compact lines, no raw envelope; the log holds the envelopes.
    assert not any(line.startswith("CVDIAG {") for line in out.splitlines())
    assert any("llm.heartbeat" in line for line in out.splitlines())
    log = tmp_path / "cvdiag-demo.log"
    envelopes = log.read_text().splitlines()
    assert all(line.startswith("CVDIAG {") for line in envelopes)
    assert any('"boundary":"backend.llm.call.heartbeat"' in line for line in envelopes)
    assert any('"boundary":"backend.sse.event"' in line for line in envelopes)
    assert any('"method":"WEBSOCKET"' in line for line in envelopes)
    assert FAKE_API_KEY not in log.read_text()
    # It ends by writing the log's report page, and says where.
    page = tmp_path / "cvdiag-demo.html"
    assert f"{page}" in out
    html = page.read_text()
    assert FAKE_API_KEY not in html
    for scenario in SCENARIOS:
        assert f'data-id="{scenario.test_id}"' in html
        if scenario.expected != "healthy":  # failed ones are drawn, with the demo's class
            assert f'data-class="{scenario.expected}" aria-label="{scenario.test_id}"' in html


def test_the_commands_the_demo_suggests_read_the_log_it_wrote(tmp_path: Path) -> None:
    # --color always colours it as the other commands colour theirs, even into a pipe.
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", "demo", "--log", "my demo.log", "--color", "always"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b[1m=== 1/5 healthy chat" in done.stdout  # a scenario's title, bold
    assert "\x1b[32m  healthy chat " in done.stdout  # a healthy row of the summary, green
    assert "\x1b[31;1m" in done.stdout  # the error scenario's envelope and class, red
    suggested = [
        line.strip()[2:] if line.strip().startswith("$ ") else line.strip()
        for line in _SGR.sub("", done.stdout).splitlines()
        if line.strip().startswith(
            ("$ cvdiag ", "cvdiag ls", "cvdiag replay", "cvdiag classify", "cvdiag report")
        )
    ]
    assert len(suggested) >= 2 * len(SCENARIOS) + 4
    transcript = _SGR.sub("", done.stdout)
    compared = 0
    (tmp_path / "cvdiag-demo.html").unlink()  # the demo wrote it; the command shown writes it too
    for command in suggested:
        run = subprocess.run(
            f"{sys.executable} -m {command}",
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert run.returncode == 0, (command, run.stderr)
        if command.startswith("cvdiag classify") and f"$ {command}\n" in transcript:
            # The transcript shows what the command prints, not a line of its own.
            printed = [f"  {line}" for line in _SGR.sub("", run.stdout).splitlines()]
            after = transcript.split(f"$ {command}\n", 1)[1].splitlines()
            assert after[: len(printed)] == printed, command
            compared += 1
    assert compared >= len(SCENARIOS)  # each scenario's, and the one suggested again
    assert (tmp_path / "cvdiag-demo.html").read_text().startswith("<!doctype html>")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_log_it_cannot_write_fails_at_once_in_one_line(tmp_path: Path) -> None:
    # It used to spin: /dev/full takes the open, and reads back as endless NULs.
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", "demo", "--log", "/dev/full"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr == "cvdiag: error: demo: cannot write /dev/full: No space left on device\n"
    assert done.stdout == ""  # and it ended: it used to spin until the timeout killed it


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_stdout_it_cannot_write_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "cvdiag", "demo"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr == "cvdiag: error: demo: cannot write output: no space left on device\n"


def test_a_log_that_fills_up_fails_the_demo_and_stops_its_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The log takes the demo's first byte, then the disk fills: the sink counts the lost lines
    # (as it must in a host), and the demo, which would read back a wrong story, stops.
    def full(self: FileSink, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(FileSink, "_write_bytes", full)
    log = tmp_path / "demo.log"
    with pytest.raises(
        DemoUnavailable, match=r"^cannot write .*demo\.log: \d+ envelope\(s\) lost$"
    ):
        run(out=io.StringIO(), log=str(log), report=None)
    assert not [t for t in threading.enumerate() if t.name == "cvdiag-demo-server"]
    # The exit flush's line about the lost lines, said now and checked (never at the suite's
    # exit, where a reader takes it for a failure).
    capsys.readouterr()
    flush_all(timeout=0, sinks=[s for s in live_sinks if getattr(s, "path", None) == str(log)])
    assert "envelopes not written (write failed)" in capsys.readouterr().err


def test_every_missing_dependency_is_named_with_how_to_install_it(tmp_path: Path) -> None:
    missing = "import sys; sys.modules['uvicorn'] = sys.modules['httpx'] = None"
    done = subprocess.run(
        [sys.executable, "-c", f"{missing}; from cvdiag.cli import main; sys.exit(main(['demo']))"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.startswith("cvdiag: error: demo: missing uvicorn, httpx ")
    assert "pip install uvicorn httpx," in line  # only the missing ones: cvdiag is on no index
    assert "pip install 'cvdiag[demo]'" not in line
    assert ".[demo]" in line
    assert not (tmp_path / "cvdiag-demo.log").exists()  # checked before anything is written
