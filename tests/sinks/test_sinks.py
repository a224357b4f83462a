from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from cvdiag import FileSink, Settings, StdoutSink
from cvdiag.pipeline.emitter import Emitter
from cvdiag.sinks.exit_flush import flush_all
from tests.schema_check import assert_valid


class GatedStream(io.StringIO):
    """A stdout whose writes block until the gate opens: a pipe nobody reads."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def write(self, s: str) -> int:
        self.gate.wait()
        return super().write(s)


def lines_of(text: str) -> list[dict[str, object]]:
    return [orjson.loads(line[len("CVDIAG ") :]) for line in text.splitlines()]


def test_stdout_sink_writes_whole_lines_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    em = Emitter(Settings(enabled=True), sinks=[StdoutSink()])
    for i in range(300):
        em.emit("backend.error.caught", metadata={"message_scrubbed": str(i)})
    em.flush()
    envs = lines_of(stream.getvalue())
    assert [e["metadata"]["message_scrubbed"] for e in envs] == [str(i) for i in range(300)]


def test_the_writer_wakes_once_per_burst_not_once_per_line(tmp_path: Path) -> None:
    # A line now and then, the producer idle in between (an envelope per request): the writer
    # lets them gather and writes them together instead of waking, and taking the GIL, per line.
    class CountingFileSink(FileSink):
        writes = 0

        def _write_bytes(self, data: bytes) -> None:
            self.writes += 1
            super()._write_bytes(data)

    sink = CountingFileSink(tmp_path / "out.log")
    sink.LINGER = 0.5  # far longer than the burst below, so the count cannot depend on load
    em = Emitter(Settings(enabled=True), sinks=[sink])
    for i in range(20):
        em.emit("backend.error.caught", metadata={"message_scrubbed": str(i)})
        time.sleep(0.001)  # the GIL is free: a writer woken per line would write each alone
    em.flush()
    assert len(lines_of((tmp_path / "out.log").read_text())) == 20
    assert sink.writes == 1


def said_at_exit(sink: StdoutSink, capsys: pytest.CaptureFixture[str]) -> str:
    """The exit flush's line about ``sink``'s losses, said now (so never at the suite's exit,
    where a reader takes it for a failure) and once."""
    capsys.readouterr()
    flush_all(timeout=0, sinks=[sink])
    said = capsys.readouterr().err
    flush_all(timeout=0, sinks=[sink])
    assert capsys.readouterr().err == ""
    return said


def test_wedged_stdout_drops_oldest_and_accounts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = GatedStream()
    monkeypatch.setattr(sys, "stdout", stream)
    sink = StdoutSink(queue_size=100)
    em = Emitter(Settings(enabled=True, queue_size=100), sinks=[sink])
    for i in range(1000):  # returns at once although nothing can be written
        em.emit("backend.error.caught", metadata={"message_scrubbed": str(i)})
    stream.gate.set()
    em.flush()
    em.flush()
    envs = lines_of(stream.getvalue())
    reports = [e for e in envs if e["boundary"] == "cvdiag.queue_dropped"]
    assert len(reports) == 1
    assert_valid(reports[0])
    written = [e for e in envs if e["boundary"] == "backend.error.caught"]
    assert reports[0]["metadata"]["dropped_count"] == sink.dropped
    assert len(written) + sink.dropped == 1000
    assert written[-1]["metadata"]["message_scrubbed"] == "999"  # the newest survive
    assert (
        said_at_exit(sink, capsys) == f"cvdiag: {sink.dropped} envelopes not written (queue full)\n"
    )


def test_broken_stdout_is_counted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = io.StringIO()
    stream.close()
    monkeypatch.setattr(sys, "stdout", stream)
    sink = StdoutSink()
    em = Emitter(Settings(enabled=True), sinks=[sink])
    em.emit("backend.error.caught")
    em.flush()
    assert sink.dropped == 1
    assert sink.written == 0
    assert said_at_exit(sink, capsys) == "cvdiag: 1 envelopes not written (write failed)\n"


def test_file_sink_appends(tmp_path: Path) -> None:
    path = tmp_path / "cvdiag.log"
    path.write_text("host line\n")
    sink = FileSink(path)
    em = Emitter(Settings(enabled=True), sinks=[sink])
    em.emit("backend.agent.enter", metadata={"agent_name": "a"})
    em.emit("backend.agent.exit", metadata={"terminal_outcome": "ok"})
    sink.close()
    lines = path.read_text().splitlines()
    assert lines[0] == "host line"
    assert [orjson.loads(x[7:])["boundary"] for x in lines[1:]] == [
        "backend.agent.enter",
        "backend.agent.exit",
    ]


def test_a_lost_batch_is_reported_even_when_no_line_follows(tmp_path: Path) -> None:
    """The drop report used to wait for the next successful batch: when the lost batch was the
    last one (how the writer happened to split a burst decided it), the count never appeared."""
    path = tmp_path / "cvdiag.log"
    sink = FileSink(path)
    em = Emitter(Settings(enabled=True), sinks=[sink])
    em.emit("backend.agent.enter", metadata={"agent_name": "before"})
    em.flush()
    assert sink._file is not None
    sink._file.close()  # the next write raises ValueError; the sink then reopens the file
    em.emit("backend.agent.enter", metadata={"agent_name": "lost"})
    em.flush()
    sink.close()
    envs = lines_of(path.read_text())
    assert [e["metadata"]["agent_name"] for e in envs[:1]] == ["before"]  # type: ignore[index]
    assert [e["boundary"] for e in envs[1:]] == ["cvdiag.queue_dropped"]
    assert envs[1]["metadata"] == {"dropped_count": 1}
    assert sink.dropped == 1


CHILD = r"""
import asyncio, sys, time
from cvdiag import Emitter, Settings, StdoutSink
sink = StdoutSink(queue_size=100_000)
em = Emitter(Settings(enabled=True), sinks=[sink])
thread_writes = 0
write_bytes = sink._write_bytes
def counting(data):
    global thread_writes
    thread_writes += 1
    write_bytes(data)
sink._write_bytes = counting

async def main():
    for i in range(int(sys.argv[1])):
        em.emit("backend.error.caught", metadata={"message_scrubbed": "x" * 200 + str(i)})
        if i % 100 == 0:
            await asyncio.sleep(0.002)  # let the loop drain its bursts
    await asyncio.sleep(0.1)  # and the last one

asyncio.run(main())
on_loop_only = thread_writes == 0
print("loop done", file=sys.stderr, flush=True)  # the parent reads nothing before this
em.flush(30)
print(f"host line after emits loop_only={on_loop_only}", flush=True)
for i in range(int(sys.argv[2])):
    print(f"host line {i}")  # the host's own stdout, blocking as it always was
sys.stdout.flush()
em.flush(10)
print(f"thread_writes_total={thread_writes} dropped={sink.dropped}", file=sys.stderr)
"""


def _run_child(emits: int, host_lines: int, *, unbuffered: bool = True) -> tuple[str, str]:
    """Run CHILD with stdout a pipe nobody reads until its loop has finished emitting: were a
    write on the loop to block on the full pipe, the child would never say so, and this fails
    at its timeout instead of passing."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(emits), str(host_lines)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stderr is not None
    try:
        first = child.stderr.readline()
        assert first == b"loop done\n", first + child.stderr.read()
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, err.decode()
    return out.decode(), err.decode()


def test_on_a_loop_lines_go_out_without_the_writer_thread() -> None:
    out, _ = _run_child(300, 0)
    emitted = [line for line in out.splitlines() if line.startswith("CVDIAG ")]
    assert len(lines_of("\n".join(emitted))) == 300
    assert "loop_only=True" in out  # the loop wrote every burst itself


def test_a_block_buffered_stdout_is_written_through_its_own_buffer() -> None:
    # Written beside a buffer that flushes mid-line, our lines would glue to the host's.
    out, _ = _run_child(300, 2_000, unbuffered=False)
    assert "loop_only=False" in out
    lines = out.splitlines()
    assert len([line for line in lines if line.startswith("host line ")]) == 2_001
    assert len(lines_of("\n".join(x for x in lines if x.startswith("CVDIAG ")))) == 300


def test_a_slow_reader_never_blocks_the_loop_nor_breaks_the_hosts_prints() -> None:
    # 20,000 lines of 400 bytes: far more than a pipe holds while nobody reads it.
    out, err = _run_child(20_000, 5_000)
    assert "BlockingIOError" not in err
    host = [line for line in out.splitlines() if line.startswith("host line ")]
    assert len(host) == 5_001  # every host print arrived, whole: its stdout still blocks
    envelopes = [line for line in out.splitlines() if line.startswith("CVDIAG ")]
    assert envelopes
    for parsed in lines_of("\n".join(envelopes)):
        assert parsed["boundary"] in {"backend.error.caught", "cvdiag.queue_dropped"}


def test_one_drain_from_the_loop_writes_a_whole_burst_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop writes a burst in slices of lines (cvdiag/sinks/queued.py): a burst of many
    # slices still goes out whole, in order, in the one drain, with nothing left queued.
    import asyncio

    out = open(tmp_path / "out", "w", buffering=1)  # noqa: SIM115 - closed below
    monkeypatch.setattr(sys, "stdout", out)
    sink = StdoutSink(queue_size=100_000)
    em = Emitter(Settings(enabled=True), sinks=[sink])

    async def burst() -> None:
        for i in range(1_050):
            em.emit("backend.error.caught", metadata={"message_scrubbed": str(i)})
        fd = sink._loop_descriptor()
        assert fd is not None
        sink._drain_from_loop(fd)
        assert not sink._queue
        assert not sink._rest

    asyncio.run(burst())
    out.close()
    envs = lines_of((tmp_path / "out").read_text())
    assert [e["metadata"]["message_scrubbed"] for e in envs] == [str(i) for i in range(1_050)]


def test_on_a_loop_each_burst_goes_to_the_stdout_of_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lane keeps the descriptor it was given for one ``sys.stdout`` object (sinks/lane.py):
    # a stdout replaced between bursts, and put back, gets each burst that was written to it.
    import asyncio

    first = open(tmp_path / "first", "w", buffering=1)  # noqa: SIM115 - closed below
    second = open(tmp_path / "second", "w", buffering=1)  # noqa: SIM115 - closed below
    sink = StdoutSink()
    em = Emitter(Settings(enabled=True), sinks=[sink])

    async def bursts() -> None:
        for n, stdout in enumerate([first, second, first, second]):
            monkeypatch.setattr(sys, "stdout", stdout)
            em.emit("backend.error.caught", metadata={"message_scrubbed": str(n)})
            await asyncio.sleep(sink.LINGER * 5)  # the burst's drain, from the loop
            assert not sink._queue

    asyncio.run(bursts())
    first.close()
    second.close()
    for name, wanted in (("first", ["0", "2"]), ("second", ["1", "3"])):
        envs = lines_of((tmp_path / name).read_text())
        assert [e["metadata"]["message_scrubbed"] for e in envs] == wanted, name


def _stdout_on_a_full_pipe(monkeypatch: pytest.MonkeyPatch) -> tuple[int, io.TextIOWrapper]:
    """``sys.stdout`` on a pipe filled with ``x`` bytes: nothing of ours fits until it is read.
    The pipe's read end, and the stream (the caller closes both)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_fd, b"x" * 4096)
    os.set_blocking(write_fd, True)
    stream = open(write_fd, "w", buffering=1)  # noqa: SIM115 - the caller closes it
    monkeypatch.setattr(sys, "stdout", stream)
    return read_fd, stream


def test_a_tail_lost_at_shutdown_is_said_in_the_log_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pipe nobody reads until shutdown's bound runs out: what is queued is given up, and the
    report — the count, and a line under each test id whose terminal was lost — goes out as soon
    as the reader drains, in what is left of the bound (the reader starts only once the sink has
    counted the queue lost: no timing decides it)."""
    from cvdiag.sinks.exit_flush import flush_all
    from tests.support.requests import in_request

    read_fd, stream = _stdout_on_a_full_pipe(monkeypatch)
    sink = StdoutSink()
    em = Emitter(Settings(enabled=True), sinks=[sink])
    for test_id in ("t-cut-1", "t-cut-2"):
        with in_request(test_id):
            em.emit("backend.agent.enter", metadata={"agent_name": "a"})
            em.emit("backend.response.complete", metadata={"http_status": 200})
    read: list[bytes] = []
    done = threading.Event()
    os.set_blocking(read_fd, False)

    def drain() -> None:
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(read_fd, 65536):
                read.append(chunk)

    def reader() -> None:
        while not sink.losses.total:  # until the sink counted what it had queued as lost
            time.sleep(0.005)
        while not done.is_set():
            drain()
            time.sleep(0.005)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    flush_all(2.0, [sink])
    done.set()
    thread.join(10)
    drain()
    stream.close()
    os.close(read_fd)
    text = b"".join(read).decode().lstrip("x")
    reports = [e for e in lines_of(text) if e["boundary"] == "cvdiag.queue_dropped"]
    assert [(r["outcome"], r["metadata"]) for r in reports] == [
        ("info", {"dropped_count": 4}),
        ("err", {"dropped_count": 2}),
        ("err", {"dropped_count": 2}),
    ]
    assert [r["test_id"] for r in reports[1:]] == ["t-cut-1", "t-cut-2"]
    for report in reports:
        assert_valid(report)
    assert sink.losses.stderr_line() is None  # flush_all said it on stderr already


def test_a_report_the_bound_cut_in_part_owes_only_its_unwritten_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drop report longer than one atomic write (the count and twelve cut test ids: several
    pieces of whole lines within ``PIPE_BUF``) meets a reader that makes room for one piece,
    then the bound. The next report writes the cut test ids that piece left out, and never the
    count again: owing the whole report once wrote counts that summed past what stderr said
    (four gunicorn workers behind a slow reader)."""
    from tests.support.requests import in_request

    read_fd, stream = _stdout_on_a_full_pipe(monkeypatch)
    sink = StdoutSink()
    em = Emitter(Settings(enabled=True), sinks=[sink])
    ids = [f"t-cut-{n:02d}" for n in range(12)]
    for test_id in ids:
        with in_request(test_id):
            em.emit("backend.agent.enter", metadata={"agent_name": "a"})
            em.emit("backend.response.complete", metadata={"http_status": 200})
    read: list[bytes] = []

    def room_for_one_piece() -> None:  # once the queue is counted lost: one pipe buffer freed
        while not sink.losses.total:
            time.sleep(0.005)
        read.append(os.read(read_fd, 4096))

    thread = threading.Thread(target=room_for_one_piece, daemon=True)
    thread.start()
    flush_all(1.0, [sink])
    thread.join(10)
    owed = list(sink.losses.cut_unreported)
    assert not sink.losses.unreported  # the count's line went out in the first piece
    assert owed
    assert owed == ids[-len(owed) :]  # the ids after that piece, in order
    os.set_blocking(read_fd, False)
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(read_fd, 65536):
            read.append(chunk)
    flush_all(1.0, [sink])  # the exit's flush after a SIGTERM's: the pipe has room now
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(read_fd, 65536):
            read.append(chunk)
    stream.close()
    os.close(read_fd)
    reports = [
        e
        for e in lines_of(b"".join(read).decode().lstrip("x"))
        if e["boundary"] == "cvdiag.queue_dropped"
    ]
    counts = [r["metadata"] for r in reports if r["outcome"] == "info"]
    assert counts == [{"dropped_count": 2 * len(ids)}]  # once, as stderr said it
    assert [r["test_id"] for r in reports if r["outcome"] == "err"] == ids  # each once
    assert not sink.losses.owing
