"""``cvdiag report LOG --junit XML...``: a real backend's log (uvicorn on 127.0.0.1, requests
sent with the test ids the JUnit files name), joined to JUnit files shaped as Playwright's,
vitest's and Jest's reporters write them; a bad JUnit file is one error and loses nothing."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, agent_scope
from cvdiag.schema.ids import join_key
from tests.report.test_browser import wait_ended, writing
from tests.support import junit
from tests.support.report import TAGS, Page, run
from tests.support.servers import serve_uvicorn

OK_ID, BOOM_ID, FLAKY_FIRST, FLAKY_THEN, VITEST_ID, JEST_ID = (
    "pw-answers",
    "pw-boom",
    "pw-flaky-1",
    "pw-flaky-2",
    "vitest-asserts-500",
    "jest-local-chat answers",  # as docs/ci.md makes it: normalised alike on both sides
)


def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def _boom(request: Request) -> PlainTextResponse:
    try:
        async with agent_scope("chat-agent"):  # the agent fails; the backend answers 500
            raise RuntimeError("the model's answer could not be parsed")
    except RuntimeError:
        return PlainTextResponse("down", status_code=500)


def backend_log(log: Path) -> None:
    """What a backend wrote while the tests ran: each test id's request, served by uvicorn."""
    app = CvdiagMiddleware(Starlette(routes=[Route("/ok", _ok), Route("/boom", _boom)]))
    calls = {
        OK_ID: "/ok",
        # The test failed on its own assertion: its request is healthy (and its path long, as a
        # query string can make it: the page must still show it whole at phone width).
        BOOM_ID: "/ok?conversation=" + "y" * 200,
        FLAKY_FIRST: "/boom",
        FLAKY_THEN: "/ok",
        VITEST_ID: "/boom",  # a test that asserts a 500: it passed, its request is an error
        JEST_ID: "/ok",
    }
    with writing(log) as memory, serve_uvicorn(app) as url, httpx.Client(base_url=url) as http:
        for test_id, path in calls.items():
            http.get(path, headers={"x-test-id": test_id})
        wait_ended(memory, [join_key(test_id) or test_id for test_id in calls])


def test_junit_files_of_three_runners_joined_to_the_backend_log(tmp_path: Path) -> None:
    log = tmp_path / "backend.log"
    backend_log(log)
    playwright = junit.playwright(
        tmp_path / "playwright.xml",
        [
            ("chat › answers", "passed", [OK_ID], []),
            ("chat › streams", "failed", [BOOM_ID], []),
            ("chat › retries", "passed", [FLAKY_THEN], [("flakyFailure", FLAKY_FIRST)]),
        ],
    )
    vitest = junit.vitest(
        tmp_path / "vitest.xml", [("chat > asserts a 500", "passed", [VITEST_ID])]
    )
    jest = junit.jest(
        tmp_path / "jest.xml", [("answers", "passed", [JEST_ID]), ("later", "skipped", [])]
    )
    out = tmp_path / "page.html"
    done = run(
        "report",
        str(log),
        "-o",
        str(out),
        "--all",
        "--junit",
        str(playwright),
        str(vitest),
        str(jest),
    )
    assert done.code == 0, done.stderr
    assert "tests: 1 failed, 1 flaky, 3 passed, 1 skipped" in done.stderr
    page = Page(out.read_text(encoding="utf-8"))
    assert "<title>cvdiag report: 1 failed, 1 flaky, 3 passed, 1 skipped</title>" in page.source
    by_name = {case.name: case for case in page.cases}
    assert [case.outcome for case in page.cases] == [
        "failed", "flaky", "passed", "passed", "passed", "skipped"
    ]  # fmt: skip
    failed = by_name["chat.spec.ts::chat › streams"]
    assert "Expected: 200" in failed.text
    assert "Received: 500" in failed.text
    # The failed test's request was healthy: drawn all the same, and linked from the test.
    story = page.section_of(BOOM_ID)
    assert story.flap_class == "healthy"
    assert f"#{story.id}" in failed.links
    flaky = by_name["chat.spec.ts::chat › retries"]
    assert "attempt 1: failed" in flaky.text
    assert "attempt 2: passed" in flaky.text
    assert f"#{page.section_of(FLAKY_FIRST).id}" in flaky.links
    assert f"#{page.section_of(FLAKY_THEN).id}" in flaky.links
    assert page.section_of(FLAKY_FIRST).flap_class == "backend-error"
    # The class stays beside the test id; the test that asserted a 500 still passed.
    asserted = by_name["test/chat.test.ts::chat > asserts a 500"]
    assert asserted.outcome == "passed"
    assert "backend-error" in asserted.text
    assert page.rows[VITEST_ID] == "backend-error"
    assert "not in the log" not in "".join(case.text for case in page.cases[:5])


def test_a_bad_junit_file_is_one_error_and_the_page_keeps_the_rest(tmp_path: Path) -> None:
    log = tmp_path / "backend.log"
    backend_log(log)
    good = junit.vitest(tmp_path / "ok.xml", [("chat > asserts a 500", "passed", [VITEST_ID])])
    hostile = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    junit.vitest(good, [("chat > asserts a 500", "passed", [VITEST_ID]), (hostile, "failed", [])])
    bad = tmp_path / "bad.xml"
    bad.write_text('<!DOCTYPE x [<!ENTITY a "b">]><testsuites/>', encoding="utf-8")
    out = tmp_path / "page.html"
    done = run("report", str(log), "--all", "--junit", str(bad), str(good), "-o", str(out))
    assert done.code == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert errors == [f"cvdiag: error: report: {bad}: not read: it declares a DOCTYPE (refused:"
                      " entities are never expanded)"]  # fmt: skip
    page = Page(out.read_text(encoding="utf-8"))
    assert [case.outcome for case in page.cases] == ["failed", "passed"]
    assert page.cases[0].name == f"test/chat.test.ts::{hostile}"  # text, never markup
    assert "<script>alert" not in page.source
    assert {tag for tag, _ in page.elements} <= TAGS
    # Only the run's test ids: the log's five others are no test of these JUnit files.
    assert list(page.rows) == [VITEST_ID]
    assert "only the test ids the JUnit files name are listed" in page.source
