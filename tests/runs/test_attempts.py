"""Every attempt as it was (issue 47): Playwright's JUnit with and without ``includeRetries``,
the id forwarded by a ``cvdiag-test-id:`` line or by an annotation (a property that names only
the last attempt), each failed attempt with its own failure text and its own id, an
``x-test-id`` in a failure's call log included; pytest's repeated testcases as one test."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.runs import headline, read_junit
from cvdiag.runs.attempts import sections

DATA = Path(__file__).parent.parent / "data" / "junit"
PW = "pw-0193a9d2-2b1c-7d10-9f00-00000000"


def attempts(path: Path) -> dict[str, list[tuple[str, list[str], str]]]:
    return {
        case.name.rsplit("::", 1)[-1]: [(a.outcome, a.test_ids, a.failure) for a in case.attempts]
        for case in read_junit(str(path))
    }


def test_playwright_include_retries_each_attempt_its_own_id_and_text() -> None:
    found = attempts(DATA / "playwright-include-retries.xml")
    # The annotation path, flaky: the property is the passing attempt's; the failed one's id
    # is the x-test-id its call log shows.
    (failed, passed) = found["chat › streams the answer"]
    assert failed[:2] == ("failed", [f"{PW}b001"])
    assert "read ECONNRESET" in failed[2]
    assert passed == ("passed", [f"{PW}b002"], "")
    # The annotation path, failed every time: the property is the last attempt's, never the
    # first's; the first attempt's text is its own part of the failure, not the retry's.
    (first, retry) = found["chat › answers at all"]
    assert first[:2] == ("failed", [f"{PW}c001"])
    assert f"{PW}c002" not in first[2]
    assert "Retry #1" not in first[2]
    assert retry[:2] == ("failed", [f"{PW}c002"])
    # The console path, flaky: each attempt's output.
    assert [a[:2] for a in found["chat › lists the agents"]] == [
        ("failed", [f"{PW}a001"]),
        ("passed", [f"{PW}a002"]),
    ]
    assert headline(read_junit(str(DATA / "playwright-include-retries.xml"))) == "1 failed, 2 flaky"


def test_playwright_without_include_retries_splits_the_failure_per_attempt() -> None:
    found = attempts(DATA / "playwright-without-retries.xml")
    (first, second) = found["chat › streams the answer"]
    assert first[:2] == ("failed", [f"{PW}d001"])
    assert "Received: 500" in first[2]
    assert "Received: 504" not in first[2]
    assert second[:2] == ("failed", [f"{PW}d002"])
    assert "Received: 504" in second[2]
    assert "Received: 500" not in second[2]
    # The annotation path: one property (the last attempt's); the first attempt's id from its
    # call log, each its own failure.
    (first, second) = found["chat › answers at all"]
    assert first[:2] == ("failed", [f"{PW}e001"])
    assert "socket hang up" in first[2]
    assert second[:2] == ("failed", [f"{PW}e002"])
    assert "read ECONNRESET" in second[2]
    assert [a[:2] for a in found["chat › lists the agents"]] == [
        ("failed", [f"{PW}f001"]),
        ("passed", [f"{PW}f002"]),
    ]


def test_a_pytest_file_counts_a_rerun_test_once(tmp_path: Path) -> None:
    """As pytest writes a test pytest-rerunfailures ran twice, by an older plugin: the second
    testcase lists both attempts' ids and neither says the first failed."""
    path = tmp_path / "junit.xml"
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite'
        ' name="pytest" errors="0" failures="0" skipped="0" tests="3" time="0.1">'
        '<testcase classname="test_x" name="test_flaky"><properties><property'
        ' name="cvdiag_test_id" value="a1"/></properties></testcase>'
        '<testcase classname="test_x" name="test_flaky"><properties><property'
        ' name="cvdiag_test_id" value="a1"/><property name="cvdiag_test_id" value="a2"/>'
        "</properties></testcase>"
        '<testcase classname="test_x" name="test_ok"><properties><property'
        ' name="cvdiag_test_id" value="b1"/></properties></testcase>'
        "</testsuite></testsuites>",
        encoding="utf-8",
    )
    cases = read_junit(str(path))
    assert [(c.name, c.outcome) for c in cases] == [
        ("test_x::test_flaky", "flaky"),
        ("test_x::test_ok", "passed"),
    ]
    assert [(a.outcome, a.test_ids) for a in cases[0].attempts] == [
        ("failed", ["a1"]),
        ("passed", ["a2"]),
    ]
    assert headline(cases) == "1 flaky, 1 passed"


def test_another_runners_name_seen_twice_stays_two_tests(tmp_path: Path) -> None:
    path = tmp_path / "vitest.xml"
    path.write_text(
        '<testsuites name="vitest tests"><testsuite name="a.test.ts">'
        '<testcase classname="a.test.ts" name="works"/>'
        '<testcase classname="a.test.ts" name="works"/></testsuite></testsuites>',
        encoding="utf-8",
    )
    assert [c.outcome for c in read_junit(str(path))] == ["passed", "passed"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(st.characters(exclude_categories=["Cs"]), max_size=40), max_size=5))
def test_sections_keep_every_character_of_each_attempt(parts: list[str]) -> None:
    text = "".join(f"\n    Retry #{n} ────\n{part}" if n else part for n, part in enumerate(parts))
    cut = sections(text)
    assert sorted(cut) == list(range(len(cut)))
    if all("Retry #" not in part for part in parts):
        assert [cut[n] for n in sorted(cut)] == [p.strip() for p in parts] or not parts


def test_vitest_retries_are_its_id_lines(tmp_path: Path) -> None:
    """vitest's reporter writes a task's logs of every attempt in its ``system-out``, escaped:
    with ``retry``, one id line per attempt, the last the final one."""
    from tests.support import junit

    path = junit.vitest(
        tmp_path / "vitest.xml",
        [("chat > flaky", "passed", ["v-1", "v-2"]), ("chat > fails", "failed", ["v-3", "v-4"])],
    )
    found = attempts(path)
    assert [a[:2] for a in found["chat > flaky"]] == [("failed", ["v-1"]), ("passed", ["v-2"])]
    (first, last) = found["chat > fails"]
    assert first[:2] == ("failed", ["v-3"])
    assert last[:2] == ("failed", ["v-4"])
    assert last[2].startswith("expected 500 to be 200")  # the final failure is the last one's


def test_jest_retries_through_numbered_properties() -> None:
    """``jest-retries.xml`` was written by Jest 29.7 and jest-junit 16 with docs/ci.md's
    ``junitTestCaseProperties.js`` and ``jest.retryTimes(2, {logErrorsBeforeRetry: true})``
    (paths shortened to /ci/app): one ``cvdiag_test_id.N`` per attempt, each retried attempt's
    failure as ``cvdiag_failure.N``, the properties after the ``<failure>``."""
    found = attempts(DATA / "jest-retries.xml")
    assert [a[:2] for a in found["chat answers"]] == [("passed", ["jest-local-chatanswers-1"])]
    (failed, passed) = found["chat streams"]
    assert failed[:2] == ("failed", ["jest-local-chatstreams-1"])
    assert "Received: 502" in failed[2]
    assert passed == ("passed", ["jest-local-chatstreams-2"], "")
    fails = found["chat fails"]
    assert [a[:2] for a in fails] == [("failed", [f"jest-local-chatfails-{n}"]) for n in (1, 2, 3)]
    assert all("Received: 500" in a[2] for a in fails)
    assert headline(read_junit(str(DATA / "jest-retries.xml"))) == "1 failed, 1 flaky, 1 passed"
