"""Memory: many requests of every kind — streaming, aborted, failing, WebSocket — through the
app with cvdiag on leave no growth behind: resident memory, tasks, threads, request contexts and
heartbeat entries all come back to where they were after a warm-up.
"""

from __future__ import annotations

import pytest

from tests.reliability.drivers import MIX, memory_run_with_devnull_stdout
from tests.reliability.scale import SCALE

pytestmark = pytest.mark.reliability

MEGABYTE = 1024 * 1024


@pytest.mark.timeout(900)
def test_requests_of_every_kind_leave_nothing_behind() -> None:
    run = memory_run_with_devnull_stdout(SCALE.memory_requests, warmup=2_000)
    kinds = {req.name for req in MIX} | {"websocket-1000", "websocket-1006"}
    assert set(run.answered) == kinds
    assert sum(run.answered.values()) == SCALE.memory_requests
    assert run.emitted > SCALE.memory_requests * 4
    assert run.rss_growth < 10 * MEGABYTE, run
    assert run.tasks_after == 1  # the test's own task
    assert run.threads_new == []  # the writer and heartbeat threads are the warm-up's
    assert run.contexts_left == 0
    assert run.outstanding_calls == 0
    assert run.heartbeat_heap < 4096  # ended calls are dropped from the heap, not kept
