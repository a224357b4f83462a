"""Issue 47's CI loop, run for real: the backend of ``test_backend`` in its own process, its
log opened for appending as a fixture may (``"ab"``), a session with a flaky test
(pytest-rerunfailures), then a green session in the same folder. Each run's page, the plugin's
and ``cvdiag report LOG --junit``'s, is about that run alone; each rerun attempt is read back
from pytest's own JUnit as it was (failed, with its failure text and its own test id); and both
pages show the same "Compared with a passing attempt" block."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from cvdiag.runs import read_junit
from tests.pytest_plugin.test_backend import BACKEND, CONFTEST, TESTS
from tests.support.report import Page, run


def words(page: Page) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.source))


def title(page: Page) -> str:
    found = re.search(r"<title>(.*?)</title>", page.source)
    assert found is not None
    return html.unescape(found.group(1))


@pytest.fixture
def session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(backend_app=BACKEND, conftest=CONFTEST, test_chat=TESTS)
    monkeypatch.setenv("BACKEND_WORKERS", "1")
    monkeypatch.chdir(pytester.path)
    return pytester


def pytest_run(session: pytest.Pytester, name: str, *args: str) -> pytest.RunResult:
    return session.runpytest_inprocess(
        "-p",
        "no:randomly",
        "-p",
        "no:xdist",
        "--cvdiag-backend-log=backend.log",
        "--cvdiag-backend-wait=60",
        f"--cvdiag-report=artifacts/{name}.html",
        f"--junitxml=artifacts/{name}.xml",
        *args,
    )


def test_each_run_is_its_own_and_each_attempt_as_it_was(session: pytest.Pytester) -> None:
    first = pytest_run(session, "run1")
    first.assert_outcomes(passed=3, failed=2, skipped=1)
    # The backend replay says nothing of a slug the app never named.
    first.stdout.fnmatch_lines(["*cvdiag backend replay*", "test id *: * envelopes over * ms"])
    assert "slug unknown" not in first.stdout.str()
    artifacts = session.path / "artifacts"

    # pytest's JUnit writes a rerun attempt as a testcase of the same name with no failure:
    # read back as one test whose first attempt failed, with its own text and its own id.
    cases = {c.name.rsplit("::", 1)[-1]: c for c in read_junit(str(artifacts / "run1.xml"))}
    assert len(cases) == 6
    flaky = cases["test_flaky"]
    assert flaky.outcome == "flaky"
    (failed, passed) = flaky.attempts
    assert failed.outcome == "failed"
    assert "assert 500 == 200" in failed.failure
    assert passed.outcome == "passed"
    assert len(failed.test_ids) == len(passed.test_ids) == 1
    assert failed.test_ids != passed.test_ids

    # The command's page of that JUnit: tests counted once, each attempt as it was.
    done = run("report", "backend.log", "--junit", str(artifacts / "run1.xml"), "-o", "cli1.html")
    assert done.code == 0, done.stderr
    cli = Page(Path("cli1.html").read_text(encoding="utf-8"))
    plugin = Page((artifacts / "run1.html").read_text(encoding="utf-8"))
    for page in (cli, plugin):
        assert title(page) == "cvdiag report: 2 failed, 1 flaky, 2 passed, 1 skipped"
        shown = {case.name.rsplit("::", 1)[-1]: case for case in page.cases}
        assert "attempt 1: failed" in shown["test_flaky"].text
        assert "assert 500 == 200" in shown["test_flaky"].text
        assert "of 2 runs" not in shown["test_flaky"].text  # one run: one test, two attempts
        assert page.section_of(failed.test_ids[0]).flap_class == "backend-error"
        # The same block on both pages: the failed attempt beside its passing one.
        assert f"Compared with a passing attempt: {passed.test_ids[0]}" in words(page)

    # A green run in the same folder, the backend's log still holding the first run.
    second = pytest_run(session, "run2", "-k", "answers or asserts")
    second.assert_outcomes(passed=2)
    second.stdout.fnmatch_lines(["*cvdiag report: */artifacts/run2.html (2 passed; 0 test ids)*"])
    green = Page((artifacts / "run2.html").read_text(encoding="utf-8"))
    assert title(green) == "cvdiag report: 2 passed"
    assert green.rows == {}
    assert green.sections == {}
    assert "no test failed" in green.source
    earlier = {i for case in cases.values() for i in case.test_ids()}
    assert not any(test_id in green.source for test_id in earlier)

    # The command given the second run's JUnit: that run's test ids, and no other.
    done = run(
        "report", "backend.log", "--all", "--junit", str(artifacts / "run2.xml"), "-o", "cli2.html"
    )
    assert done.code == 0, done.stderr
    page = Page(Path("cli2.html").read_text(encoding="utf-8"))
    ours = {i for case in read_junit(str(artifacts / "run2.xml")) for i in case.test_ids()}
    assert set(page.rows) == ours
    assert len(ours) == 2
    assert not any(test_id in page.source for test_id in earlier)
    assert title(page) == "cvdiag report: 2 passed"
