"""The stdout sink under a ``sys.stdout`` that hands its writes to a logger (Celery's
``LoggingProxy``, the real one): envelopes go to the process's own stdout, or, where it has none,
through the logger one record per line, which every reader takes back; stderr says which, once.
tests/e2e/test_job_queues.py runs a real Celery worker with its defaults.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cvdiag.logs.reading import split_envelope
from cvdiag.sinks import host_stdout

celery_log = pytest.importorskip("celery.utils.log", reason="celery not installed")

ROOT = Path(__file__).resolve().parents[2]

#: A process whose stdout Celery's proxy has taken over, as a worker's is; argv[1] says whether
#: it still has a stdout of its own.
PROCESS = textwrap.dedent(
    """
    import logging, os, sys
    from celery.utils.log import LoggingProxy

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s: %(levelname)s/%(processName)s] %(message)s")
    )
    logger = logging.getLogger("celery.redirected")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    if sys.argv[1] == "none":
        sys.__stdout__ = None
    sys.stdout = LoggingProxy(logger, logging.WARNING)

    from cvdiag import agent_scope, configure, flush

    configure()
    for i in range(20):
        with agent_scope(f"agent-{i}"):
            pass
    print("the app's own line")
    flush()
    """
)


def _run(own_stdout: str) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CVDIAG_BACKEND_EMITTER": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROCESS, own_stdout],
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    return done.stdout.decode(), done.stderr.decode()


def _envelopes(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        json_text, aside = split_envelope(line.encode())
        assert not aside, line
        if json_text is not None:
            found.append(json_text.decode())
    return found


def test_the_envelopes_go_to_the_processs_own_stdout_and_the_logger_keeps_the_apps_lines() -> None:
    out, err = _run("fd")
    assert len(_envelopes(out)) == 40  # every enter and exit, each a whole line of stdout
    assert all(line.startswith("CVDIAG {") for line in out.splitlines())
    assert "CVDIAG {" not in err  # no envelope reached the logger (a warning may name a variable)
    said = [line for line in err.splitlines() if line.startswith("cvdiag: sys.stdout hands")]
    assert said == [f"cvdiag: {host_stdout.VIA_FD}"]
    assert any(line.endswith("] the app's own line") for line in err.splitlines())


def test_without_a_stdout_of_its_own_each_envelope_is_a_record_of_its_own() -> None:
    out, err = _run("none")
    assert out == ""
    records = [line for line in err.splitlines() if "CVDIAG {" in line]
    assert len(records) == 40
    assert all(line.startswith("[") and "/MainProcess] CVDIAG {" in line for line in records)
    assert len(_envelopes(err)) == 40  # the readers take Celery's record head
    said = [line for line in err.splitlines() if line.startswith("cvdiag: sys.stdout hands")]
    assert said == [f"cvdiag: {host_stdout.VIA_PROXY}"]


def test_a_stream_with_a_descriptor_or_no_logger_is_written_as_it_is() -> None:
    proxy = celery_log.LoggingProxy(logging.getLogger("x"))
    assert host_stdout.hands_to_logger(proxy)
    assert not host_stdout.hands_to_logger(io.StringIO())
    assert not host_stdout.hands_to_logger(sys.__stderr__)

    class WithFd(io.StringIO):
        logger = logging.getLogger("y")

        def fileno(self) -> int:
            return 2

    assert not host_stdout.hands_to_logger(WithFd())


@pytest.mark.parametrize(
    "head",
    [
        b"[2026-12-07 16:08:02,550: WARNING/ForkPoolWorker-2] ",
        b"[2026-12-07 16:08:02,550: WARNING/MainProcess] ",
        b"worker-1  | [2026-12-07 16:08:02,550: WARNING/ForkPoolWorker-12] ",
    ],
)
def test_celerys_record_head_is_read(head: bytes) -> None:
    assert split_envelope(head + b'CVDIAG {"a":1}') == (b'{"a":1}', False)


@pytest.mark.parametrize(
    "head",
    [b"[not a date: WARNING/x] ", b"[2026-12-07 16:08:02,550: WARNING/x] text ", b"[] "],
)
def test_other_brackets_are_set_aside(head: bytes) -> None:
    assert split_envelope(head + b'CVDIAG {"a":1}') == (None, True)
