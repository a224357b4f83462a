"""The probe against a real backend: uvicorn in a process of its own, real httpx and httpx2
clients, sync and async, each way a request can end as its client sees it. Every line read back
is valid v1 (the ``probe`` fixture checks each)."""

from __future__ import annotations

import asyncio
import importlib
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from cvdiag.schema.ids import new_uuid7
from tests.probe.conftest import Probe, free_port
from tests.support.cli import cvdiag

CLIENTS = [
    pytest.param(library, mode, id=f"{library}-{mode}")
    for library in ("httpx", "httpx2")
    for mode in ("sync", "async")
]


def fetch(
    library: str, mode: str, url: str, test_id: str, *, timeout: float = 5.0, leave: bool = False
) -> BaseException | None:
    """GET ``url`` as a test would, with the test id in the client's headers; ``leave``: read
    the body's first line, then close it. The client's error, if any."""
    lib: Any = importlib.import_module(library)
    headers = {"x-test-id": test_id}
    # ``timeout`` is the read timeout under test; connecting to the local server gets room of
    # its own, so a machine busy enough to take 0.3 s for a connect is no ConnectTimeout.
    timeout = lib.Timeout(timeout, connect=max(timeout, 10.0))
    if mode == "sync":
        with lib.Client(headers=headers, timeout=timeout) as client:
            try:
                if leave:
                    with client.stream("GET", url) as response:
                        for _ in response.iter_lines():
                            break
                else:
                    client.get(url)
            except lib.TransportError as exc:
                return exc
        return None

    async def go() -> BaseException | None:
        async with lib.AsyncClient(headers=headers, timeout=timeout) as client:
            try:
                if leave:
                    async with client.stream("GET", url) as response:
                        async for _ in response.aiter_lines():
                            break
                else:
                    await client.get(url)
            except lib.TransportError as exc:
                return exc
        return None

    return asyncio.run(go())


def meta(envelopes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [env["metadata"] for env in envelopes]


@pytest.mark.parametrize(("library", "mode"), CLIENTS)
def test_a_whole_sse_stream(
    probe: Probe, backend: tuple[str, Any], library: str, mode: str
) -> None:
    url, _ = backend
    test_id = new_uuid7()
    assert fetch(library, mode, f"{url}/events?n=3", test_id, timeout=4.5) is None
    probe.end("passed")
    lines = probe.lines()
    assert [env["boundary"] for env in lines] == [
        "probe.start",
        "probe.message.send",
        "probe.network.response",
        "probe.sse.event",  # the first only, at the VERBOSE tier
        "probe.exit",
    ]
    assert {env["test_id"] for env in lines} == {test_id}
    assert {env["layer"] for env in lines} == {"probe"}
    start, send, head, event, end = meta(lines)
    assert start == {
        "url": None,
        "viewport": None,
        "runner": "pytest",
        "test": "tests/probe::a test",
    }
    assert send["message_index"] == 0
    assert send["method"] == "GET"
    assert send["url"] == "/events?n"
    assert send["timeout_ms"] == 4500
    assert head["status"] == 200
    assert head["message_index"] == 0
    assert head["duration_ms"] == lines[2]["duration_ms"] >= 0
    assert event == {
        "event_type": "token",
        "payload_size_bytes": len('{"n": 0}'),
        "sequence_num": 0,
        "message_index": 0,
    }
    assert end["terminal_outcome"] == "ok"
    assert lines[-1]["outcome"] == "ok"
    assert end["sse_event_count"] == 4
    assert end["requests"] == 1
    assert end["test_outcome"] == "passed"
    assert 0 <= end["first_token_delta_ms"] <= end["total_duration_ms"]


@pytest.mark.parametrize(("library", "mode"), CLIENTS)
def test_the_clients_timeout_before_the_head(
    probe: Probe, backend: tuple[str, Any], library: str, mode: str
) -> None:
    url, _ = backend
    error = fetch(library, mode, f"{url}/late?s=2", new_uuid7(), timeout=0.3)
    assert type(error).__name__ == "ReadTimeout"
    probe.end("failed")
    assert probe.of("probe.network.response") == []
    (failure,) = probe.of("probe.network.error")
    assert failure["outcome"] == "timeout"
    assert failure["metadata"] == {
        "url": "/late?s",
        "error_class": "ReadTimeout",
        "response_status": None,
        "message_index": 0,
        "timeout_ms": 300,
        "cause": "client-timeout",
    }
    (end,) = probe.of("probe.exit")
    assert end["metadata"]["terminal_outcome"] == "err"
    assert end["metadata"]["test_outcome"] == "failed"


@pytest.mark.parametrize(("library", "mode"), CLIENTS)
def test_the_clients_timeout_after_the_head(
    probe: Probe, backend: tuple[str, Any], library: str, mode: str
) -> None:
    url, _ = backend
    error = fetch(library, mode, f"{url}/events?n=1&stall=2", new_uuid7(), timeout=0.3)
    assert type(error).__name__ == "ReadTimeout"
    probe.end("failed")
    assert len(probe.of("probe.network.response")) == 1
    assert len(probe.of("probe.sse.event")) == 1
    (cut,) = probe.of("probe.sse.aborted")
    assert cut["outcome"] == "timeout"
    assert cut["metadata"]["termination_kind"] == "timeout"
    assert cut["metadata"]["cause"] == "client-timeout"
    assert cut["metadata"]["timeout_ms"] == 300
    assert cut["metadata"]["bytes_before_abort"] >= len('event: token\ndata: {"n": 0}\n\n')
    assert probe.of("probe.network.error") == []


@pytest.mark.parametrize(("library", "mode"), CLIENTS)
def test_a_connect_error(probe: Probe, library: str, mode: str) -> None:
    error = fetch(library, mode, f"http://127.0.0.1:{free_port()}/x", new_uuid7(), timeout=2)
    assert type(error).__name__ == "ConnectError"
    probe.end("passed")
    (failure,) = probe.of("probe.network.error")
    assert failure["outcome"] == "err"
    assert failure["metadata"]["error_class"] == "ConnectError"
    assert failure["metadata"]["cause"] == "network-error"
    assert failure["metadata"]["response_status"] is None


@pytest.mark.parametrize(("library", "mode"), CLIENTS)
def test_a_test_that_leaves_its_stream_early(
    probe: Probe, backend: tuple[str, Any], library: str, mode: str
) -> None:
    url, _ = backend
    assert fetch(library, mode, f"{url}/events?n=5&gap=0.2", new_uuid7(), leave=True) is None
    probe.end("passed")
    (cut,) = probe.of("probe.sse.aborted")
    assert cut["outcome"] == "info"
    assert cut["metadata"]["cause"] == "left-early"
    assert cut["metadata"]["termination_kind"] == "fin_premature"
    (end,) = probe.of("probe.exit")
    assert end["metadata"]["terminal_outcome"] == "ok"


@pytest.mark.parametrize(("library", "mode"), CLIENTS[::3])
def test_every_event_at_the_debug_tier(
    debug_probe: Probe, backend: tuple[str, Any], library: str, mode: str
) -> None:
    url, _ = backend
    assert fetch(library, mode, f"{url}/events?n=3", new_uuid7()) is None
    debug_probe.end("passed")
    events = meta(debug_probe.of("probe.sse.event"))
    assert [(e["event_type"], e["sequence_num"]) for e in events] == [
        ("token", 0),
        ("token", 1),
        ("token", 2),
        ("done", 3),
    ]


def test_the_probes_test_id_is_the_backends(probe: Probe, backend: tuple[str, Any]) -> None:
    """The probe and the backend write the same join key for a test id the backend adopts
    sanitized (a harness id in capitals), so the two layers meet."""
    url, log = backend
    raw = f"Run-{new_uuid7()[-12:]}"
    assert fetch("httpx", "sync", f"{url}/answer", raw) is None
    probe.end("passed")
    (send,) = probe.of("probe.message.send")
    backend_ids: set[str] = set()
    for _ in range(400):  # the backend's queued lines reach its log a moment later
        backend_ids = {
            orjson.loads(line[7:])["test_id"]
            for line in log.read_bytes().splitlines()
            if line.startswith(b"CVDIAG ")
        }
        if send["test_id"] in backend_ids:
            break
        time.sleep(0.05)
    assert send["test_id"] == raw.lower()
    assert send["test_id"] in backend_ids


def test_the_commands_read_a_log_holding_both_layers(
    probe: Probe, backend: tuple[str, Any], tmp_path: Path
) -> None:
    """``replay``, ``classify``, ``ls`` and ``validate`` read the backend's lines and the
    probe's in one log, in any order, without an error (how they join them is theirs)."""
    url, log = backend
    test_id = new_uuid7()
    assert type(fetch("httpx", "sync", f"{url}/late?s=1", test_id, timeout=0.2)).__name__ == (
        "ReadTimeout"
    )
    probe.end("failed")
    mine: list[bytes] = []
    for _ in range(400):  # the backend's terminal comes once its late answer is written
        mine = [line for line in log.read_bytes().splitlines() if test_id.encode() in line]
        if any(b"backend.response.complete" in line or b"sse.aborted" in line for line in mine):
            break
        time.sleep(0.05)
    both = tmp_path / "both.log"
    both.write_bytes(b"\n".join([*probe.path.read_bytes().splitlines(), *mine]) + b"\n")
    replay = cvdiag("replay", test_id, str(both))
    assert replay.returncode == 0, replay.stderr
    assert "probe.network.error" in replay.stdout
    assert "backend.request.ingress" in replay.stdout
    for command in (("classify", test_id), ("ls",), ("validate",)):
        done = cvdiag(*command, str(both))
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr


#: The backend's boundaries written at the default tier (what a log without CVDIAG_VERBOSE holds).
DEFAULT_TIER = (b"backend.agent.", b"backend.sse.aborted", b"backend.response.complete")


def test_probe_lines_do_not_change_what_a_default_tier_backend_log_is_told(
    probe: Probe, backend: tuple[str, Any], tmp_path: Path
) -> None:
    """A probe writes at its own tier: its verbose lines beside a default-tier backend log must
    not make the classifier read that log as verbose (and miss its ingress)."""
    url, log = backend
    test_id = new_uuid7()
    assert fetch("httpx", "sync", f"{url}/answer", test_id) is None
    probe.end("passed")
    mine: list[bytes] = []
    for _ in range(400):
        mine = [line for line in log.read_bytes().splitlines() if test_id.encode() in line]
        if any(b"backend.response.complete" in line for line in mine):
            break
        time.sleep(0.05)
    alone = tmp_path / "backend.log"
    alone.write_bytes(
        b"".join(line + b"\n" for line in mine if any(k in line for k in DEFAULT_TIER))
    )
    both = tmp_path / "both.log"
    both.write_bytes(alone.read_bytes() + probe.path.read_bytes())
    told = [cvdiag("classify", test_id, str(path), "--json") for path in (alone, both)]
    assert [done.returncode for done in told] == [0, 0]
    verdicts = [orjson.loads(done.stdout) for done in told]
    assert [(v["flap_class"], v["log_tier"]) for v in verdicts] == [("healthy", "default")] * 2
