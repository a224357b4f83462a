"""The report's "compared with a passing attempt" block, and ``cvdiag diff --junit``, on a real
backend's log: a flaky test whose first attempt's client gave up on a stalled provider and whose
retry passed (Playwright's JUnit with ``flakyFailure``), and two runs of one test told apart only
by their test ids' run numbers."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from tests.support import junit
from tests.support.cli import cvdiag
from tests.support.scenarios import backend, run

SPLIT = "First split: at LLM openai/gpt-4o-mini: the first run's first token at"


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "backend.log"
    with backend(path) as url:
        run(url, path, "t-fail", provider="stall", client_timeout=0.5)
        run(url, path, "t-pass")
        run(url, path, "chat-run1")
        run(url, path, "chat-run2", provider="stall", client_timeout=0.5)
    return path


def page(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "page.html"
    done = cvdiag("report", "-o", str(out), *args)
    assert done.returncode == 0, done.stderr
    return html.unescape(re.sub(r"<(?!div )[^>]*>", "", out.read_text()))  # text and the blocks


def test_a_flaky_tests_failed_attempt_is_compared_with_its_retry(log: Path, tmp_path: Path) -> None:
    xml = junit.playwright(
        tmp_path / "results.xml",
        [("chat streams", "passed", ["t-pass"], [("flakyFailure", "t-fail")])],
    )
    text = page(
        tmp_path, str(log), "--junit", str(xml), "--test-id", "t-fail", "--test-id", "t-pass"
    )
    assert "Compared with a passing attempt: t-pass" in text
    assert SPLIT in text
    assert "the client left at +" in text
    # The split marked on both waterfalls: the failure's and its drawn passing attempt's.
    raw = (tmp_path / "page.html").read_text()
    assert raw.count('class="m m-split"') == 2
    assert "first split from t-pass: at LLM openai/gpt-4o-mini" in html.unescape(raw)
    # The same pair from the command line, by the test's name.
    done = cvdiag("diff", "chat streams", str(log), "--json", "--junit", str(xml))
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert (result["a"]["test_id"], result["b"]["test_id"]) == ("t-pass", "t-fail")


def test_runs_of_one_test_are_paired_by_the_stable_part_of_their_ids(
    log: Path, tmp_path: Path
) -> None:
    text = page(tmp_path, str(log), "--test-id", "chat-run1", "--test-id", "chat-run2")
    assert "Compared with a passing attempt: chat-run1" in text
    assert SPLIT in text
    # A healthy story is never compared: only failures get the block.
    assert text.count('<div class="compared">') == 1


def test_given_several_runs_the_flakiest_test_is_listed_first(log: Path, tmp_path: Path) -> None:
    # Three runs' JUnit files: "search" failed in one, "chat" in two; each names a test id of
    # the log so every entry links to a real story.
    outcomes = {"chat": ["failed", "failed", "passed"], "search": ["failed", "passed", "passed"]}
    files = []
    for run_number in range(3):
        cases: list[tuple[str, str, list[str], list[tuple[str, str]]]] = [
            (
                name,
                runs[run_number],
                ["chat-run2" if runs[run_number] == "failed" else "t-pass"],
                [],
            )
            for name, runs in sorted(outcomes.items(), reverse=True)  # search first in the file
        ]
        files.append(str(junit.playwright(tmp_path / f"r{run_number}.xml", cases)))
    text = page(tmp_path, str(log), "--junit", *files)
    tests = text[text.index("Tests") :]
    assert tests.index("chat.spec.ts::chat") < tests.index("chat.spec.ts::search")
    assert "failed in 2 of 3 runs" in tests
    assert "failed in 1 of 3 runs" in tests


def test_many_runs_read_whole(log: Path, tmp_path: Path) -> None:
    """Issue 47: each run's source named apart though every run's files share their names,
    each test's entry says which run it came from, and the headline counts tests, not runs."""
    files = []
    for number, (chat, search) in enumerate([("failed", "passed"), ("passed", "passed")], 1):
        folder = tmp_path / f"run-{number}"
        folder.mkdir()
        (folder / "backend.log").write_bytes(log.read_bytes())
        chat_id = "chat-run2" if chat == "failed" else "chat-run1"
        cases = [("chat", chat, [chat_id], []), ("search", search, ["t-pass"], [])]
        files += [str(folder / "backend.log"), str(junit.playwright(folder / "junit.xml", cases))]
    logs, xml = files[0::2], files[1::2]
    text = page(tmp_path, *logs, "--junit", xml[0], "--junit", xml[1], "--all")
    assert "run-1/backend.log, run-2/backend.log, run-1/junit.xml, run-2/junit.xml" in text
    assert "cvdiag report: 2 tests in 2 runs: 1 flaky, 1 passed" in text
    tests = text[text.index("Tests") :]
    assert "failed in 1 of 2 runs · this run: run-1/junit.xml" in tests
    assert "failed in 1 of 2 runs · this run: run-2/junit.xml" in tests


def test_the_pages_comparison_reads_as_the_commands(log: Path, tmp_path: Path) -> None:
    """Issue 47: ``-`` for a value that is missing and times rounded, as ``cvdiag diff`` says
    them: never ``None`` or ``18.627378``."""
    xml = junit.playwright(
        tmp_path / "results.xml",
        [("chat streams", "passed", ["t-pass"], [("flakyFailure", "t-fail")])],
    )
    page(tmp_path, str(log), "--junit", str(xml))
    raw = (tmp_path / "page.html").read_text()
    block = raw[raw.index('<div class="compared">') :]
    block = block[: block.index("</div>")]
    said = cvdiag("diff", "t-pass", "t-fail", str(log), "--color", "never").stdout
    differences = said[said.index("differences\n") + len("differences\n") :].splitlines()
    items = re.findall(r"<li>(.*?)</li>", block)
    shown = [" ".join(html.unescape(re.sub(r"<[^>]+>", "", item)).split()) for item in items]
    assert shown
    assert shown == [" ".join(line.split()) for line in differences][: len(shown)]
    assert "None" not in block
    assert not re.search(r"\d\.\d{3}", block)
