"""Heartbeats: cadence, none after the response, any thread, and O(1) cost at 10,000 calls."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from cvdiag import LLMCall, MemorySink, llm_call
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.scopes.heartbeat import HeartbeatScheduler, scheduler
from tests.support.requests import of

Envelope = Mapping[str, Any]


def beats_of(sink: MemorySink, call: LLMCall) -> list[Envelope]:
    return [
        env
        for env in list(sink.envelopes)
        if env["boundary"] == "backend.llm.call.heartbeat" and env["parent_span_id"] == call.span_id
    ]


def assert_cadence(beats: list[Envelope], latency_ms: int, interval: float) -> None:
    """Beats at ``interval``, never early, never more than the call's length holds, in order.

    Not how many fewer: a scheduler thread starved on a busy machine skips the beats it missed
    (by design, no burst), so a count's lower bound is a wall-clock figure. It failed beside
    another suite: 4 beats for 6 intervals, a 116 ms gap the machine made."""
    assert beats, "no heartbeat at all"
    assert len(beats) <= int(latency_ms / 1000 / interval) + 1, (len(beats), latency_ms)
    elapsed = [env["metadata"]["elapsed_ms_since_start"] for env in beats]
    assert elapsed == sorted(elapsed)
    for k, ms in enumerate(elapsed, start=1):  # the k-th beat is due k intervals in, not sooner
        assert ms >= k * interval * 1000 - 1, (k, elapsed)


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.005)


async def test_async_heartbeats_at_the_interval_and_none_after_the_response(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.05)
    async with llm_call("openai", "gpt-4o") as call:
        await asyncio.sleep(0.3)
    response = of(sink, "backend.llm.call.response")[0]
    beats = beats_of(sink, call)
    assert_cadence(beats, response["metadata"]["latency_ms"], 0.05)
    assert {env["test_id"] for env in beats} == {response["test_id"]}
    # Nothing after the response, now or three intervals later.
    assert list(sink.envelopes)[-1] is response
    await asyncio.sleep(0.15)
    assert list(sink.envelopes)[-1] is response


def test_sync_heartbeats_from_a_worker_thread(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.05)
    calls: list[LLMCall] = []

    def blocking_call() -> None:
        with llm_call("anthropic", "claude") as call:
            calls.append(call)
            time.sleep(0.3)  # a sync SDK call blocking its thread

    thread = threading.Thread(target=blocking_call)
    thread.start()
    thread.join(10)
    response = of(sink, "backend.llm.call.response")[0]
    assert_cadence(beats_of(sink, calls[0]), response["metadata"]["latency_ms"], 0.05)


def test_the_per_call_interval_overrides_the_setting(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    with llm_call("openai", "m", heartbeat_interval=0.05) as fast:
        time.sleep(0.3)
    response = of(sink, "backend.llm.call.response")[0]
    assert_cadence(beats_of(sink, fast), response["metadata"]["latency_ms"], 0.05)


def test_heartbeats_outlive_the_event_loop_that_started_the_call(
    cvdiag_events: CvdiagEvents,
) -> None:
    """The scheduler never touches the caller's loop: a closed loop cannot silence it."""
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    call = llm_call("openai", "m")
    context = contextvars.copy_context()

    async def start() -> None:
        context.run(call.__enter__)

    asyncio.run(start())  # the loop is closed from here on
    wait_until(lambda: len(beats_of(sink, call)) >= 3)
    context.run(call.__exit__, None, None, None)
    assert of(sink, "backend.llm.call.response")


def test_no_heartbeat_ever_follows_its_response(cvdiag_events: CvdiagEvents) -> None:
    """Calls ending while their beat is being emitted: the lock keeps the order."""
    sink = cvdiag_events("verbose", heartbeat_interval=0.001)
    calls = [llm_call("openai", "m") for _ in range(200)]
    for call in calls:
        call.__enter__()
    wait_until(lambda: len(of(sink, "backend.llm.call.heartbeat")) >= 400)
    for call in reversed(calls):
        call.__exit__(None, None, None)
        time.sleep(0.0001)
    time.sleep(0.02)
    responded: set[str | None] = set()
    for env in list(sink.envelopes):
        if env["boundary"] == "backend.llm.call.response":
            responded.add(env["parent_span_id"])
        elif env["boundary"] == "backend.llm.call.heartbeat":
            assert env["parent_span_id"] not in responded
    assert len(responded) == 200


async def test_ten_thousand_outstanding_calls_cost_no_task_and_no_thread(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.2)
    async with llm_call("openai", "warm-up"):  # the scheduler thread exists from here on
        pass
    # Sets, not counts: a thread another test left behind may end meanwhile; none may start.
    tasks_before = asyncio.all_tasks()
    threads_before = set(threading.enumerate())
    outstanding_before = scheduler().outstanding
    n = 10_000
    async with contextlib.AsyncExitStack() as stack:
        calls = [await stack.enter_async_context(llm_call("openai", "m")) for _ in range(n)]
        assert not asyncio.all_tasks() - tasks_before
        assert not set(threading.enumerate()) - threads_before
        assert scheduler().outstanding == outstanding_before + n
        beating: set[str | None] = set()
        deadline = time.monotonic() + 30
        while len(beating) < n:  # every call has beaten at least once
            assert time.monotonic() < deadline, f"{len(beating)} of {n} calls beat"
            await asyncio.sleep(0.05)
            beating = {env["parent_span_id"] for env in of(sink, "backend.llm.call.heartbeat")}
        assert beating == {call.span_id for call in calls}
        assert not asyncio.all_tasks() - tasks_before
        assert not set(threading.enumerate()) - threads_before
    assert scheduler().outstanding == outstanding_before
    assert len(of(sink, "backend.llm.call.response")) == n + 1
    settled = len(sink.envelopes)
    await asyncio.sleep(0.5)  # more than two intervals: all of them stopped
    assert len(sink.envelopes) == settled


def test_a_disabled_emitter_never_starts_the_scheduler() -> None:
    code = (
        "import threading, cvdiag\n"
        "with cvdiag.agent_scope('a'), cvdiag.llm_call('openai', 'm'):\n"
        "    pass\n"
        "names = [t.name for t in threading.enumerate()]\n"
        "assert 'cvdiag-heartbeat' not in names, names\n"
        "print('ok')\n"
    )
    for extra in ({}, {"CVDIAG_BACKEND_EMITTER": "1"}):  # off; on at default tier
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_") and k != "PYTHONPATH"
        }
        env.update(extra)
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert "ok" in result.stdout


# --- the scheduler itself ----------------------------------------------------------------------


class Beat:
    """A stand-in for a call: counts its beats."""

    def __init__(self) -> None:
        self.count = 0
        self.heartbeat_ended = False

    def heartbeat(self) -> None:
        self.count += 1


def test_the_scheduler_beats_each_call_at_its_own_interval() -> None:
    sched = HeartbeatScheduler()
    fast, slow, ended = Beat(), Beat(), Beat()
    sched.schedule(fast, 0.01)
    sched.schedule(slow, 60)
    sched.schedule(ended, 0.01)
    ended.heartbeat_ended = True
    sched.ended()
    wait_until(lambda: fast.count >= 5)
    assert slow.count == 0
    assert ended.count == 0
    assert sched.outstanding == 2
    assert sched.running


def test_ended_calls_are_compacted_out_of_the_heap() -> None:
    sched = HeartbeatScheduler()
    beats = [Beat() for _ in range(5000)]
    for beat in beats:
        sched.schedule(beat, 3600)
    for beat in beats[:4000]:
        beat.heartbeat_ended = True
        sched.ended()
    assert sched.outstanding == 1000
    # Dead entries never outnumber live ones by much, however long the interval.
    assert len(sched._heap) <= 2 * 1000 + 1024
