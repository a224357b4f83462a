"""``pytest --cvdiag-report=PATH``: real pytest sessions (pytester) over a real Starlette app
behind ``CvdiagMiddleware``, read back from the page they wrote."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

#: The inner session's tests: each request names its test id (``x-test-id``), so the page's
#: test ids are known; ``/boom`` answers 503, which cvdiag classifies as a failed request.
APP = """
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from cvdiag import CvdiagMiddleware


def ok(request):
    return PlainTextResponse("ok")


def boom(request):
    return PlainTextResponse("down", status_code=503)


app = CvdiagMiddleware(Starlette(routes=[Route("/ok", ok), Route("/boom", boom)]))


def call(path, test_id):
    with TestClient(app) as client:
        return client.get(path, headers={"x-test-id": test_id})
"""

TWO_TESTS = """
def test_passes(cvdiag_events):
    assert call("/ok", "passing-request").status_code == 200


def test_fails(cvdiag_events):
    assert call("/boom", "failing-request").status_code == 200
"""

#: A drawn test id's section: its anchor and its test id.
STORY = re.compile(r'<section class="story" id="(t\d+)"[^>]*? aria-label="([^"]*)">')


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


def page(path: Path) -> str:
    return html.unescape(path.read_text(encoding="utf-8"))


def stories(text: str) -> dict[str, str]:
    """Anchor → test id, for every drawn test id of the page."""
    return dict(STORY.findall(text))


def test_the_page_holds_the_failed_tests_and_the_failure_names_it(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_app=APP + TWO_TESTS)
    out = tmp_path / "reports" / "cvdiag.html"  # a folder that does not exist yet
    result = pytester.runpytest_inprocess("-p", "no:randomly", f"--cvdiag-report={out}")
    result.assert_outcomes(passed=1, failed=1)
    text = page(out)
    assert "failing-request" in text
    assert "passing-request" not in text
    assert "test_app.py::test_fails" in text  # the label beside the test id
    assert "test_app.py::test_passes" not in text
    assert stories(text) == {"t0": "failing-request"}
    result.stdout.fnmatch_lines(
        [
            "*- cvdiag replay -*",
            "*- cvdiag report -*",
            f"report: {out}#t0",
            f"*cvdiag report: {out} (1 failed, 1 passed; 1 test id)*",
        ]
    )


def test_with_the_all_flag_the_passed_tests_are_in_it_too(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(
        test_app=APP
        + TWO_TESTS
        + """
import pytest


@pytest.mark.xfail(strict=True)
def test_expected_to_fail(cvdiag_events):
    assert call("/boom", "expected-request").status_code == 200
"""
    )
    out = tmp_path / "cvdiag.html"
    result = pytester.runpytest_inprocess(
        "-p", "no:randomly", f"--cvdiag-report={out}", "--cvdiag-report-all"
    )
    result.assert_outcomes(passed=1, failed=1, xfailed=1)
    text = page(out)
    assert "test_app.py::test_fails (failed)" in text
    assert "test_app.py::test_passes (passed)" in text
    assert "test_app.py::test_expected_to_fail (xfailed)" in text
    assert sorted(stories(text).values()) == [
        "expected-request",
        "failing-request",
        "passing-request",
    ]
    result.stdout.fnmatch_lines(
        [f"*cvdiag report: {out} (1 failed, 1 passed, 1 skipped; 3 test ids)*"]
    )


def test_each_failure_names_its_own_test_ids_anchors(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A test of two requests names both anchors; a test whose request cvdiag finds healthy
    (its assertion failed, not the request) is drawn all the same and named."""
    pytester.makepyfile(
        test_app=APP
        + """
def test_two_requests(cvdiag_events):
    call("/boom", "first-request")
    call("/boom", "second-request")
    assert False


def test_healthy_request(cvdiag_events):
    call("/ok", "healthy-request")
    assert False
"""
    )
    out = tmp_path / "cvdiag.html"
    result = pytester.runpytest_inprocess("-p", "no:randomly", f"--cvdiag-report={out}")
    result.assert_outcomes(failed=2)
    drawn = stories(page(out))
    by_id = {test_id: anchor for anchor, test_id in drawn.items()}
    assert set(by_id) == {"first-request", "second-request", "healthy-request"}
    lines = [line for line in result.stdout.lines if line.startswith("report: ")]
    assert lines == [
        f"report: {out}#{by_id['first-request']} (also #{by_id['second-request']})",
        f"report: {out}#{by_id['healthy-request']}",
    ]


def test_a_test_id_many_tests_send_names_the_first_few(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(
        test_app=APP
        + """
import pytest


@pytest.mark.parametrize("number", range(7))
def test_shared(cvdiag_events, number):
    assert call("/boom", "shared-request").status_code == 200
"""
    )
    out = tmp_path / "cvdiag.html"
    result = pytester.runpytest_inprocess("-p", "no:randomly", f"--cvdiag-report={out}")
    result.assert_outcomes(failed=7)
    first = ", ".join(f"test_app.py::test_shared[{number}]" for number in range(5))
    assert f"{first} and 2 more tests<" in page(out)
    result.stdout.fnmatch_lines([f"*cvdiag report: {out} (7 failed; 1 test id)*"])


def test_under_xdist_the_workers_make_one_page(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(
        test_app=APP
        + "\n".join(
            f"""
def test_{number}(cvdiag_events):
    assert call("/boom" if {number} % 2 else "/ok", "request-{number}").status_code == 200
"""
            for number in range(6)
        )
    )
    out = tmp_path / "cvdiag.html"
    result = pytester.runpytest_inprocess(
        "-p", "no:randomly", "-n", "2", f"--cvdiag-report={out}", "--cvdiag-report-all"
    )
    result.assert_outcomes(passed=3, failed=3)
    text = page(out)
    for number in range(6):
        outcome = "failed" if number % 2 else "passed"
        assert f"test_app.py::test_{number} ({outcome})" in text
    assert sorted(stories(text).values()) == [f"request-{number}" for number in range(6)]
    # The tests' own envelopes stay beside the page: its evidence names that log; so does what
    # their clients saw (the probe, on by default with the page).
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "cvdiag-envelopes.log",
        "cvdiag-probe.log",
        "cvdiag.html",
    ]
    by_id = {test_id: anchor for anchor, test_id in stories(text).items()}
    reports = sorted(line for line in result.stdout.lines if line.startswith("report: "))
    assert reports == sorted(f"report: {out}#{by_id[f'request-{n}']}" for n in (1, 3, 5))
    result.stdout.fnmatch_lines([f"*cvdiag report: {out} (3 failed, 3 passed; 6 test ids)*"])


def test_a_run_without_failures_still_replaces_the_page(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """The page always speaks of this run: an earlier run's failures do not linger at PATH."""
    pytester.makepyfile(
        test_app=APP
        + """
def test_passes(cvdiag_events):
    assert call("/ok", "passing-request").status_code == 200


def test_without_the_fixture():
    pass
"""
    )
    out = tmp_path / "cvdiag.html"
    out.write_text("an earlier run's page: failing-request", encoding="utf-8")
    result = pytester.runpytest_inprocess(f"--cvdiag-report={out}")
    result.assert_outcomes(passed=2)
    text = page(out)
    assert "failing-request" not in text
    assert "passing-request" not in text
    assert "no test id in this log" in text
    result.stdout.fnmatch_lines([f"*cvdiag report: {out} (2 passed; 0 test ids)*"])


def test_a_page_that_cannot_be_written_is_said_and_the_run_keeps_its_outcome(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_app=APP + TWO_TESTS)
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    out = blocker / "cvdiag.html"  # its folder is a file
    result = pytester.runpytest_inprocess("-p", "no:randomly", f"--cvdiag-report={out}")
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"report: not written: {out}: *", "*cvdiag report: not written*"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_the_all_flag_alone_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=APP + TWO_TESTS)
    result = pytester.runpytest_inprocess("--cvdiag-report-all")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cvdiag-report-all needs --cvdiag-report=PATH*"])


def test_without_the_option_nothing_is_written_nor_said(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_app=APP + TWO_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    assert "cvdiag report" not in result.stdout.str()
    assert list(pytester.path.glob("*.html")) == []


def test_the_replay_section_names_each_test_id_once(pytester: pytest.Pytester) -> None:
    """Issue 27: the section drew a bare ``test id X`` line above the timeline's own header."""
    pytester.makepyfile(test_app=APP + TWO_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    named = [line for line in result.stdout.lines if line.startswith("test id failing-request")]
    assert len(named) == 1, named
    assert named[0].startswith("test id failing-request: 2 envelopes")
