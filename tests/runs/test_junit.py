"""``cvdiag.runs``: JUnit XML as Playwright, vitest, Jest and pytest write it, read into tests
and attempts; hostile files (entities, a DOCTYPE, 200 MB, bad encoding) one clear error each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.runs import Attempt, Case, JUnitError, headline, read_junit
from cvdiag.runs.junit import MAX_BYTES
from tests.support import junit

A, B, C, D = (f"0190a1b2-c3d4-7e5f-8a9b-0000000000{n:02d}" for n in range(4))


def outcomes(cases: list[Case]) -> dict[str, str]:
    return {case.name: case.outcome for case in cases}


def test_playwright_with_retries_gives_every_attempt_its_own_id(tmp_path: Path) -> None:
    path = junit.playwright(
        tmp_path / "results.xml",
        [
            ("chat › answers", "passed", [A], []),
            ("chat › streams", "passed", [C], [("flakyFailure", B)]),
            ("chat › times out", "timeout", [D], [("rerunError", "retry-1")]),
            ("chat › later", "skipped", [], []),
        ],
    )
    cases = read_junit(str(path))
    assert outcomes(cases) == {
        "chat.spec.ts::chat › answers": "passed",
        "chat.spec.ts::chat › streams": "flaky",
        "chat.spec.ts::chat › times out": "failed",
        "chat.spec.ts::chat › later": "skipped",
    }
    flaky = cases[1]
    assert [(a.outcome, a.test_ids) for a in flaky.attempts] == [("failed", [B]), ("passed", [C])]
    assert "ECONNRESET" in flaky.attempts[0].failure
    timed_out = cases[2]
    assert [(a.outcome, a.test_ids) for a in timed_out.attempts] == [
        ("failed", [D]),
        ("failed", ["retry-1"]),
    ]
    assert "Test timeout of 30000ms exceeded." in timed_out.attempts[0].failure
    assert headline(cases) == "1 failed, 1 flaky, 1 passed, 1 skipped"


def test_playwright_without_include_retries_reads_each_id_line_as_an_attempt(
    tmp_path: Path,
) -> None:
    path = junit.playwright(tmp_path / "r.xml", [("chat › streams", "passed", [A, B], [])])
    (case,) = read_junit(str(path))
    assert case.outcome == "flaky"
    assert [(a.outcome, a.test_ids) for a in case.attempts] == [("failed", [A]), ("passed", [B])]


def test_vitest_and_jest_name_their_ids_and_failures(tmp_path: Path) -> None:
    vitest = junit.vitest(
        tmp_path / "vitest.xml",
        [("chat > answers", "passed", [A]), ("chat > fails", "failed", [B])],
    )
    jest = junit.jest(tmp_path / "jest.xml", [("answers", "passed", [C]), ("fails", "failed", [D])])
    v = read_junit(str(vitest))
    assert [(c.name, c.outcome, c.test_ids()) for c in v] == [
        ("test/chat.test.ts::chat > answers", "passed", [A]),
        ("test/chat.test.ts::chat > fails", "failed", [B]),
    ]
    assert v[1].attempts[0].failure.startswith("expected 500 to be 200")
    j = read_junit(str(jest))
    assert [(c.outcome, c.test_ids()) for c in j] == [("passed", [C]), ("failed", [D])]
    assert "Received: 500" in j[1].attempts[0].failure
    assert "Object.<anonymous>" in j[1].attempts[0].failure  # entities of XML itself are read


def test_pytest_junitxml_property_and_a_secret_in_the_failure(tmp_path: Path) -> None:
    path = tmp_path / "pytest.xml"
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"'
        ' failures="1" skipped="0" tests="1" time="0.3"><testcase classname="test_app"'
        ' name="test_chat" time="0.2"><properties><property name="cvdiag_test_id"'
        f' value="{A.upper()}"/></properties><failure message="AssertionError: Authorization:'
        ' Bearer sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD">'
        "def test_chat(): ...</failure></testcase></testsuite></testsuites>",
        encoding="utf-8",
    )
    (case,) = read_junit(str(path))
    assert case.test_ids() == [A]  # normalised as the middleware adopts it
    assert case.outcome == "failed"
    assert "sk-proj-abcdefghijklmnopqrstuvwxyz" not in case.attempts[0].failure
    assert "AssertionError" in case.attempts[0].failure


BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    ' <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">\n'
    ' <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">\n'
    ']>\n<testsuites><testsuite><testcase name="&lol3;"/></testsuite></testsuites>'
)
EXTERNAL = (
    '<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
    '<testsuites><testcase name="a"><system-out>&xxe;</system-out></testcase></testsuites>'
)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (BILLION_LAUGHS.encode(), "DOCTYPE"),
        (EXTERNAL.encode(), "DOCTYPE"),
        (b'<testsuites><testcase name="&undeclared;"/></testsuites>', "undefined entity"),
        (b'<?xml version="1.0" encoding="utf-8"?><testsuites name="\xff\xfe"/>', "not well-formed"),
        (b'<?xml version="1.0" encoding="klingon"?><testsuites/>', "encoding"),
        (b"<testsuites><testsuite>", "no element found"),
        (b"", "no element found"),
        (b"<a>" * 200 + b"</a>" * 200, "nest deeper"),
    ],
)
def test_hostile_xml_is_one_clear_error_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "hostile.xml"
    path.write_bytes(content)
    with pytest.raises(JUnitError) as caught:
        read_junit(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert reason in message
    assert "\n" not in message
    assert "root:" not in message  # /etc/passwd was never read


def test_a_200_mb_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.xml"
    with open(path, "wb") as out:  # sparse: 200 MB without writing them
        out.write(b"<testsuites>")
        out.truncate(200 * 1024 * 1024)
    assert os.path.getsize(path) > MAX_BYTES
    with pytest.raises(JUnitError, match=r"huge\.xml: not read: 209715200 bytes, over the"):
        read_junit(str(path))


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(JUnitError, match=r"gone\.xml: cannot read: No such file"):
        read_junit(str(tmp_path / "gone.xml"))


def test_the_outcome_over_attempts() -> None:
    assert Case("t", [Attempt("failed"), Attempt("passed")]).outcome == "flaky"
    assert Case("t", [Attempt("passed"), Attempt("failed")]).outcome == "failed"
    assert Case("t", [Attempt("skipped")]).outcome == "skipped"
    assert Case("t", []).outcome == "skipped"
    assert headline([]) == "no tests"


IDS = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,40}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(
    final=st.sampled_from(["passed", "failed", "skipped"]),
    retried=st.lists(IDS, max_size=4, unique=True),
    last=IDS,
)
def test_any_retries_read_back_as_attempts(
    tmp_path_factory: pytest.TempPathFactory, final: str, retried: list[str], last: str
) -> None:
    if last in retried:
        return
    element = "flakyFailure" if final == "passed" else "rerunFailure"
    path = junit.playwright(
        tmp_path_factory.mktemp("p") / "r.xml",
        [("t", final, [last], [(element, test_id) for test_id in retried])],
    )
    (case,) = read_junit(str(path))
    assert sorted(case.test_ids()) == sorted([last, *retried])
    assert len(case.attempts) == 1 + len(retried)
    if retried and final == "passed":
        assert case.outcome == "flaky"
        assert case.attempts[-1].test_ids == [last]
    elif final == "skipped" and retried:
        assert case.outcome == "failed"
    else:
        assert case.outcome == final


def test_huge_texts_and_too_many_testcases_stay_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cvdiag.runs import junit as reader
    from cvdiag.runs.cases import FAILURE_MAX

    path = tmp_path / "big.xml"
    noise = "y" * 3_000_000  # three times what an output keeps: the id after it is not read
    path.write_text(
        '<testsuites><testcase name="t"><failure message="boom">'
        + "x" * 2_000_000
        + f"</failure><system-out>cvdiag-test-id: {A}\n{noise}\ncvdiag-test-id: {B}"
        + "</system-out></testcase></testsuites>",
        encoding="utf-8",
    )
    (case,) = read_junit(str(path))
    assert case.test_ids() == [A]
    assert len(case.attempts[0].failure) <= FAILURE_MAX
    assert case.attempts[0].failure.startswith("boom")
    monkeypatch.setattr(reader, "MAX_CASES", 2)
    many = tmp_path / "many.xml"
    many.write_text("<testsuites>" + '<testcase name="t"/>' * 3 + "</testsuites>", "utf-8")
    with pytest.raises(JUnitError, match=r"many\.xml: not read: it holds more than 2 testcases"):
        read_junit(str(many))
