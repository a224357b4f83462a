"""``cvdiag demo`` as a user runs it: a subprocess that ends by itself, shows the five scenarios
with their envelopes, replays and classes, and never shows the fake API key."""

from __future__ import annotations

import os
import subprocess
import sys

from cvdiag.demo import FAKE_API_KEY, SCENARIOS


def test_the_demo_runs_every_scenario_and_classifies_it() -> None:
    # A production-like environment label must not stop the demo's debug tier.
    env = {**os.environ, "SHOWCASE_ENV": "production", "CVDIAG_BACKEND_EMITTER": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
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
    envelopes = [line for line in out.splitlines() if line.startswith("CVDIAG {")]
    assert any('"boundary":"backend.llm.call.heartbeat"' in line for line in envelopes)
    assert any('"boundary":"backend.sse.event"' in line for line in envelopes)
    assert any('"method":"WEBSOCKET"' in line for line in envelopes)
