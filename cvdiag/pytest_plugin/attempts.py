"""The session's tests as a run: the ``cvdiag_test_id`` fixture that forwards a test id per
test (a new one per rerun attempt), and the ``Recorder`` that turns pytest's reports into
``cvdiag.runs`` tests and attempts, from xdist workers too, then gives each failed test's
report the replay of its backend story (``--cvdiag-backend-log``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import pytest

from cvdiag.runs.cases import Attempt, Case, drawn_ids, failure_text
from cvdiag.schema.ids import new_uuid7

if TYPE_CHECKING:
    from cvdiag.pytest_plugin.backend_log import Stories

#: The header the middleware reads a test id from.
HEADER: Final = "x-test-id"
#: The property JUnit XML carries the id in (``cvdiag report --junit`` reads it back).
PROPERTY: Final = "cvdiag_test_id"
#: The property that carries a failed attempt's failure: pytest's JUnit keeps none of an
#: attempt pytest-rerunfailures runs again, only a testcase of the same name.
FAILURE_PROPERTY: Final = "cvdiag_failure"
#: The report attribute that carries an attempt's number and test ids (to the xdist controller).
SHIPPED: Final = "cvdiag_attempt"
#: The failure report's section with the backend's story.
SECTION: Final = "cvdiag backend replay"
#: Characters of the traceback kept after the short report (its end: where it failed).
TRACE_TAIL: Final = 2500
#: On an item: the test ids forwarded by this attempt.
IDS_KEY = pytest.StashKey[list[str]]()


class ForwardedTestId(str):
    """A test id to forward to the backend: a UUIDv7, new for each test and each rerun attempt.

    It is the id itself (a ``str``), with the means to send it: ``headers`` for any client, and
    httpx (or httpx2) clients that send it on every request::

        def test_chat(cvdiag_test_id):
            with cvdiag_test_id.client(base_url=BACKEND) as http:
                assert http.post("/chat", json={"message": "hi"}).status_code == 200
    """

    __slots__ = ()

    @property
    def headers(self) -> dict[str, str]:
        """``{"x-test-id": <id>}``: merge it into any client's headers."""
        return {HEADER: str(self)}

    def client(self, *, library: str = "httpx", **options: Any) -> Any:
        """An ``httpx.Client`` (``library="httpx2"``: an ``httpx2.Client``) whose every request
        carries the id; ``options`` go to the client (``base_url``, ``timeout``, ``headers``)."""
        return _library(library).Client(headers=self._merged(options), **options)

    def async_client(self, *, library: str = "httpx", **options: Any) -> Any:
        """``client``'s ``AsyncClient``."""
        return _library(library).AsyncClient(headers=self._merged(options), **options)

    def _merged(self, options: dict[str, Any]) -> dict[str, str]:
        given: Mapping[str, str] = options.pop("headers", None) or {}
        return {**dict(given), **self.headers}


def _library(name: str) -> Any:
    if name not in ("httpx", "httpx2"):
        raise ValueError(f"library must be 'httpx' or 'httpx2', not {name!r}")
    import importlib

    return importlib.import_module(name)


@pytest.fixture
def cvdiag_test_id(request: pytest.FixtureRequest) -> ForwardedTestId:
    """A test id for this test to forward to its backend (a UUIDv7; a rerun gets a new one).

    It is recorded for ``--cvdiag-report`` and ``--cvdiag-backend-log`` with the test's node id
    and attempt, and as the ``cvdiag_test_id`` property of the test's JUnit XML testcase.
    """
    test_id = ForwardedTestId(new_uuid7())
    # A fresh list per attempt: a rerun sets its fixtures up again, and forwards a new id; the
    # earlier attempt's properties were written with its own testcase, so they are dropped.
    request.node.stash[IDS_KEY] = [str(test_id)]
    properties = request.node.user_properties
    properties[:] = [p for p in properties if p[0] not in (PROPERTY, FAILURE_PROPERTY)]
    properties.append((PROPERTY, str(test_id)))
    return test_id


def note_failure(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failed setup or call of a test that forwards an id: its failure as a property, so
    its attempt's testcase says it failed and how even when it is run again."""
    if report.failed and report.when != "teardown" and IDS_KEY in item.stash:
        item.user_properties.append((FAILURE_PROPERTY, _failure(report)))


def ship(item: pytest.Item, report: pytest.TestReport) -> None:
    """Put the attempt's number and test ids on each of its reports (xdist carries them)."""
    ids = item.stash.get(IDS_KEY, [])
    attempt = getattr(item, "execution_count", 1)  # pytest-rerunfailures counts attempts so
    setattr(report, SHIPPED, {"attempt": int(attempt), "test_ids": list(ids)})


class Recorder:
    """Every test of the session with its attempts, built from the reports as they arrive (in
    the process that reports the session); at its end, the backend's stories of the failed
    and flaky tests, their failure reports given the replay. Registered as a plugin."""

    def __init__(self, backend: list[str], root: str, wait: float) -> None:
        self.backend = backend
        self.root = root
        self.wait = wait
        self.cases: dict[str, Case] = {}
        self.stories: Stories | None = None
        self._failed: dict[str, pytest.TestReport] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        shipped = getattr(report, SHIPPED, None)
        attempt_no = int(shipped.get("attempt", 1)) if isinstance(shipped, dict) else 1
        case = self.cases.setdefault(report.nodeid, Case(report.nodeid))
        while len(case.attempts) < attempt_no:
            case.attempts.append(Attempt("passed"))
        attempt = case.attempts[attempt_no - 1]
        if isinstance(shipped, dict) and shipped.get("test_ids"):
            attempt.test_ids = [str(test_id) for test_id in shipped["test_ids"]]
        rerun = str(report.outcome) == "rerun"  # pytest-rerunfailures' failed attempt
        if report.failed or rerun:
            if attempt.outcome != "failed":
                attempt.outcome, attempt.failure = "failed", _failure(report)
            if report.failed:
                self._failed[report.nodeid] = report
        elif report.skipped and attempt.outcome != "failed":
            attempt.outcome = "skipped"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # First: the report page's collector reads the stories this waits for.
        self.read_backend()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        stories = self.stories
        if stories is None:
            return
        for problem in stories.problems:
            terminalreporter.write_line(f"cvdiag backend log: error: {problem}")
        if not stories.files:
            terminalreporter.write_line(
                f"cvdiag backend log: error: no file matches {', '.join(self.backend)}"
            )
        if stories.incomplete:
            terminalreporter.write_line(
                f"cvdiag backend log: {len(stories.incomplete)} test id(s) incomplete after"
                f" waiting {self.wait:g} s (--cvdiag-backend-wait)"
            )

    def all_cases(self) -> list[Case]:
        return list(self.cases.values())

    def read_backend(self) -> Stories | None:
        """The backend's stories of the failed and flaky tests, read once (waiting for late
        lines); each failed report given its replay."""
        if not self.backend or self.stories is not None:
            return self.stories
        from cvdiag.pytest_plugin.backend_log import read, replay

        cases = self.all_cases()
        wanted = drawn_ids(cases)
        self.stories = stories = read(self.backend, self.root, wanted, wait=self.wait)
        for nodeid, report in self._failed.items():
            case = self.cases[nodeid]
            text = "\n\n".join(_attempt_replays(case, stories, replay))
            report.sections.append((SECTION, text or "the test forwarded no test id"))
        return stories


#: The session's tests and attempts (``--cvdiag-report`` or ``--cvdiag-backend-log``).
RECORDER_KEY = pytest.StashKey[Recorder]()


def _attempt_replays(case: Case, stories: Stories, replay: Any) -> Iterator[str]:
    several = len(case.attempts) > 1
    for number, attempt in enumerate(case.attempts, 1):
        for test_id in attempt.test_ids:
            head = f"attempt {number} ({attempt.outcome}): " if several else ""
            yield head + replay(test_id, stories)


def _failure(report: pytest.TestReport) -> str:
    """The failure as pytest's short report says it (``httpx.ReadTimeout: timed out``), then
    the end of its traceback: scrubbed and bounded as everything a page shows."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or "")
    trace = report.longreprtext or ""
    tail = trace[-TRACE_TAIL:]
    if len(trace) > TRACE_TAIL:
        tail = "…" + tail[tail.find("\n") + 1 :]
    phase = "" if report.when == "call" else f"in {report.when}: "  # a fixture's error
    return failure_text(f"{phase}{message}\n\n{tail}" if message else phase + tail)


def root_of(config: pytest.Config) -> str:
    return os.fspath(config.invocation_params.dir)
