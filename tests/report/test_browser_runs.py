"""Issue 38's page in headless Chromium at 1280 and 390 px: the tests section of a run (JUnit
files joined to a real backend's log), the class filter hiding the drawn sections the table
hides, and nothing of the page lost sideways at phone width (the envelopes' key facts, a long
node id)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest

from tests.report.test_browser import load, script
from tests.report.test_junit import BOOM_ID, FLAKY_FIRST, FLAKY_THEN, OK_ID, VITEST_ID, backend_log
from tests.support import browser, junit
from tests.support.report import run

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

    from tests.report.test_browser import Case

pytestmark = pytest.mark.browser

#: A node id as long as parametrized tests make them, with no place to break a line.
LONG_NAME = "test_chat_streams_" + "x" * 300


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Case:
    browser.require()
    folder = tmp_path_factory.mktemp("report-runs")
    log = folder / "backend.log"
    backend_log(log)
    results = junit.playwright(
        folder / "results.xml",
        [
            ("chat › answers", "passed", [OK_ID], []),
            (LONG_NAME, "failed", [BOOM_ID], []),
            ("chat › retries", "passed", [FLAKY_THEN], [("flakyFailure", FLAKY_FIRST)]),
            ("chat › asserts a 500", "passed", [VITEST_ID], []),
        ],
    )
    out = folder / "page.html"
    done = run("report", str(log), "--junit", str(results), "-o", str(out))
    assert done.code == 0, done.stderr
    return cast("Case", SimpleNamespace(url=out.as_uri()))


@pytest.fixture(scope="module")
def chrome() -> Iterator[Chrome]:
    with browser.chromium() as driver:
        yield driver


def shown(driver: Chrome, selector: str) -> list[str]:
    elements = driver.find_elements("css selector", selector)
    return [e.get_attribute("aria-label") or "" for e in elements if e.is_displayed()]


def test_the_class_filter_hides_the_sections_it_hides_from_the_table(
    page: Case, chrome: Chrome
) -> None:
    from selenium.webdriver.support.ui import Select

    load(chrome, page)
    drawn = shown(chrome, "section.story")
    assert set(drawn) >= {BOOM_ID, FLAKY_FIRST, FLAKY_THEN, VITEST_ID}
    classes = {
        s.get_attribute("aria-label"): s.get_attribute("data-class")
        for s in chrome.find_elements("css selector", "section.story")
    }
    Select(chrome.find_element("css selector", "#class")).select_by_value("backend-error")
    wanted = [test_id for test_id in drawn if classes[test_id] == "backend-error"]
    assert 0 < len(wanted) < len(drawn)
    assert shown(chrome, "section.story") == wanted
    search = chrome.find_element("css selector", "#search")
    search.send_keys(FLAKY_FIRST)
    assert shown(chrome, "section.story") == [FLAKY_FIRST]
    Select(chrome.find_element("css selector", "#class")).select_by_value("")
    search.clear()
    search.send_keys(" ")  # an input event: the filter runs again with nothing to find
    assert shown(chrome, "section.story") == drawn


@pytest.mark.parametrize(("width", "height"), [(1280, 900), (390, 844)], ids=["desktop", "phone"])
def test_nothing_hides_sideways(page: Case, chrome: Chrome, width: int, height: int) -> None:
    chrome.set_window_size(width, height)
    try:
        load(chrome, page)
        assert script(chrome, "return innerWidth") == width
        assert script(chrome, "return document.documentElement.scrollWidth") <= width
        # Every envelope table shows all it holds: no column past its box's edge.
        overflows: list[Any] = script(
            chrome,
            "return Array.from(document.querySelectorAll('table.envelopes')).map(t =>"
            " [t.scrollWidth, t.parentElement.clientWidth])",
        )
        assert overflows
        assert all(inner <= box + 1 for inner, box in overflows), overflows
        # The tests section: each name, attempt and failure inside the page's width.
        rights: list[float] = script(
            chrome,
            "return Array.from(document.querySelectorAll('.case .name, .case .attempt,"
            " .case pre, section.story .label')).map(e => e.getBoundingClientRect().right)",
        )
        assert rights
        assert max(rights) <= width, rights
        names = [e.text for e in chrome.find_elements("css selector", ".case .name")]
        assert any(name.replace("\n", "").endswith(LONG_NAME) for name in names)
        facts = chrome.find_elements("css selector", "table.envelopes tbody tr td:nth-child(4)")
        assert facts
        assert all(cell.is_displayed() for cell in facts[:20])
    finally:
        chrome.set_window_size(1280, 900)
