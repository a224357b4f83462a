"""``--cvdiag-probe-log``: real pytest sessions (pytester) whose tests send requests with httpx
clients, and what the probe wrote for them: where, when it is on, each test id opened at its
test's start and closed with its outcome, under xdist too, and what the page reads."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from cvdiag.core.guard import failures
from cvdiag.runs import read_junit
from tests.schema_check import assert_valid

TESTS = """
import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route


async def ok(request):
    return PlainTextResponse("ok")


async def events(request):
    async def body():
        for n in range(3):
            yield f"event: token\\ndata: {n}\\n\\n"

    return StreamingResponse(body(), media_type="text/event-stream")


app = Starlette(routes=[Route("/ok", ok), Route("/events", events)])


def transport():
    return httpx.ASGITransport(app=app)


async def test_passes(cvdiag_test_id):
    async with cvdiag_test_id.async_client(transport=transport(), base_url="http://app") as http:
        assert (await http.get("/ok")).status_code == 200


async def test_fails(cvdiag_test_id):
    async with cvdiag_test_id.async_client(transport=transport(), base_url="http://app") as http:
        await http.get("/events")
    assert False


def test_own_header():
    headers = {"x-test-id": "own-header-id"}
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(204)),
                      headers=headers) as http:
        http.get("http://app/ok")


@pytest.mark.skip(reason="not today")
def test_skipped(cvdiag_test_id):
    pass


def test_no_request(cvdiag_test_id):
    pass
"""


@pytest.fixture
def session(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_app=TESTS)
    return pytester


def read(path: Path) -> list[dict[str, Any]]:
    found = []
    for raw in path.read_bytes().splitlines():
        assert raw.startswith(b"CVDIAG "), raw  # whole lines, never two glued
        envelope = orjson.loads(raw[len(b"CVDIAG ") :])
        assert_valid(envelope)
        found.append(envelope)
    return found


def by_test(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for env in lines:
        test = env["metadata"].get("test") if env["boundary"] == "probe.start" else None
        if test is not None:
            found.setdefault(test.rpartition("::")[2], []).append(env)
            continue
        for envelopes in found.values():
            if envelopes[0]["test_id"] == env["test_id"]:
                envelopes.append(env)
    return found


def test_each_test_id_opens_at_its_test_and_closes_with_its_outcome(
    session: pytest.Pytester,
) -> None:
    result = session.runpytest_inprocess("-p", "no:randomly", "--cvdiag-probe-log=probe.log")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    tests = by_test(read(session.path / "probe.log"))
    assert sorted(tests) == ["test_fails", "test_no_request", "test_own_header", "test_passes"]
    assert [env["boundary"] for env in tests["test_passes"]] == [
        "probe.start",  # when the fixture gave the id, before any request
        "probe.message.send",
        "probe.network.response",
        "probe.exit",
    ]
    assert [env["boundary"] for env in tests["test_fails"]][-2:] == [
        "probe.sse.event",  # the first event only, at the default VERBOSE
        "probe.exit",
    ]
    exits = {name: envs[-1]["metadata"] for name, envs in tests.items()}
    assert {name: (e["terminal_outcome"], e["test_outcome"]) for name, e in exits.items()} == {
        "test_passes": ("ok", "passed"),
        "test_fails": ("err", "failed"),
        "test_own_header": ("ok", "passed"),
        "test_no_request": ("ok", "passed"),
    }
    assert exits["test_fails"]["sse_event_count"] == 3
    assert exits["test_no_request"]["requests"] == 0
    assert tests["test_own_header"][0]["test_id"] == "own-header-id"


def test_the_debug_option_writes_every_event(session: pytest.Pytester) -> None:
    result = session.runpytest_inprocess(
        "--cvdiag-probe-log=probe.log", "--cvdiag-probe-debug", "-k", "fails"
    )
    result.assert_outcomes(failed=1, deselected=4)
    events = [env for env in read(session.path / "probe.log") if "sse.event" in env["boundary"]]
    assert [env["metadata"]["sequence_num"] for env in events] == [0, 1, 2]


def test_on_beside_the_log_off_when_asked_and_without_a_log(session: pytest.Pytester) -> None:
    session.runpytest_inprocess("-k", "passes")
    assert not list(session.path.rglob("*probe*"))
    session.runpytest_inprocess("-k", "passes", "--cvdiag-log=logs/run.log")
    assert [env["boundary"] for env in read(session.path / "logs" / "run-probe.log")] == [
        "probe.start",
        "probe.message.send",
        "probe.network.response",
        "probe.exit",
    ]
    session.runpytest_inprocess(
        "-k", "passes", "--cvdiag-log=other/run.log", "--cvdiag-probe-log=off"
    )
    assert not list((session.path / "other").glob("*probe*"))


def test_the_report_page_reads_the_probe_beside_it(session: pytest.Pytester) -> None:
    page = session.path / "out" / "page.html"
    for _ in range(2):  # the second session replaces the probe log, as it does the page
        result = session.runpytest_inprocess(
            "-p", "no:randomly", f"--cvdiag-report={page}", "--cvdiag-report-all"
        )
        result.assert_outcomes(passed=3, failed=1, skipped=1)
        probe = session.path / "out" / "page-probe.log"
        assert len({env["test_id"] for env in read(probe)}) == 4
    text = html.unescape(page.read_text(encoding="utf-8"))
    assert re.search(r"pytest session, page-probe\.log", text)  # the page names what it read
    assert re.search(r"<code>probe\.network\.response</code>", text)
    # The test id a test sent in its own header is the test's, as the fixture's is.
    assert re.search(r"own-header-id.{0,400}test_own_header", text, re.S)


def test_xdist_workers_write_whole_lines_to_one_file(session: pytest.Pytester) -> None:
    result = session.runpytest_inprocess("-n", "2", "--cvdiag-probe-log=probe.log")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    lines = read(session.path / "probe.log")
    starts = {env["test_id"] for env in lines if env["boundary"] == "probe.start"}
    exits = {env["test_id"] for env in lines if env["boundary"] == "probe.exit"}
    assert len(starts) == 4
    assert starts == exits


def test_an_unwritable_probe_log_fails_no_test(session: pytest.Pytester) -> None:
    (session.path / "a-folder").mkdir()
    before = failures["sink"]
    result = session.runpytest_inprocess("-k", "passes", "--cvdiag-probe-log=a-folder")
    result.assert_outcomes(passed=1, deselected=4)
    assert result.ret == pytest.ExitCode.OK
    assert failures["sink"] > before  # counted (and said once per process on stderr)


def test_the_tests_own_timeout_is_its_exit(pytester: pytest.Pytester) -> None:
    """pytest-timeout failing a test (its signal method) is the test's own timeout; a secret in
    the test's name (a parameter) never reaches the line."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_slow="""
import time

import httpx
import pytest


@pytest.mark.parametrize("key", ["sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6h"])
@pytest.mark.timeout(0.5, method="signal")
def test_slow(cvdiag_test_id, key):
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)),
                      headers=cvdiag_test_id.headers) as http:
        http.get("http://app/")
    time.sleep(5)
"""
    )
    result = pytester.runpytest_inprocess("--cvdiag-probe-log=probe.log")
    result.assert_outcomes(failed=1)
    log = pytester.path / "probe.log"
    assert b"sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6h" not in log.read_bytes()
    start, *_, end = read(log)
    assert start["metadata"]["test"].startswith("test_slow.py::test_slow[")
    assert end["outcome"] == "timeout"
    assert end["metadata"]["terminal_outcome"] == "timeout"
    assert end["metadata"]["test_outcome"] == "failed"


def test_a_test_id_of_the_tests_own_is_in_its_junit_testcase(session: pytest.Pytester) -> None:
    result = session.runpytest_inprocess(
        "-k", "own_header or passes", "--cvdiag-probe-log=probe.log", "--junitxml=junit.xml"
    )
    result.assert_outcomes(passed=2, deselected=3)
    tests = {case.name: case for case in read_junit(str(session.path / "junit.xml"))}
    ids = {name.rpartition("::")[2]: case.attempts[-1].test_ids for name, case in tests.items()}
    assert ids["test_own_header"] == ["own-header-id"]
    assert len(ids["test_passes"]) == 1  # the fixture's, once
