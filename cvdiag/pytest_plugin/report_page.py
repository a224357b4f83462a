"""``--cvdiag-report PATH``: the session's failed tests (every test with
``--cvdiag-report-all``) as one ``cvdiag report`` page, each test id labelled with the node ids
of the tests that emitted it, and each failure naming the page and its test ids' anchors.

A test's lines are complete once its ``cvdiag_events`` fixture is torn down (the emitter
flushed), so they are taken from the teardown report. In one process they go straight to a log
beside the page (``<page>-envelopes.log``, kept: the page's evidence names it). Under
pytest-xdist each worker attaches them to that report instead: xdist serialises a report's
attributes to the controller, which alone writes — one page at PATH whatever the number of
workers, and no shared folder needed (remote workers too).

With ``--cvdiag-backend-log`` the page also draws the backend's stories of the tests' forwarded
test ids (``backend_log``), and it knows the tests: each one's outcome (flaky when it failed
and then passed on a rerun), failure text and attempts, counted by outcome.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Final

import orjson
import pytest

if TYPE_CHECKING:  # imported when the page is written: every pytest run loads this module
    from cvdiag.pytest_plugin.attempts import Recorder
    from cvdiag.report import Report

#: The failure report's section that names the page.
SECTION: Final = "cvdiag report"
#: Node ids shown beside one test id; past them, how many more.
MAX_LABELLED: Final = 5
#: The teardown report's attribute that carries a worker's lines to the controller.
SHIPPED: Final = "cvdiag_report_lines"


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    path: str
    every: bool
    first_token_timeout: float | None = None


_OPTIONS_KEY = pytest.StashKey[Options]()
_COLLECTOR_KEY = pytest.StashKey["Collector"]()
#: On an item: its outcome so far (its teardown decides whether its lines are kept).
_OUTCOME_KEY = pytest.StashKey[str]()


def add_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--cvdiag-report",
        metavar="PATH",
        default=None,
        help="write the envelopes of the failed tests that used cvdiag_events as one HTML "
        "page to PATH (replaced; written even when no such test failed)",
    )
    group.addoption(
        "--cvdiag-report-all",
        action="store_true",
        default=False,
        help="with --cvdiag-report: the passed tests that used cvdiag_events too",
    )


def configure(config: pytest.Config) -> None:
    path = config.getoption("cvdiag_report", default=None)
    every = bool(config.getoption("cvdiag_report_all", default=False))
    if not path:
        if every:
            raise pytest.UsageError("--cvdiag-report-all needs --cvdiag-report=PATH")
        return
    # Resolved now, as --junitxml does: a test that changes directory does not move the page.
    where = os.path.expanduser(os.path.expandvars(str(path)))
    timeout = config.getoption("cvdiag_first_token_timeout", default=None)
    path = os.path.normpath(config.invocation_params.dir / where)
    options = Options(path, every, None if timeout is None else float(timeout))
    config.stash[_OPTIONS_KEY] = options
    if not hasattr(config, "workerinput"):  # an xdist worker ships its lines instead
        from cvdiag.pytest_plugin.attempts import RECORDER_KEY
        from cvdiag.pytest_plugin.probe_log import PATH_KEY

        collector = Collector(
            options,
            lambda: config.stash.get(RECORDER_KEY, None),
            lambda: config.stash.get(PATH_KEY, None),
        )
        config.stash[_COLLECTOR_KEY] = collector
        config.pluginmanager.register(collector, "cvdiag-report")


def unconfigure(config: pytest.Config) -> None:
    collector = config.stash.get(_COLLECTOR_KEY, None)
    if collector is not None:
        collector.close()


def on_report(
    item: pytest.Item, when: str, report: pytest.TestReport, lines: Collection[bytes] | None
) -> None:
    """Each phase's report of a test that used ``cvdiag_events`` (``lines``: its captured lines):
    a failed one names the page; the teardown one hands the lines on when they belong in it."""
    options = item.config.stash.get(_OPTIONS_KEY, None)
    if options is None or lines is None:
        return
    if report.failed:
        item.stash[_OUTCOME_KEY] = "failed"
        # The anchors are known only once the page is written; the collector rewrites this.
        report.sections.append((SECTION, f"report: {options.path}"))
    elif report.skipped and item.stash.get(_OUTCOME_KEY, None) != "failed":
        # Beside a passed test's id, an expected failure or a skip is not called "passed".
        item.stash[_OUTCOME_KEY] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    if when != "teardown":
        return
    outcome = item.stash.get(_OUTCOME_KEY, "passed")
    if outcome != "failed" and not options.every:
        return
    collector = item.config.stash.get(_COLLECTOR_KEY, None)
    if collector is not None:
        collector.add(report.nodeid, outcome, list(lines))
    else:  # text, not bytes: whatever serialises the report (execnet, JSON) carries it
        text = [line.decode("utf-8", "replace") for line in lines]
        setattr(report, SHIPPED, {"outcome": outcome, "lines": text})


class Collector:
    """The process that reports the session (not an xdist worker): the tests' lines in a log
    beside the page, then the page, with the backend's stories and the session's tests (from
    the ``Recorder``). Registered as a plugin only when ``--cvdiag-report`` is given."""

    def __init__(
        self,
        options: Options,
        recorder: Callable[[], Recorder | None],
        probe: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.options = options
        self._recorder = recorder
        self._probe = probe
        # Beside the page, and kept: the page's evidence names the log it read. Where the
        # page's folder cannot be made, a temporary log keeps the run going; the page's own
        # write then fails, and says so.
        self._log_path = f"{os.path.splitext(options.path)[0]}-envelopes.log"
        try:
            os.makedirs(os.path.dirname(options.path), exist_ok=True)
            self._log = open(self._log_path, "wb")  # noqa: SIM115 (closed by close())
        except OSError:
            handle, self._log_path = tempfile.mkstemp(prefix="cvdiag-pytest-", suffix=".log")
            self._log = os.fdopen(handle, "wb")
        #: Node id → its outcome (failed, passed, skipped, xfailed), in the order they finished.
        self._tests: dict[str, str] = {}
        #: Node id → its test ids, in emit order; test id → the node ids that emitted it.
        self._ids_of: dict[str, dict[str, None]] = {}
        self._nodes_of: dict[str, dict[str, None]] = {}
        self._failures: list[pytest.TestReport] = []
        self._warnings: list[str] = []
        self._found: Report | None = None
        self._problem: str | None = None

    def add(self, nodeid: str, outcome: str, lines: Iterable[bytes]) -> None:
        self._tests[nodeid] = outcome
        ids = self._ids_of.setdefault(nodeid, {})
        for line in lines:
            self._log.write(b"CVDIAG " + line + b"\n")
            test_id = _test_id(line)
            if test_id is not None:
                ids[test_id] = None
                self._nodes_of.setdefault(test_id, {})[nodeid] = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # tryfirst: the lines are taken off before other plugins see (or serialise) the report.
        shipped = report.__dict__.pop(SHIPPED, None)
        if isinstance(shipped, dict):
            lines = (str(line).encode("utf-8") for line in shipped.get("lines", ()))
            self.add(report.nodeid, str(shipped.get("outcome")), lines)
        if report.failed and not any(name == SECTION for name, _ in report.sections):
            attempt = getattr(report, "cvdiag_attempt", None)  # a test that forwarded an id
            if isinstance(attempt, dict) and attempt.get("test_ids"):
                report.sections.append((SECTION, f"report: {self.options.path}"))
        if report.failed and any(name == SECTION for name, _ in report.sections):
            self._failures.append(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the page before the terminal shows the failures, so their sections can name
        each test's anchor in it."""
        from cvdiag.diagnosis.classes import DEFAULT_FIRST_TOKEN_TIMEOUT
        from cvdiag.pytest_plugin.backend_log import expand
        from cvdiag.report import gather
        from cvdiag.report.comparison import attach
        from cvdiag.runs.cases import drawn_ids, labels

        self._log.close()
        recorder = self._recorder()
        cases = recorder.all_cases() if recorder is not None else []
        backend = expand(recorder.backend, recorder.root) if recorder is not None else []
        backend = [name for name in backend if os.path.isfile(name)]  # the recorder said why
        # The backend's own logs hold other runs' test ids; the probe log is this session's.
        others = bool(backend)
        # What the tests' clients saw (--cvdiag-probe-log), read beside the backend's lines.
        probe = self._probe()
        if probe is not None and os.path.isfile(probe) and probe not in backend:
            backend.append(probe)
        # The backend's log holds other runs' and other tests' ids: only this session's.
        wanted = {test_id for case in cases for test_id in case.test_ids()}
        if not self.options.every:
            wanted &= drawn_ids(cases)
        only = frozenset(wanted | set(self._nodes_of)) if backend else None
        # No test id of this session to draw from them: the other logs are not read at all
        # (an empty filter would read every test id in them).
        extra = backend if only else []
        timeout = self.options.first_token_timeout
        timeout = DEFAULT_FIRST_TOKEN_TIMEOUT if timeout is None else timeout
        try:
            found = gather(
                [self._log_path, *extra],
                every=True,
                only=only,
                draw=drawn_ids(cases),
                warn=self._warnings.append,
                first_token_timeout=timeout,
            )
            # As ``cvdiag report`` does: a failure beside its test's passing attempt.
            attach(found, [self._log_path, *backend], cases, first_token_timeout=timeout)
            found.sources = ["pytest session", *backend]
            if others:  # the backend's log may hold earlier sessions' test ids too
                found.scope = (
                    "only this session's test ids are listed: the backend log's others are left out"
                )
            found.cases = cases
            found.every = self.options.every  # drawn from a log already chosen: every=True
            found.labels = labels(cases)
            found.labels.update(
                (test_id, self._label(nodes)) for test_id, nodes in self._nodes_of.items()
            )
            self._found = found
            _write_page(self.options.path, found)
        except OSError as exc:
            self._problem = f"not written: {self.options.path}: {exc.strerror or exc}"
            anchors: dict[str, str] = {}
            if session.exitstatus == pytest.ExitCode.OK:  # a missing artifact fails the run
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            anchors = {story.test_id: f"#t{index}" for index, story in enumerate(found.stories)}
        forwarded = {case.name: case.test_ids() for case in cases}
        for report in self._failures:
            ids = [*self._ids_of.get(report.nodeid, ()), *forwarded.get(report.nodeid, ())]
            text = self._section(list(dict.fromkeys(ids)), anchors)
            report.sections[:] = [
                (name, text if name == SECTION else content) for name, content in report.sections
            ]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for warning in self._warnings:
            terminalreporter.write_line(f"cvdiag report: warning: {warning}")
        terminalreporter.write_sep("-", self._summary())

    def close(self) -> None:
        self._log.close()
        with contextlib.suppress(OSError):
            if self._problem is not None or os.path.getsize(self._log_path) == 0:
                os.unlink(self._log_path)  # no page names it

    def _label(self, nodes: dict[str, None]) -> str:
        # A test id every test sends (a fixed header) would otherwise label itself with the suite.
        shown = list(nodes)[:MAX_LABELLED]
        names = [f"{node} ({self._tests[node]})" if self.options.every else node for node in shown]
        more = len(nodes) - len(shown)
        return ", ".join(names) + (f" and {_count(more, 'more test')}" if more else "")

    def _section(self, ids: list[str], anchors: dict[str, str]) -> str:
        if self._problem is not None:
            return f"report: {self._problem}"
        path = self.options.path
        drawn = [anchors[test_id] for test_id in ids if test_id in anchors]
        if drawn:
            more = f" (also {', '.join(drawn[1:])})" if len(drawn) > 1 else ""
            return f"report: {path}{drawn[0]}{more}"
        if ids:
            return f"report: {path} (test id {ids[0]} listed, not drawn: past the page's limit)"
        return f"report: {path} (the test emitted no envelope)"

    def _summary(self) -> str:
        if self._problem is not None:
            return f"cvdiag report: {self._problem}"
        path = self.options.path
        found = self._found
        if found is not None and found.cases:
            from cvdiag.runs.cases import headline

            test_ids = _count(found.test_ids, "test id")
            return f"cvdiag report: {path} ({headline(found.cases)}; {test_ids})"
        if not self._tests:
            nothing = "no test" if self.options.every else "no failed test"
            return f"cvdiag report: {path} ({nothing} used cvdiag_events)"
        failed = sum(outcome == "failed" for outcome in self._tests.values())
        test_ids = _count(self._found.test_ids if self._found is not None else 0, "test id")
        if self.options.every:
            tests = _count(len(self._tests), "test")
            return f"cvdiag report: {path} ({tests}, {failed} failed, {test_ids})"
        return f"cvdiag report: {path} ({_count(failed, 'failed test')}, {test_ids})"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _test_id(line: bytes) -> str | None:
    try:
        envelope = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None  # the page counts it as malformed; it names no test id to label
    test_id = envelope.get("test_id") if isinstance(envelope, dict) else None
    return test_id if isinstance(test_id, str) else None


def _write_page(path: str, found: Report) -> None:
    """Write next to ``path`` and move it into place: a reader never sees half a page, and a
    page from an earlier run is replaced only by a whole one."""
    from cvdiag.report import write

    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)  # as --junitxml does: an artifacts folder need not exist
    handle, temporary = tempfile.mkstemp(prefix=".cvdiag-report-", suffix=".html", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            write(found, out)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide the page from a CI uploader
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
