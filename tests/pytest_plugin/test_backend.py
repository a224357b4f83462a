"""The CI loop of issue 38, end to end: a pytest session whose backend runs in a process of
its own (uvicorn started by the session's fixture, one worker and two), tests that forward
``cvdiag_test_id``, pass, fail (an assertion, an ``httpx.ReadTimeout``), pass on a rerun
(pytest-rerunfailures) and skip; then ``--cvdiag-backend-log`` and ``--cvdiag-report``. Each
failed test's failure section replays its backend story; the page shows each failed and flaky
test with its own failure text and every attempt's story, and counts tests as pytest does."""

from __future__ import annotations

import html
import re

import pytest

from cvdiag.runs import read_junit
from tests.support.report import Page

#: The backend, run by uvicorn in its own process: its stdout (the CVDIAG lines) is the log.
BACKEND = """
import asyncio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, agent_scope


async def ok(request):
    return PlainTextResponse("ok")


async def boom(request):
    try:
        async with agent_scope("chat-agent"):
            raise RuntimeError("the model's answer could not be parsed")
    except RuntimeError:
        return PlainTextResponse("down", status_code=500)


async def slow(request):
    async with agent_scope("chat-agent"):
        await asyncio.sleep(float(request.query_params.get("s", "2")))
    return PlainTextResponse("late")


app = CvdiagMiddleware(
    Starlette(routes=[Route("/ok", ok), Route("/boom", boom), Route("/slow", slow)])
)
"""

#: The session's fixture: the backend started once, its stdout to backend.log, waited for.
CONFTEST = """
import os
import socket
import subprocess
import sys
import time

import pytest


@pytest.fixture(scope="session")
def backend():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_VERBOSE": "1"}
    with open("backend.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "backend_app:app", "--port", str(port),
             "--workers", os.environ["BACKEND_WORKERS"], "--log-level", "warning"],
            stdout=log, env=env,
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, "the backend exited"
            assert time.monotonic() < deadline, "the backend never listened"
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    process.terminate()  # SIGTERM: cvdiag writes what is queued before the process ends
    process.wait(timeout=60)
"""

TESTS = """
import httpx
import pytest


def test_answers(backend, cvdiag_test_id):
    with cvdiag_test_id.client(base_url=backend) as http:
        assert http.get("/ok").status_code == 200


def test_asserts_a_500(backend, cvdiag_test_id):
    response = httpx.get(backend + "/boom", headers=cvdiag_test_id.headers)
    assert response.status_code == 500


def test_fails_on_the_backend_error(backend, cvdiag_test_id):
    with cvdiag_test_id.client(base_url=backend) as http:
        assert http.get("/boom").status_code == 200


def test_times_out(backend, cvdiag_test_id):
    with cvdiag_test_id.client(base_url=backend, timeout=0.3) as http:
        http.get("/slow", params={"s": "2"})


@pytest.mark.flaky(reruns=1)
def test_flaky(backend, cvdiag_test_id, request):
    # Fails on its first attempt only (its backend answer was an error), passes on the rerun.
    path = "/boom" if request.node.execution_count == 1 else "/ok"
    with cvdiag_test_id.client(base_url=backend) as http:
        assert http.get(path).status_code == 200


@pytest.mark.skip(reason="not today")
def test_skipped(backend, cvdiag_test_id):
    pass
"""


@pytest.fixture
def session(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(backend_app=BACKEND, conftest=CONFTEST, test_chat=TESTS)
    return pytester


@pytest.mark.parametrize(
    ("workers", "xdist"),
    [("1", "0"), ("2", "0"), ("1", "2")],
    ids=["one-worker", "two-workers", "xdist-two-backends-one-log"],
)
def test_a_backend_in_its_own_process_tells_each_tests_story(
    session: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: str, xdist: str
) -> None:
    """Under xdist each pytest worker starts its own backend, all writing to one log."""
    monkeypatch.setenv("BACKEND_WORKERS", workers)
    monkeypatch.chdir(session.path)
    out = session.path / "artifacts" / "cvdiag.html"
    result = session.runpytest_inprocess(
        "-p",
        "no:randomly",
        "-n",
        xdist,
        "--cvdiag-backend-log=backend.lo*",  # a glob, as for rotated logs
        "--cvdiag-backend-wait=60",  # a bound: the wait ends as soon as each story is whole
        f"--cvdiag-report={out}",
        "--junitxml=artifacts/junit.xml",
    )
    result.assert_outcomes(passed=3, failed=2, skipped=1)
    output = result.stdout.str()
    result.stdout.fnmatch_lines(["*= 2 failed, 3 passed, 1 skipped, 1 rerun in *"])

    # Each failed test's section replays its own backend story.
    sections = re.split(r"_{5,} (test_\w+) _{5,}", output)
    failures = dict(zip(sections[1::2], sections[2::2], strict=True))
    assert set(failures) == {"test_fails_on_the_backend_error", "test_times_out"}
    replay = failures["test_fails_on_the_backend_error"]
    assert "cvdiag backend replay" in replay
    assert "backend.error.caught" in replay
    assert "RuntimeError" in replay
    assert "incomplete" not in replay
    slow = failures["test_times_out"]
    assert "ReadTimeout" in slow
    # The backend answered after the client left: the late lines were waited for.
    assert "backend.agent.exit" in slow
    assert "backend.response.complete" in slow or "backend.sse.aborted" in slow

    # The JUnit XML carries each attempt's id; the page joins them to the backend's stories.
    cases = {
        case.name.rsplit("::", 1)[-1]: case for case in read_junit(str(out.parent / "junit.xml"))
    }
    assert {name: len(case.test_ids()) for name, case in cases.items()} == {
        "test_answers": 1,
        "test_asserts_a_500": 1,
        "test_fails_on_the_backend_error": 1,
        "test_times_out": 1,
        "test_flaky": 2,  # one per attempt: read back as a failed attempt, then the pass
        "test_skipped": 0,  # skipped before its fixtures were set up
    }
    assert cases["test_flaky"].outcome == "flaky"
    page = Page(out.read_text(encoding="utf-8"))
    title = re.search(r"<title>(.*?)</title>", page.source)
    assert title is not None
    assert html.unescape(title.group(1)) == "cvdiag report: 2 failed, 1 flaky, 2 passed, 1 skipped"
    result.stdout.fnmatch_lines(
        [f"*cvdiag report: {out} (2 failed, 1 flaky, 2 passed, 1 skipped;*"]
    )
    shown = {case.name.rsplit("::", 1)[-1]: case for case in page.cases}
    assert list(shown) == ["test_fails_on_the_backend_error", "test_times_out", "test_flaky"]
    failed = shown["test_fails_on_the_backend_error"]
    assert "assert 500 == 200" in failed.text
    (test_id,) = cases["test_fails_on_the_backend_error"].test_ids()
    assert page.section_of(test_id).flap_class == "backend-error"
    assert f"#{page.section_of(test_id).id}" in failed.links
    timed_out = shown["test_times_out"]
    assert "ReadTimeout: timed out" in timed_out.text  # httpx's, or httpcore's it wraps
    flaky = shown["test_flaky"]
    assert "attempt 1: failed" in flaky.text
    assert "attempt 2: passed" in flaky.text
    assert len(flaky.links) == 2  # each attempt's own test id, each drawn
    first, then = (page.sections[link[1:]] for link in flaky.links)
    assert first.flap_class == "backend-error"
    assert then.flap_class == "healthy"
    # Evidence names the backend's log, which is still there.
    assert "backend.log" in page.source
    assert (session.path / "backend.log").is_file()
