"""Issue 45's causes from pytest's side, end to end with real parts: the fake provider and a
backend (``tests.support.client_layer_app``, cvdiag's middleware, the instrumented httpx client
under the OpenAI SDK) each run by uvicorn in a process of its own, real nginx in front for the
held stream (buffering and gzip on) and its control (buffering off), real httpx clients with
cvdiag's probe installed (``cvdiag.probe``), and a real pytest process killed mid-request.

One run of every scenario per module; each is then read by ``cvdiag classify`` over the
backend's log and the probe's as two files and as one log, and must name its cause with both
sides' facts (shapes, not numbers); ``cvdiag report`` draws the client's lane.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Imported at collection (as tests/probe/conftest.py says why): an earlier pytester session
# would otherwise leave the clients a second copy of their transports' cores.
import httpcore  # noqa: F401
import httpx
import pytest

from cvdiag.probe import ProbeWriter, install, uninstall
from cvdiag.schema.ids import new_uuid7
from tests.support.client_layers import joined, report, text, verdict
from tests.support.servers import free_port, serve_nginx

ROOT = Path(__file__).resolve().parents[2]
WORDS = "one two three four five six seven eight"  # eight SSE events, 100 ms apart
PROVIDER = f"""
import uvicorn
from examples.fake_provider import FakeProvider
provider = FakeProvider(reply={WORDS!r}, chunk_delay=0.1, stall_limit=10)
uvicorn.run(provider.app, host="127.0.0.1", port={{port}}, log_level="warning")
"""
#: A test of a pytest process of its own, killed while its request is outstanding.
CRASH_TEST = """
import httpx

def test_the_runner_dies_mid_request(cvdiag_test_id):
    with cvdiag_test_id.client(timeout=30) as client:
        client.post("{url}/ask", json={{"message": "[fake:stall=2]"}})
"""


@dataclass
class Run:
    backend: Path
    probe: Path
    one: Path
    ids: dict[str, str] = field(default_factory=dict)
    page: str = ""

    def verdict(self, scenario: str) -> dict[str, Any]:
        return verdict(self.ids[scenario], self.backend, self.probe, self.one)


def _process(
    command: list[str], env: dict[str, str], out: Path, port: int
) -> subprocess.Popen[bytes]:
    with open(out, "ab") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )
    deadline = time.monotonic() + 60
    while True:
        try:  # a connection, no request: the backend's log holds the tests' requests only
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            assert process.poll() is None, out.read_text()[-2000:]
            assert time.monotonic() < deadline, f"{command[-1]} never listened"
            time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM and wait: uvicorn ends its open requests first (a call answered after its client
    left writes its last lines then)."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _scenario(writer: ProbeWriter, name: str, run: Run, go: Any) -> None:
    """One test as pytest's plugin would bracket it: its id, its requests, its outcome."""
    test_id = run.ids[name] = new_uuid7()
    writer.begin_test(f"tests/e2e::{name}")
    outcome = "passed"
    try:
        go({"x-test-id": test_id})
    except (httpx.HTTPError, AssertionError):
        outcome = "failed"
    writer.end_test(outcome)


def _crash(url: str, folder: Path, env: dict[str, str], probe: Path) -> None:
    """A real pytest process with the plugin's probe, SIGKILLed once its request is sent."""
    (folder / "test_crash.py").write_text(CRASH_TEST.format(url=url))
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         f"--cvdiag-probe-log={probe}", "test_crash.py"],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (probe.exists() and b"probe.message.send" in probe.read_bytes()):
        assert process.poll() is None, "the pytest process ended before its request"
        assert time.monotonic() < deadline, "the pytest process never sent its request"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(10)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("client-layer")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    provider_port, backend_port = free_port(), free_port()
    provider = _process(
        [sys.executable, "-c", PROVIDER.format(port=provider_port)],
        env,
        folder / "provider.out",
        provider_port,
    )
    backend_env = {
        **env,
        "CVDIAG_BACKEND_EMITTER": "1",
        "CVDIAG_VERBOSE": "1",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{provider_port}/v1",
        "LLM_TIMEOUT": "3",
    }
    backend_log = folder / "backend.log"
    backend = _process(
        [sys.executable, "-m", "uvicorn", "tests.support.client_layer_app:app",
         "--port", str(backend_port), "--log-level", "warning"],
        backend_env, backend_log, backend_port,
    )  # fmt: skip
    url = f"http://127.0.0.1:{backend_port}"
    run = Run(backend_log, folder / "probe.log", folder / "one.log")
    crash_probe = folder / "crash-probe.log"
    writer = ProbeWriter(run.probe)
    install(writer)
    try:
        with ExitStack() as stack:
            for name in ("nginx-held", "nginx-passed"):
                (folder / name).mkdir()
            held = stack.enter_context(
                serve_nginx(
                    url,
                    folder / "nginx-held",
                    location="proxy_buffering on; gzip on; gzip_min_length 1;"
                    " gzip_types text/event-stream;",
                )
            )
            passed = stack.enter_context(
                serve_nginx(url, folder / "nginx-passed", location="proxy_buffering off;")
            )

            def stream(base: str) -> Any:
                def go(headers: dict[str, str]) -> None:
                    with httpx.Client(headers=headers, timeout=10) as client:
                        events = client.get(f"{base}/stream").text.count("data:")
                    assert events == 9

                return go

            def leave(headers: dict[str, str]) -> None:
                with (
                    httpx.Client(headers=headers, timeout=10) as client,
                    client.stream("GET", f"{url}/stream") as response,
                ):
                    for _ in response.iter_lines():
                        break

            def ask(message: str, timeout: float) -> Any:
                def go(headers: dict[str, str]) -> None:
                    with httpx.Client(headers=headers, timeout=timeout) as client:
                        client.post(f"{url}/ask", json={"message": message}).raise_for_status()

                return go

            _scenario(writer, "healthy", run, stream(url))
            _scenario(writer, "left early", run, leave)
            _scenario(writer, "held by the proxy", run, stream(held))
            _scenario(writer, "proxy passes", run, stream(passed))
            _scenario(writer, "slow llm", run, ask("[fake:stall=2]", 0.5))
            _scenario(writer, "llm never answers", run, ask("[fake:stall]", 6))
            _scenario(writer, "provider error", run, ask("[fake:500]", 6))
            _crash(url, folder, env, crash_probe)
    finally:
        uninstall()
        writer.close()
        _stop(backend)
        _stop(provider)
    # The crashed runner's probe file appended to the probe log: one probe log per run.
    crashed = crash_probe.read_bytes().splitlines(keepends=True)
    run.ids["runner crash"] = next(
        line.split(b'"test_id":"')[1].split(b'"')[0].decode() for line in crashed
    )
    with open(run.probe, "ab") as out:
        out.writelines(crashed)
    joined(run.backend, run.probe, run.one)
    run.page = report(run.backend, run.probe, into=folder / "page.html")
    return run


def test_a_healthy_stream_is_healthy(run: Run) -> None:
    found = run.verdict("healthy")
    assert found["flap_class"] == "healthy", text(found)
    assert found["joined"].startswith("aligned to ±")  # sends and answers bound the offset


def test_a_stream_the_test_left_after_what_it_needed_is_no_failure(run: Run) -> None:
    found = run.verdict("left early")
    assert found["flap_class"] == "healthy", text(found)
    # The client's side (left on purpose, the test passed) and the backend's (it saw it go).
    assert "closed its stream on purpose" in found["reason"]
    assert "the backend saw it leave" in found["reason"]
    assert found["evidence"]["test_outcome"] == "passed"


def test_a_stream_held_by_a_buffering_proxy_is_edge_interference(run: Run) -> None:
    found = run.verdict("held by the proxy")
    assert found["flap_class"] == "edge-interference", text(found)
    reason, evidence = found["reason"], found["evidence"]
    assert re.search(r"the backend sent its first byte at \+\d+ ms and completed", reason)
    assert re.search(r"the client's first event came at \+\d+ ms", reason)
    assert "reached the client at once" in reason
    assert "nginx-proxy" in reason
    assert evidence["client_first_event_ms"] > evidence["backend_first_byte_ms"]


def test_the_same_stream_through_a_proxy_that_passes_it_is_healthy(run: Run) -> None:
    found = run.verdict("proxy passes")
    assert found["flap_class"] == "healthy", text(found)
    assert found["evidence"]["via"] == "1.1 nginx-proxy"


def test_a_client_timeout_under_a_slow_llm_call_that_answered_later(run: Run) -> None:
    found = run.verdict("slow llm")
    assert found["flap_class"] == "slow-first-token", text(found)
    reason, evidence = found["reason"], found["evidence"]
    # The call, how long the client waited (its own timeout), how long the call took.
    assert "the client gave up on POST /ask" in reason
    assert "its own 0.5 s timeout" in reason
    assert "LLM call openai-compatible/fake-model" in reason
    assert re.search(r"the call answered at \+\d+ ms, \d+ms after it began", reason)
    assert evidence["client_timeout_ms"] == 500
    assert evidence["call_took_ms"] > evidence["client_timeout_ms"]
    assert evidence["llm_call"]["answered"] is True


def test_an_llm_call_that_never_answers_keeps_the_backends_class(run: Run) -> None:
    found = run.verdict("llm never answers")
    assert found["flap_class"] == "stalled-backend", text(found)
    assert found["evidence"]["llm_call"]["error_class"] == "ReadTimeout"


def test_a_provider_error_keeps_the_backends_class(run: Run) -> None:
    found = run.verdict("provider error")
    assert found["flap_class"] == "provider-error", text(found)
    assert "HTTP 500" in found["reason"]


def test_a_runner_killed_mid_request_is_a_runner_crash(run: Run) -> None:
    found = run.verdict("runner crash")
    assert found["flap_class"] == "probe-runner-crash", text(found)
    reason = found["reason"]
    assert "never wrote its exit: the test runner died" in reason
    assert "POST /ask sent at" in reason
    assert "the backend then found the client gone" in reason  # the backend's side of it
    assert "+-" not in reason
    assert found["evidence"]["open_requests"] == 1


def test_the_report_draws_the_clients_lane(run: Run) -> None:
    assert "the test (its probe)" in run.page
