"""JUnit XML as the runners write it (Playwright, vitest, Jest, pytest), made by the tests:
no Node needed. Each testcase is ``(name, outcome, ids, retries)``; the shapes follow each
reporter's own output (attribute order, CDATA output, a timeout as an ``<error>``)."""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'


def playwright(path: Path, cases: list[tuple[str, str, list[str], list[tuple[str, str]]]]) -> Path:
    """Playwright's ``junit`` reporter; ``retries``: ``(element, id)`` children written with
    ``includeRetries`` (``flakyFailure``, ``rerunError``...), each with its own output."""
    body = []
    for title, outcome, ids, retries in cases:
        out = "".join(f"cvdiag-test-id: {test_id}\n" for test_id in ids)
        inner = ""
        if outcome == "failed":
            inner += (
                f'<failure message={quoteattr("chat.spec.ts:5:5 " + title)} type="FAILURE">\n'
                "<![CDATA[  [chromium] › chat.spec.ts:5:5 › " + title + "\n\n"
                "    Error: expect(received).toBe(expected)\n    Expected: 200\n"
                "    Received: 500\n]]>\n</failure>\n"
            )
        elif outcome == "timeout":
            inner += (
                '<error message="Test timeout of 30000ms exceeded." type="TimeoutError">\n'
                "<![CDATA[Test timeout of 30000ms exceeded.]]>\n</error>\n"
            )
        elif outcome == "skipped":
            inner += "<skipped>\n</skipped>\n"
        for element, test_id in retries:
            inner += (
                f'<{element} message="Error: read ECONNRESET" type="FAILURE">'
                "<stackTrace><![CDATA[Error: read ECONNRESET\n    at chat.spec.ts:9]]></stackTrace>"
                f"<system-out><![CDATA[cvdiag-test-id: {test_id}\n]]></system-out>"
                f"</{element}>\n"
            )
        if out:
            inner += f"<system-out>\n<![CDATA[{out}]]>\n</system-out>\n"
        body.append(
            f'<testcase name={quoteattr(title)} classname="chat.spec.ts" time="1.204">\n'
            f"{inner}</testcase>\n"
        )
    path.write_text(
        HEAD + f'<testsuites id="" name="" tests="{len(cases)}" failures="0" skipped="0"'
        ' errors="0" time="3.2">\n<testsuite name="chat.spec.ts" timestamp="2026-11-28T10:00:00'
        f'.000Z" hostname="chromium" tests="{len(cases)}" failures="0" skipped="0" time="2.1"'
        ' errors="0">\n' + "".join(body) + "</testsuite>\n</testsuites>",
        encoding="utf-8",
    )
    return path


def vitest(path: Path, cases: list[tuple[str, str, list[str]]]) -> Path:
    """vitest's ``junit`` reporter: a console line lands in the testcase's ``system-out``,
    escaped (no CDATA) and written before the ``<skipped/>`` or ``<failure>``."""
    body = []
    for title, outcome, ids in cases:
        inner = ""
        if ids:
            inner += (
                "<system-out>\n"
                + "".join(escape(f"cvdiag-test-id: {test_id}") + "\n" for test_id in ids)
                + "</system-out>\n"
            )
        if outcome == "failed":
            inner += (
                '<failure message="expected 500 to be 200 // Object.is equality"'
                ' type="AssertionError">\nAssertionError: expected 500 to be 200\n'
                " ❯ test/chat.test.ts:12:31\n</failure>\n"
            )
        elif outcome == "skipped":
            inner += "<skipped/>\n"
        body.append(
            f'<testcase classname="test/chat.test.ts" name={quoteattr(title)} time="0.012">\n'
            f"{inner}</testcase>\n"
        )
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8" ?>\n'
        + f'<testsuites name="vitest tests" tests="{len(cases)}" failures="0" errors="0"'
        ' time="0.4">\n<testsuite name="test/chat.test.ts" timestamp="2026-11-28T10:00:00.000Z"'
        f' hostname="ci" tests="{len(cases)}" failures="0" errors="0" skipped="0" time="0.3">\n'
        + "".join(body)
        + "</testsuite>\n</testsuites>\n",
        encoding="utf-8",
    )
    return path


def jest(path: Path, cases: list[tuple[str, str, list[str]]]) -> Path:
    """jest-junit: the id as a testcase property (what its ``junitTestCaseProperties.js``
    returns: it writes console output per suite, not per test), the failure as text only."""
    body = []
    for title, outcome, ids in cases:
        props = "".join(
            f'<property name="cvdiag_test_id" value={quoteattr(test_id)}/>' for test_id in ids
        )
        inner = f"<properties>{props}</properties>\n" if props else ""
        if outcome == "failed":
            inner += (
                "<failure>Error: expect(received).toBe(expected) // Object.is equality\n\n"
                "Expected: 200\nReceived: 500\n    at Object.&lt;anonymous&gt; (chat.test.js:8:22)"
                "</failure>\n"
            )
        elif outcome == "skipped":
            inner += "<skipped/>\n"
        body.append(
            f"<testcase classname={quoteattr('chat ' + title)} name={quoteattr('chat ' + title)}"
            f' time="0.05">\n{inner}</testcase>\n'
        )
    path.write_text(
        HEAD + f'<testsuites name="jest tests" tests="{len(cases)}" failures="0" errors="0"'
        ' time="1.2">\n  <testsuite name="chat" errors="0" failures="0" skipped="0"'
        f' timestamp="2026-11-28T10:00:00" time="1.1" tests="{len(cases)}">\n'
        + "".join(body)
        + "  </testsuite>\n</testsuites>",
        encoding="utf-8",
    )
    return path
