"""Process lifecycle: however the process ends, what was emitted before is on stdout.

SIGTERM, SIGINT, an uncaught exception, ``sys.exit`` and ``os._exit`` after ``flush()`` lose
nothing, even when stdout was not being read while the envelopes were queued. ``os._exit``
without a flush skips every exit hook: what the queue still held is lost, and the loss is
bounded by the queue (plus the one batch the writer had in hand).
"""

from __future__ import annotations

import signal

import pytest

from tests.reliability.lifecycle import end_a_host, end_uvicorn
from tests.reliability.scale import SCALE

pytestmark = pytest.mark.reliability

COUNT = SCALE.lifecycle_envelopes
#: Lines the writer thread takes off the queue at once (cvdiag/sinks/queued.py).
BATCH = 512


@pytest.mark.parametrize(
    ("ending", "returncode"),
    [
        ("sigterm", -signal.SIGTERM),
        ("sigint", -signal.SIGINT),  # KeyboardInterrupt, then Python re-raises SIGINT at exit
        ("uncaught exception", 1),
        ("sys.exit", 4),
        ("os._exit after flush()", 3),
    ],
)
@pytest.mark.parametrize("read", [False, True], ids=["stdout-unread", "stdout-read"])
def test_everything_emitted_reaches_stdout(ending: str, returncode: int, read: bool) -> None:
    result = end_a_host(ending, count=COUNT, queue=COUNT, read_while_running=read)
    assert result.written == COUNT, result
    assert result.dropped == 0
    assert result.partial == 0
    assert result.returncode == returncode, result.stderr.decode()


@pytest.mark.parametrize("read", [False, True], ids=["stdout-unread", "stdout-read"])
def test_os_exit_without_flush_loses_at_most_the_queue(read: bool) -> None:
    queue = COUNT // 2
    result = end_a_host("os._exit without flush", count=COUNT, queue=queue, read_while_running=read)
    assert result.returncode == 3
    assert result.partial <= 1  # at most the one line being written when the process ended
    # Lost: what the queue held, and the batch the writer had taken off it.
    assert 0 <= result.lost_at_exit <= queue + BATCH


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_uvicorn_ended_by_a_signal_writes_every_request(sig: signal.Signals) -> None:
    requests = max(50, COUNT // 20)
    told, returncode, err = end_uvicorn(sig, requests)
    assert told == requests, err.decode()[-2000:]
    assert returncode in (0, -sig), err.decode()[-2000:]
