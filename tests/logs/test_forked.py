"""``cvdiag.logs.forked``: the worker processes ``validate`` and ``stats`` read a large file
with, forked from this process (Linux only, like the reading in ranges itself)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.logs import ranges
from cvdiag.logs.forked import WorkerDied, run_in_order
from cvdiag.logs.inputs import InputError
from cvdiag.logs.reading import Input

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only"),
    # These tests fork the test process itself, which under pytest-xdist runs execnet's I/O
    # thread (CPython 3.12+ warns on any fork beside a thread). The children run only a job and
    # their pipe, never a lock that thread takes. The command forks only when it runs no thread
    # (``ranges.plan``), so it never meets this warning.
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


class Failed(Exception):
    pass


def _act(kind: str, value: int) -> int:
    """A job: ``ok`` returns, ``slow`` returns later, ``raise`` raises, ``die`` is killed."""
    if kind == "slow":
        time.sleep(0.01)
    elif kind == "raise":
        raise Failed(value)
    elif kind == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return value * value


def _collect(
    calls: list[tuple[str, int]], processes: int
) -> tuple[list[int], BaseException | None]:
    got: list[int] = []
    try:
        for result in run_in_order(_act, calls, processes=processes):
            got.append(result)
    except (Failed, WorkerDied) as exc:
        return got, exc
    return got, None


@settings(max_examples=40)
@given(
    kinds=st.lists(st.sampled_from(["ok", "ok", "slow", "raise", "die"]), max_size=12),
    processes=st.integers(1, 3),
)
def test_results_come_in_order_and_the_first_failure_ends_the_run(
    kinds: list[str], processes: int
) -> None:
    calls = [(kind, n) for n, kind in enumerate(kinds)]
    got, error = _collect(calls, processes)
    failing = [n for n, kind in enumerate(kinds) if kind in ("raise", "die")]
    if not failing:
        assert got == [n * n for n in range(len(kinds))]
        assert error is None
    else:
        first = failing[0]
        # What came back is the squares of a prefix of the jobs before the first failure: a
        # worker's death may be seen before earlier jobs have answered.
        assert got == [n * n for n in range(len(got))]
        assert len(got) <= first
        if kinds[first] == "raise":
            assert isinstance(error, (Failed, WorkerDied))
            if isinstance(error, Failed):
                assert error.args == (first,)
                assert len(got) == first
        else:  # the job it died in never answers: nothing after it can be reached
            assert isinstance(error, WorkerDied)
    assert multiprocessing.active_children() == []  # every worker was ended and reaped


def _square_or_die(name: str, start: int, end: int) -> int:
    if start == 60:  # the seventh range
        os.kill(os.getpid(), signal.SIGKILL)
    return start * start


def test_no_thread_runs_beside_the_reader_and_nothing_is_printed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """ProcessPoolExecutor watched its workers from a thread that, on CPython 3.10 and 3.11,
    could race a worker's death and print ``Exception in thread Thread-1`` and a traceback
    beside the command's one error line. The ranges are read with no thread of the pool's.

    Threads are compared by identity, not counted: a thread an earlier test left behind (a
    closed sink's writer, which ends within its half-second wait; a server's thread still
    joining) may end while this one runs, and on a busy machine did, failing a count."""
    path = tmp_path / "app.log"
    path.write_bytes(b"x" * 400)
    spans = [(start, start + 10) for start in range(0, 400, 10)]
    before = set(threading.enumerate())
    started: list[set[threading.Thread]] = []
    error: InputError | None = None
    with path.open("rb") as stream:
        try:
            for _ in ranges.run(_square_or_die, Input(str(path), stream), spans):
                started.append(set(threading.enumerate()) - before)
        except InputError as exc:
            error = exc
    assert str(error) == f"cannot read {path}: a worker process reading it ended unexpectedly"
    assert started  # a result came before the worker died: threads were looked at
    assert all(new == set() for new in started)
    assert set(threading.enumerate()) - before == set()
    assert capfd.readouterr() == ("", "")
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("sigterm", ["default", "handled"])
def test_closing_early_stops_the_workers_at_once(sigterm: str) -> None:
    """A job still running is not waited for. ``handled``: the process forking the workers has a
    SIGTERM handler that does not exit (a host's; pytest-xdist workers had one), which a worker
    inherits: a worker stopped with SIGTERM went on, and closing waited for it forever."""

    def forever(_: int) -> int:
        time.sleep(3600)
        return 0

    def first_quick(n: int) -> int:
        return n if n == 0 else forever(n)

    previous = signal.getsignal(signal.SIGTERM)
    if sigterm == "handled":
        signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        results = run_in_order(first_quick, [(n,) for n in range(4)], processes=2)
        assert next(results) == 0
        closing = threading.Thread(target=results.close)
        closing.start()
        closing.join(30)  # a bound on a hung close, not a timing assertion
    finally:
        signal.signal(signal.SIGTERM, previous)
    left = multiprocessing.active_children()
    for child in left:
        child.kill()  # a hung close must fail the test, not hang the suite
    closing.join()
    assert not left


def test_a_result_that_cannot_be_sent_back_is_an_input_error() -> None:
    def unsendable() -> Callable[[], None]:
        return lambda: None  # a lambda cannot be pickled

    with pytest.raises(InputError, match="a worker's result was lost"):
        list(run_in_order(unsendable, [()], processes=1))
    assert multiprocessing.active_children() == []


def test_a_parent_that_dies_leaves_no_worker_waiting() -> None:
    """Every worker closes its copies of the parent's pipe ends, so each sees the parent go."""
    reader, writer = os.pipe()
    parent = os.fork()
    if parent == 0:  # the parent-to-be-killed: starts two workers, reports their pids
        try:
            os.close(reader)
            results = run_in_order(_act, [("slow", n) for n in range(4)], processes=2)
            next(results)
            line = " ".join(str(child.pid) for child in multiprocessing.active_children())
            os.write(writer, line.encode() + b"\n")
        finally:
            os.kill(os.getpid(), signal.SIGKILL)  # never back into pytest
    os.close(writer)
    with os.fdopen(reader) as report:  # a line: the workers hold the pipe open too
        pids = [int(pid) for pid in report.readline().split()]
    os.waitpid(parent, 0)
    assert pids
    deadline = time.monotonic() + 30  # a bound for a hung worker, not a timing assertion
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # a hung worker would hold pytest's output open
    assert not left


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
