"""Load: concurrent SSE requests through a real uvicorn process, 30% of clients leaving early.

What reaches the server's real stdout is checked against what its emitter says it emitted:
every request has exactly one terminal boundary, every envelope carries its own request's test
id, nothing is lost, and nothing is dropped while stdout keeps up (a file); when it does not (a
pipe read by this busy process), every dropped line is counted and reported. The latency
comparison with and without cvdiag is a figure, measured by ``benchmarks/reliability.py``, not
an assertion here.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from cvdiag.schema.vocabulary import BYTE_CAPS, Tier
from tests.reliability.apps import EVENTS
from tests.reliability.drivers import Result, plan, run_load, server_process
from tests.reliability.scale import DISCONNECT_SHARE, SCALE
from tests.schema_check import assert_valid

pytestmark = pytest.mark.reliability

TERMINALS = {"backend.response.complete", "backend.sse.aborted"}
#: Metadata that names the request it was emitted in (see tests/reliability/apps.py).
NAMED = {
    "backend.request.ingress": ("path", "/sse/{}"),
    "backend.agent.enter": ("agent_name", "agent-{}"),
    "backend.llm.call.start": ("model", "model-{}"),
    "backend.llm.call.response": ("model", "model-{}"),
    "backend.sse.event": ("event_type", "ev-{}"),
}


def body_of(index: int, count: int) -> bytes:
    return b"".join(b'data: {"type":"ev-%d","k":%d}\n\n' % (index, k) for k in range(count))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stdout", ["file", "pipe"])
def test_concurrent_sse_with_disconnects_over_uvicorn(stdout: str, tmp_path: Path) -> None:
    """``file``: the server's stdout is a file, which always keeps up: nothing may be dropped.
    ``pipe``: a pipe this busy test process reads while it runs every client: when it falls
    behind, lines may be dropped, and every one of them must be accounted for."""
    results = plan(SCALE.load_requests, DISCONNECT_SHARE, EVENTS, seed=8)
    out = str(tmp_path / "stdout.log") if stdout == "file" else None
    with server_process("debug", stdout_file=out) as server:
        asyncio.run(run_load(server.url, results, events=EVENTS))
    stats = server.stats
    lines = bytes(server.stdout).splitlines()
    envelopes = server.envelopes()

    # The host: every client got its answer; those that read to the end got all of it.
    assert [r for r in results if r.error is not None] == []
    assert {r.status for r in results} == {200}
    for r in results:
        if r.disconnect_after is None:
            assert r.body == body_of(r.index, EVENTS), r.index

    # Nothing lost: stdout holds what was emitted, less the drops, and every drop is reported.
    assert all(line.startswith(b"CVDIAG {") for line in lines)
    assert max(len(line) - len(b"CVDIAG ") for line in lines) <= BYTE_CAPS[Tier.DEBUG]
    reports = [e for e in envelopes if e["boundary"] == "cvdiag.queue_dropped"]
    envelopes = [e for e in envelopes if e["boundary"] != "cvdiag.queue_dropped"]
    assert sum(r["metadata"]["dropped_count"] for r in reports) == stats["queue_dropped"]
    assert len(envelopes) + stats["queue_dropped"] == stats["emitted"]
    assert {k: v for k, v in stats.items() if k.startswith("failures.")} == {}
    for envelope in envelopes:
        assert_valid(envelope)
    if stdout == "file":
        assert stats["queue_dropped"] == 0
    if stats["queue_dropped"] == 0:
        assert stats["written"] == stats["emitted"]
        every_request_told_its_own_story(results, envelopes)


def every_request_told_its_own_story(
    results: list[Result], envelopes: list[dict[str, Any]]
) -> None:
    """Each envelope carries its own request's test id; each request has one terminal."""
    by_request: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for envelope in envelopes:
        by_request[envelope["test_id"]].append(envelope)
    by_request.pop("shutdown")  # the request that stopped the server
    assert set(by_request) == {r.test_id for r in results}
    for r in results:
        own = by_request[r.test_id]
        assert len({e["trace_id"] for e in own}) == 1
        for envelope in own:
            named = NAMED.get(envelope["boundary"])
            if named is not None:
                key, shape = named
                assert envelope["metadata"][key] == shape.format(r.index), (r.test_id, envelope)
        terminals = [e for e in own if e["boundary"] in TERMINALS]
        assert len(terminals) == 1, (r.test_id, [e["boundary"] for e in own])
        (terminal,) = terminals
        assert "backend.error.caught" not in {e["boundary"] for e in own}
        if r.disconnect_after is None:
            assert terminal["boundary"] == "backend.response.complete"
            assert terminal["metadata"]["sse_event_count"] == EVENTS
            assert terminal["metadata"]["content_length"] == len(r.body)
        else:
            # The server held the rest of its stream until this client had left: it was cut.
            assert terminal["boundary"] == "backend.sse.aborted", (r.test_id, terminal)
            assert terminal["metadata"]["termination_kind"] == "rst"
            assert terminal["metadata"]["termination_cause"] == "client_disconnect"
