"""``cvdiag demo`` as a user runs it: a subprocess that ends by itself, shows the five scenarios
with their envelopes, replays and classes, and never shows the fake API key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cvdiag.cli.demo import FAKE_API_KEY, SCENARIOS


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
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", "demo", "--log", "my demo.log"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    suggested = [
        line.strip()[2:] if line.strip().startswith("$ ") else line.strip()
        for line in done.stdout.splitlines()
        if line.strip().startswith(
            ("$ cvdiag ", "cvdiag ls", "cvdiag replay", "cvdiag classify", "cvdiag report")
        )
    ]
    assert len(suggested) >= 2 * len(SCENARIOS) + 4
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
    assert (tmp_path / "cvdiag-demo.html").read_text().startswith("<!doctype html>")
