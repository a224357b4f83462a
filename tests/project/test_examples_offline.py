"""``python -m examples NAME`` runs each example offline with one command, as its README says.

Each run is a real subprocess: the example's app.py in a process of its own under uvicorn,
cvdiag switched on by environment variables, the bundled fake provider (or a stand-in OTLP
collector) on loopback, real httpx / websockets clients, the real OpenAI SDK. The log it names
must hold the envelopes of every visit, and every ``cvdiag`` command it prints must succeed on
that log and say what the run said.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

import pytest

from cvdiag.cli import main as cvdiag_main
from examples.__main__ import NAMES, example
from examples.__main__ import main as examples_main
from examples.fake_provider import FakeProvider
from tests.schema_check import assert_valid
from tests.support.examples import OfflineRun, offline_run

Envelope = Mapping[str, Any]

#: What each visit shows off: stated here, not read from the examples, so a changed example
#: or a changed classifier fails this test.
CLASSES = {
    "fastapi_openai": {
        "openai-1-healthy": "healthy",
        "openai-2-provider-500": "provider-error",
        "openai-3-rate-limited": "provider-rate-limited",
        "openai-4-stalled": "stalled-backend",
    },
    "starlette_sse": {"sse-1-healthy": "healthy", "sse-2-client-abort": "client-abort"},
    "websocket_chat": {"ws-1-two-turns": "healthy", "ws-2-dropped": "client-abort"},
    "sync_worker": {
        "sync-1-threadpool": "healthy",
        "sync-2-executor": "healthy",
        "sync-3-gave-up": "stalled-backend",
    },
    "otel_collector": {"otel-1-chat": "healthy"},
}


def envelopes(run: OfflineRun) -> list[Envelope]:
    lines = run.log.read_text(encoding="utf-8").splitlines()
    assert lines, f"{run.log} is empty:\n{run.stdout}\n{run.stderr}"
    # The app's stdout is the log: envelopes, and uvicorn's access log, as in `| tee app.log`.
    others = [line for line in lines if not line.startswith("CVDIAG {")]
    assert all(line.startswith("INFO: ") for line in others), others
    found = [json.loads(line[len("CVDIAG ") :]) for line in lines if line.startswith("CVDIAG {")]
    for env in found:
        assert_valid(env)
    return found


def of(found: list[Envelope], test_id: str, boundary: str) -> list[Envelope]:
    return [e for e in found if e["test_id"] == test_id and e["boundary"] == boundary]


def cvdiag(run: OfflineRun, command: str, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> str:
    """A printed command line, run where the example ran: its output; it must exit 0."""
    monkeypatch.chdir(run.cwd)
    capsys.readouterr()
    code = cvdiag_main(shlex.split(command)[1:])
    out, err = capsys.readouterr()
    assert code == 0, f"`{command}` exited {code}:\n{out}{err}"
    assert out.strip(), f"`{command}` printed nothing"
    return str(out)


@pytest.mark.parametrize("name", NAMES)
def test_the_offline_run_writes_the_log_its_commands_read(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    run = offline_run(name)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    assert f"> {name}.log" in run.stdout  # it names the log it writes
    found = envelopes(run)
    visits = [visit.test_id for visit in example(name).visits]
    assert visits == list(CLASSES[name])
    for test_id in visits:  # every visit ended, and is in the log
        terminals = of(found, test_id, "backend.response.complete")
        terminals += of(found, test_id, "backend.sse.aborted")
        assert len(terminals) == 1, (test_id, [e["boundary"] for e in found])
    assert {e["test_id"] for e in found} == set(visits)

    commands = run.commands()
    assert f"cvdiag ls {name}.log" in commands
    assert {c.split()[2] for c in commands if c.startswith("cvdiag classify ")} == set(visits)
    for command in commands:
        output = cvdiag(run, command, monkeypatch, capsys)
        if command.startswith("cvdiag classify "):
            test_id = command.split()[2]
            # The class the run printed is the one the printed command names.
            assert f"class     {CLASSES[name][test_id]}\n" in output, output
            assert f"  class   {CLASSES[name][test_id]}\n" in run.stdout
        if command.startswith("cvdiag ls "):
            for test_id, flap_class in CLASSES[name].items():
                assert any(test_id in row and flap_class in row for row in output.splitlines())


def test_fastapi_openai_offline_shows_each_provider_failure() -> None:
    found = envelopes(offline_run("fastapi_openai"))
    answers = of(found, "openai-1-healthy", "backend.llm.call.response")
    assert [a["metadata"]["response_token_count"] for a in answers] == [
        FakeProvider().completion_tokens
    ]
    # The SDK tried three times (two retries) before it gave up, each time refused.
    for test_id, error in (
        ("openai-2-provider-500", "HTTP500"),
        ("openai-3-rate-limited", "HTTP429"),
    ):
        answers = of(found, test_id, "backend.llm.call.response")
        assert [a["metadata"]["error_class"] for a in answers] == [error] * 3
        (aborted,) = of(found, test_id, "backend.sse.aborted")
        assert aborted["metadata"]["termination_kind"] == "chunk_error"
    # The stalled provider: heartbeats while nothing came, then the call cut when the browser left.
    assert len(of(found, "openai-4-stalled", "backend.llm.call.heartbeat")) >= 2
    (cut,) = of(found, "openai-4-stalled", "backend.llm.call.response")
    assert cut["metadata"]["error_class"] == "CancelledError"
    (aborted,) = of(found, "openai-4-stalled", "backend.sse.aborted")
    assert aborted["metadata"]["termination_cause"] == "client_disconnect"
    assert {e["slug"] for e in found} == {"fastapi-openai"}


def test_starlette_sse_offline_names_every_event_at_the_debug_tier() -> None:
    found = envelopes(offline_run("starlette_sse"))
    types = [e["metadata"]["event_type"] for e in of(found, "sse-1-healthy", "backend.sse.event")]
    assert types[0] == "RUN_STARTED"
    assert types[-1] == "RUN_FINISHED"
    (aborted,) = of(found, "sse-2-client-abort", "backend.sse.aborted")
    assert aborted["metadata"]["termination_cause"] == "client_disconnect"


def test_websocket_chat_offline_closes_then_drops() -> None:
    found = envelopes(offline_run("websocket_chat"))
    (complete,) = of(found, "ws-1-two-turns", "backend.response.complete")
    assert complete["metadata"]["http_status"] == 101
    assert len(of(found, "ws-1-two-turns", "backend.agent.enter")) == 2
    (aborted,) = of(found, "ws-2-dropped", "backend.sse.aborted")
    assert aborted["metadata"]["termination_kind"] == "rst"


def test_sync_worker_offline_keeps_the_request_context_in_threads() -> None:
    found = envelopes(offline_run("sync_worker"))
    for test_id in ("sync-1-threadpool", "sync-2-executor", "sync-3-gave-up"):
        (ingress,) = of(found, test_id, "backend.request.ingress")
        (enter,) = of(found, test_id, "backend.agent.enter")
        (start,) = of(found, test_id, "backend.llm.call.start")
        assert enter["parent_span_id"] == ingress["span_id"]
        assert start["parent_span_id"] == enter["span_id"]
        beats = of(found, test_id, "backend.llm.call.heartbeat")
        assert beats
        assert {b["parent_span_id"] for b in beats} == {start["span_id"]}


def test_otel_collector_offline_exports_the_requests_trace() -> None:
    run = offline_run("otel_collector")
    trace_ids = {e["trace_id"] for e in envelopes(run)}
    (trace_id,) = trace_ids
    assert f"their trace id {trace_id} is the same as the CVDIAG lines" in run.stdout
    spans = next(line for line in run.stdout.splitlines() if "the collector received" in line)
    for name in ("invoke_agent assistant", "chat example-model"):
        assert name in spans


def test_without_a_name_it_lists_the_examples(capsys: Any) -> None:
    assert examples_main([]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[3] for line in listed] == list(NAMES)
    with pytest.raises(SystemExit) as exit_info:
        examples_main(["no_such_example"])
    assert exit_info.value.code == 2
