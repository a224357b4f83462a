"""``cvdiag_test_id`` and the plugin's artifacts: the id forwarded by every client the fixture
offers (to a real uvicorn server), a new id per rerun attempt recorded in JUnit XML, and
nothing missing silently (``--cvdiag-log``'s folder, a page or backend log that cannot be had)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from cvdiag.pytest_plugin import ForwardedTestId
from cvdiag.runs import read_junit
from cvdiag.schema.ids import new_uuid7
from tests.support.servers import serve_uvicorn

UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _echo(request: Request) -> PlainTextResponse:
    return PlainTextResponse(
        request.headers.get("x-test-id", "") + "|" + request.headers.get("x-other", "")
    )


ECHO = Starlette(routes=[Route("/", _echo)])


@pytest.fixture(autouse=True)
def _quiet_inner_sessions(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")


def test_every_client_the_fixture_offers_sends_the_id() -> None:
    test_id = ForwardedTestId(new_uuid7())
    assert UUID7.fullmatch(test_id)
    with serve_uvicorn(ECHO) as url:
        assert httpx.get(url, headers=test_id.headers).text == f"{test_id}|"
        with test_id.client(base_url=url, headers={"x-other": "kept"}) as http:
            assert http.get("/").text == f"{test_id}|kept"
        with test_id.client(library="httpx2", base_url=url) as http2:
            assert isinstance(http2, httpx2.Client)
            assert http2.get("/").text == f"{test_id}|"

        async def both() -> list[str]:
            async with (
                test_id.async_client(base_url=url) as a,
                test_id.async_client(library="httpx2", base_url=url) as b,
            ):
                return [(await a.get("/")).text, (await b.get("/")).text]

        assert asyncio.run(both()) == [f"{test_id}|", f"{test_id}|"]
    with pytest.raises(ValueError, match="library must be 'httpx' or 'httpx2'"):
        test_id.client(library="requests")


def test_a_rerun_forwards_a_new_id_and_junit_records_each(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_retry="""
import pytest

@pytest.mark.flaky(reruns=2)
def test_once_more(cvdiag_test_id, request):
    assert request.node.execution_count == 3, str(cvdiag_test_id)

def test_plain(cvdiag_test_id):
    pass
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:randomly", "--junitxml=junit.xml")
    result.assert_outcomes(passed=2)
    cases = {
        case.name.rsplit("::", 1)[-1]: case for case in read_junit(str(pytester.path / "junit.xml"))
    }
    retried = cases["test_once_more"]
    assert len(set(retried.test_ids())) == 3
    assert all(UUID7.fullmatch(test_id) for test_id in retried.test_ids())
    assert [attempt.outcome for attempt in retried.attempts] == ["failed", "failed", "passed"]
    assert retried.outcome == "flaky"
    assert cases["test_plain"].outcome == "passed"


EMITS = """
from cvdiag import emit

def test_emits(cvdiag_events):
    emit("backend.error.caught", outcome="err", metadata={"error_class": "ValueError"})
"""


def test_the_log_folder_is_made_and_an_unwritable_log_is_said(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_emits=EMITS)
    log = tmp_path / "out2" / "deeper" / "cvdiag.log"
    pytester.runpytest_inprocess(f"--cvdiag-log={log}").assert_outcomes(passed=1)
    assert b"backend.error.caught" in log.read_bytes()
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    result = pytester.runpytest_inprocess(f"--cvdiag-log={blocker / 'cvdiag.log'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--cvdiag-log: cannot write {blocker / 'cvdiag.log'}: *"])


def test_a_page_that_cannot_be_written_fails_a_passing_run(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_emits=EMITS)
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    out = blocker / "cvdiag.html"
    result = pytester.runpytest_inprocess(f"--cvdiag-report={out}", "--cvdiag-report-all")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*cvdiag report: not written: {out}: *"])


UNFINISHED = """
import orjson


def test_its_backend_never_finished(cvdiag_test_id):
    # What a backend killed mid-request leaves: the ingress of the test's id, no terminal.
    envelope = {
        "schema_version": 1, "test_id": str(cvdiag_test_id), "trace_id": "t", "span_id": "s",
        "parent_span_id": None, "layer": "backend", "boundary": "backend.request.ingress",
        "slug": "chat", "demo": "default", "ts": "2026-11-28T10:00:00.000Z", "mono_ns": 1,
        "duration_ms": None, "outcome": "info", "edge_headers": {}, "metadata": {},
    }
    with open("backend.log", "ab") as log:
        log.write(b"CVDIAG " + orjson.dumps(envelope) + b"\\n")
    assert False, "the answer never came"
"""


def test_an_unfinished_story_is_marked_and_a_missing_log_is_said(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_backend=UNFINISHED)
    result = pytester.runpytest_inprocess(
        "--cvdiag-backend-log=backend.log",
        "--cvdiag-backend-log=nowhere-*.log",
        "--cvdiag-backend-wait=0",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- cvdiag backend replay -*",
            "test id *: 1 envelope*",
            "*(incomplete: no request of it has ended in the log)",
            "cvdiag backend log: 1 test id(s) incomplete after waiting 0 s (--cvdiag-backend-wait)",
        ]
    )
    alone = pytester.runpytest_inprocess("--cvdiag-backend-log=nowhere-*.log")
    alone.stdout.fnmatch_lines(["cvdiag backend log: error: no file matches nowhere-*.log"])


def test_the_first_token_timeout_reaches_the_page(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_emits=EMITS)
    out = tmp_path / "page.html"
    pytester.runpytest_inprocess(
        f"--cvdiag-report={out}", "--cvdiag-first-token-timeout=2.5"
    ).assert_outcomes(passed=1)
    assert "first-token timeout 2.5 s" in out.read_text(encoding="utf-8")
