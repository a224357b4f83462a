"""The pytest integration, one part: the ``cvdiag_events`` and ``cvdiag_test_id`` fixtures, the
``cvdiag`` marker and the plugin's options (``--cvdiag-log``, ``--cvdiag-report``,
``--cvdiag-backend-log``, ``--cvdiag-probe-log``).

Registered through the ``pytest11`` entry point ``cvdiag.pytest_plugin`` (this face), so
installing cvdiag is enough; ``-p cvdiag.pytest_plugin`` loads it by hand. Its modules:
``events`` (the in-memory capture), ``attempts`` (the forwarded test id; the session's tests and
attempts), ``backend_log`` (a backend's own log read for those ids), ``report_page`` (the session's
page) and ``probe_log`` (what the tests' clients saw, written by ``cvdiag.probe``). It sits on
top: no part imports it.

May import: cvdiag.core, cvdiag.diagnosis, cvdiag.logs, cvdiag.pipeline, cvdiag.probe,
cvdiag.report, cvdiag.runs, cvdiag.schema, cvdiag.sinks.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from cvdiag.pytest_plugin import aimock_journal, attempts, probe_log, report_page
from cvdiag.pytest_plugin.attempts import RECORDER_KEY, ForwardedTestId, cvdiag_test_id
from cvdiag.pytest_plugin.events import EVENTS_KEY, LOG_KEY, CvdiagEvents, cvdiag_events, replay
from cvdiag.sinks import FileSink

__all__ = [
    "EVENTS_KEY",
    "RECORDER_KEY",
    "CvdiagEvents",
    "ForwardedTestId",
    "cvdiag_events",
    "cvdiag_test_id",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cvdiag")
    group.addoption(
        "--cvdiag-log",
        metavar="PATH",
        default=None,
        help="append every envelope captured by cvdiag_events to PATH (a CI artifact that "
        "`cvdiag classify` reads; its folder is created)",
    )
    group.addoption(
        "--cvdiag-backend-log",
        metavar="PATH",
        action="append",
        default=[],
        help="the log of a backend running in its own process (its stdout), a glob, "
        "repeatable: each failed test's report gets the story of the test ids it forwarded "
        "(cvdiag_test_id), and --cvdiag-report draws them",
    )
    group.addoption(
        "--cvdiag-backend-wait",
        metavar="SECONDS",
        type=float,
        default=5.0,
        help="wait up to SECONDS for a backend story's late lines (default 5); a story "
        "still open then is marked incomplete",
    )
    group.addoption(
        "--cvdiag-first-token-timeout",
        metavar="SECONDS",
        type=float,
        default=None,
        help="the first-token timeout --cvdiag-report classifies with (default 60, as cvdiag "
        "report's)",
    )
    report_page.add_options(group)
    aimock_journal.add_options(group)
    probe_log.add_options(group)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cvdiag(tier='debug', stdout=False, **settings): options of the cvdiag_events fixture",
    )
    path = config.getoption("--cvdiag-log", default=None)
    if path:
        config.stash[LOG_KEY] = FileSink(_log_path(config, str(path)))
    backend = list(config.getoption("cvdiag_backend_log", default=None) or [])
    if _recording(config) and not hasattr(config, "workerinput"):
        wait = float(config.getoption("cvdiag_backend_wait", default=5.0))
        recorder = attempts.Recorder(backend, attempts.root_of(config), wait)
        config.stash[RECORDER_KEY] = recorder
        config.pluginmanager.register(recorder, "cvdiag-runs")
    probe_log.configure(config)
    report_page.configure(config)
    aimock_journal.configure(config)


def _recording(config: pytest.Config) -> bool:
    """Whether the session's tests are recorded as a run (their attempts and test ids)."""
    return bool(
        config.getoption("cvdiag_backend_log", default=None)
        or config.getoption("cvdiag_report", default=None)
    )


def _log_path(config: pytest.Config, path: str) -> str:
    """``--cvdiag-log``'s path, its folder made (as --junitxml does); a path that cannot be
    written is a usage error naming it, never a log silently missing."""
    where = os.path.normpath(config.invocation_params.dir / os.path.expanduser(path))
    try:
        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(where, "ab"):
            pass
    except OSError as exc:
        message = f"--cvdiag-log: cannot write {where}: {exc.strerror or exc}"
        raise pytest.UsageError(message) from None
    return where


def pytest_unconfigure(config: pytest.Config) -> None:
    sink = config.stash.get(LOG_KEY, None)
    if sink is not None:
        sink.close()
    probe_log.unconfigure(config)
    report_page.unconfigure(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures: its requests from now on are its own (the probe)."""
    probe_log.begin(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Add the replay of what a failed test emitted to its report (and, with
    ``--cvdiag-report``, where the page shows it)."""
    report = yield
    probe_log.on_report(item, call.when, report)  # first: the test ids it sent go with it
    attempts.note_failure(item, report)
    if _recording(item.config):  # in an xdist worker too: the controller records
        attempts.ship(item, report)
    events = item.stash.get(EVENTS_KEY, None)
    if events is not None and report.failed and call.when == "call":
        report.sections.append(("cvdiag replay", replay(events.all())))
    report_page.on_report(item, call.when, report, events.lines if events is not None else None)
    return report
