"""Several worker processes on one stdout (issue 34): whole lines, and no silent loss.

Real servers as users deploy them (gunicorn with four ``UvicornWorker`` workers, ``uvicorn
--workers 4``) at the debug tier, with stdout a file, a pipe read at once, a pipe read slowly,
and a pipe nobody reads while the load runs (so the workers must drop), stopped with SIGTERM to
the master, once mid-load. In every case: no torn line, ``validate --strict`` finds nothing
invalid, and every request either has its whole story or is covered by what the workers said
they did not write, the counts equal.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import cast

import orjson
import pytest

from cvdiag.sinks.losses import LOGGED_IDS
from tests.support.cli import cvdiag
from tests.support.workers import Run, Server, Stdout, run_workers
from tests.support.workers_app import EVENTS

#: A story at the debug tier: ingress, first byte, each event, the terminal.
STORY = EVENTS + 3
DROPPED = "cvdiag.queue_dropped"
TERMINALS = ("backend.response.complete", "backend.sse.aborted")


def check(run: Run, folder: Path) -> tuple[int, int]:
    """The run's invariants; returns (envelopes missing, envelopes said not written)."""
    assert run.torn() == []
    log = folder / "log"
    log.write_bytes(run.out)
    done = cvdiag("validate", "--strict", str(log))
    assert done.returncode == 0, done.stdout + done.stderr
    envelopes = run.envelopes()
    stories = [e for e in envelopes if e["boundary"] != DROPPED]
    present = Counter(str(e["test_id"]) for e in stories if str(e["test_id"]).startswith("w-"))
    assert set(present) <= set(run.statuses)
    assert all(count <= STORY for count in present.values())
    # A request the server answered, or began to, has its whole story or lost part of it.
    served = {t for t, status in run.statuses.items() if status == 200 or present[t]}
    missing = sum(STORY - present[t] for t in served)
    said = run.not_written()
    assert missing == said, run.err[-2000:]
    # A report under a test id of its own counts a process's losses; one under a story's id
    # names a story whose terminal was lost, and counts its envelopes lost, which it lacks.
    reports = [e for e in envelopes if e["boundary"] == DROPPED]
    reported = sum(
        cast("dict[str, int]", e["metadata"])["dropped_count"]
        for e in reports
        if not str(e["test_id"]).startswith("w-")
    )
    assert reported <= said  # the log says what it could; stderr says it all
    for report in reports:
        test_id = str(report["test_id"])
        if test_id.startswith("w-"):
            lost = cast("dict[str, int]", report["metadata"])["dropped_count"]
            assert lost == STORY - present[test_id], report
            assert not any(e["test_id"] == test_id and e["boundary"] in TERMINALS for e in stories)
    return missing, said


def cut_by_writer(run: Run) -> set[str]:
    """The stories the log says lost their terminal (a report under their own test id)."""
    return {
        str(e["test_id"])
        for e in run.envelopes()
        if e["boundary"] == DROPPED and str(e["test_id"]).startswith("w-")
    }


@pytest.mark.parametrize(
    ("server", "stdout"),
    [("gunicorn", "file"), ("gunicorn", "pipe"), ("uvicorn", "pipe")],
)
def test_every_story_is_whole_when_the_reader_keeps_up(
    server: Server, stdout: Stdout, tmp_path: Path
) -> None:
    run = run_workers(server, stdout, tmp_path, requests=120)
    assert set(run.statuses.values()) == {200}, run.errors[:5]
    assert check(run, tmp_path) == (0, 0)
    # Read back as one log: every test id listed, each with its whole story, healthy.
    listed = cvdiag("ls", "--json", str(tmp_path / "log"))
    assert listed.returncode == 0, listed.stderr
    rows = orjson.loads(listed.stdout)
    classes = {row["test_id"]: row["flap_class"] for row in rows if row["test_id"].startswith("w-")}
    assert classes == dict.fromkeys(run.statuses, "healthy")


@pytest.mark.parametrize("server", ["gunicorn", "uvicorn"])
def test_a_wedged_reader_costs_envelopes_that_are_all_said(server: Server, tmp_path: Path) -> None:
    # Nobody reads stdout while 160 requests run: 64 KiB of pipe and 4 x 50 queued lines hold
    # a fraction of 160 x 11 envelopes, so the workers must drop; then the reader takes 4 KiB
    # every 20 ms while they shut down.
    run = run_workers(server, "wedged", tmp_path, requests=160, queue_size=50)
    assert set(run.statuses.values()) == {200}, run.errors[:5]
    missing, _ = check(run, tmp_path)
    assert missing > 0
    assert "envelopes not written (queue full" in run.err
    assert "test ids without their terminal: w-" in run.err
    # A story the drops cut short is said to be incomplete, or, when the log says its terminal
    # was not written, cut by the writer: never healthy.
    stories = [e for e in run.envelopes() if e["boundary"] != DROPPED]
    present = Counter(str(e["test_id"]) for e in stories)
    cut = sorted(t for t, n in present.items() if t.startswith("w-") and n < STORY)
    assert cut
    listed = orjson.loads(cvdiag("ls", "--json", str(tmp_path / "log")).stdout)
    classes = {row["test_id"]: row["flap_class"] for row in listed}
    by_writer = cut_by_writer(run)
    assert {classes[t] for t in cut if t not in by_writer} <= {"incomplete"}
    assert {classes[t] for t in by_writer} <= {"cut-by-writer"}
    assert {classes[t] for t in present if t.startswith("w-") and t not in cut} == {"healthy"}
    cut = [t for t in cut if t not in by_writer][:3]
    for test_id in cut:
        done = cvdiag("classify", test_id, str(tmp_path / "log"), "--json")
        assert orjson.loads(done.stdout)["flap_class"] == "incomplete", done.stdout
    for only in ([], ["--test-id", cut[0]]):  # the drop reports are read either way
        page = tmp_path / "page.html"
        done = cvdiag("report", str(tmp_path / "log"), "-o", str(page), *only)
        assert done.returncode == 0, done.stderr
        assert 'class="badge c-incomplete"' in page.read_text()


def test_a_tail_lost_at_shutdown_is_said_in_the_log_and_not_counted_as_failed(
    tmp_path: Path,
) -> None:
    """Nobody reads while the load runs (the workers queue it all), then a reader takes 4 KiB
    every 20 ms while they shut down: the bound runs out with lines still queued. Within it each
    worker writes what it lost: its count, and a line under each test id whose terminal was
    not written. ``ls``, ``classify`` and ``report`` call those stories cut by the writer, and
    the report's headline counts them apart from the failed."""
    run = run_workers("gunicorn", "wedged", tmp_path, requests=160)
    assert set(run.statuses.values()) == {200}, run.errors[:5]
    assert "envelopes not written (reader too slow at shutdown)" in run.err
    check(run, tmp_path)
    stories = [e for e in run.envelopes() if e["boundary"] != DROPPED]
    ended = {str(e["test_id"]) for e in stories if e["boundary"] in TERMINALS}
    unended = set(run.statuses) - ended
    by_writer = cut_by_writer(run)
    assert unended
    # Every story without its terminal is said in the log, up to LOGGED_IDS per process (the
    # count line says the rest): a worker that took most of the load may pass that bound.
    assert by_writer <= unended
    assert by_writer == unended or len(by_writer) >= LOGGED_IDS
    log = str(tmp_path / "log")
    listed = orjson.loads(cvdiag("ls", "--json", log).stdout)
    classes = {row["test_id"]: row["flap_class"] for row in listed}
    assert {classes[t] for t in by_writer} == {"cut-by-writer"}
    # A story past that bound may have lost every line (then the log's count holds it).
    assert {classes.get(t, "lost") for t in set(run.statuses) - by_writer} <= {
        "healthy",
        "incomplete",
        "lost",
    }
    failed = orjson.loads(cvdiag("ls", "--failed", "--json", log).stdout or "[]")
    assert not by_writer & {row["test_id"] for row in failed}
    said = orjson.loads(cvdiag("classify", sorted(by_writer)[0], log, "--json").stdout)
    assert said["flap_class"] == "cut-by-writer"
    assert "cut by the writer" in said["reason"]
    page = tmp_path / "page.html"
    done = cvdiag("report", log, "-o", str(page))
    assert done.returncode == 0, done.stderr
    assert f"{len(by_writer)} cut by the writer" in done.stderr
    text = page.read_text()
    failing = sum(1 for t in classes if classes[t] not in ("healthy", "cut-by-writer"))
    assert f"{failing} of {len(listed)} test ids failed; {len(by_writer)} cut by the writer" in text


def test_sigterm_mid_load_loses_nothing_unsaid(tmp_path: Path) -> None:
    run = run_workers("gunicorn", "slow", tmp_path, requests=160, sigterm_mid_load=True)
    assert 200 in run.statuses.values()
    check(run, tmp_path)


def test_the_apps_own_lines_are_never_torn_by_cvdiags(tmp_path: Path) -> None:
    # The app prints one JSON line per request to the same stdout, read 4 KiB every 20 ms.
    run = run_workers("gunicorn", "slow", tmp_path, requests=120, app_lines=True, queue_size=50)
    assert set(run.statuses.values()) == {200}, run.errors[:5]
    check(run, tmp_path)
    app_lines = [line for line in run.lines() if b'"app":"log"' in line]
    assert len(app_lines) == 120
    for line in app_lines:
        assert line.startswith(b'{"app":"log"')
        assert orjson.loads(line)["test_id"].startswith("w-")
