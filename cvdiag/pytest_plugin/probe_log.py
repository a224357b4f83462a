"""``--cvdiag-probe-log PATH``: the client's view of every request a test sends with a test id,
written as CVDIAG ``probe`` lines by ``cvdiag.probe`` with no change to the tests.

On by default whenever the session already records: beside ``--cvdiag-log`` (``<log>-probe.log``,
appended as that log is) or beside ``--cvdiag-report``'s page (``<page>-probe.log``, replaced each
session as the page is, and read by the page); ``--cvdiag-probe-log PATH`` chooses the file
(appended), ``--cvdiag-probe-log off`` turns it off. Each test id a test forwards opens with
``probe.start`` (the ``cvdiag_test_id`` fixture's when it is set up; any other when the test first
sends it) and closes with ``probe.exit`` once the test's teardown is over, with its outcome.

Under pytest-xdist every worker appends its own lines to the same file, each batch one write in
append mode, so lines never interleave; the test ids a worker's tests sent travel to the
controller with their reports, as the fixture's do.
"""

from __future__ import annotations

import os
import re
from typing import Final

import pytest

from cvdiag.core.guard import record_failure
from cvdiag.core.settings import Settings
from cvdiag.probe import ProbeWriter, install, uninstall
from cvdiag.pytest_plugin.attempts import IDS_KEY, PROPERTY
from cvdiag.schema.vocabulary import Tier

#: The session's probe writer (in every process that runs tests).
PROBE_KEY = pytest.StashKey[ProbeWriter]()
#: The probe log's path, resolved (the report page reads it).
PATH_KEY = pytest.StashKey[str]()
#: On an item: its outcome so far (failed wins over skipped wins over passed).
_OUTCOME_KEY = pytest.StashKey[str]()
OFF: Final = "off"
#: pytest-timeout's failure: the test's own timeout, not an assertion.
_TEST_TIMEOUT: Final = re.compile(r"Timeout \(?>")


def add_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--cvdiag-probe-log",
        metavar="PATH",
        default=None,
        help="write what the tests' httpx/httpx2 clients saw of each request carrying an "
        "x-test-id as CVDIAG probe lines to PATH (appended); by default beside --cvdiag-log "
        "or --cvdiag-report when given; 'off' turns it off",
    )
    group.addoption(
        "--cvdiag-probe-debug",
        action="store_true",
        default=False,
        help="with the probe on: every SSE event the clients receive (CVDIAG_DEBUG does the "
        "same where it is allowed), not only each response's first",
    )


def probe_path(config: pytest.Config) -> tuple[str | None, bool]:
    """Where the probe writes, and whether the file is replaced at the session's start."""
    given = config.getoption("cvdiag_probe_log", default=None)
    if given is not None and str(given).strip().lower() == OFF:
        return None, False
    log = config.getoption("cvdiag_log", default=None)
    page = config.getoption("cvdiag_report", default=None)
    if given:
        where, fresh = str(given), False
    elif log:
        where, fresh = f"{os.path.splitext(str(log))[0]}-probe.log", False
    elif page:
        where, fresh = f"{os.path.splitext(str(page))[0]}-probe.log", True
    else:
        return None, False
    where = os.path.expanduser(os.path.expandvars(where))
    return os.path.normpath(config.invocation_params.dir / where), fresh


def configure(config: pytest.Config) -> None:
    path, fresh = probe_path(config)
    if path is None:
        return
    try:  # a path that cannot be written costs the probe's lines (counted), never the run
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if fresh and not hasattr(config, "workerinput"):  # before any xdist worker starts
            with open(path, "wb"):
                pass
    except OSError as exc:
        record_failure("sink", exc)
    debug = bool(config.getoption("cvdiag_probe_debug", default=False))
    tier = Tier.DEBUG if debug or Settings.from_env().tier is Tier.DEBUG else Tier.VERBOSE
    writer = ProbeWriter(path, tier=tier, runner="pytest")
    install(writer)
    config.stash[PROBE_KEY] = writer
    config.stash[PATH_KEY] = path


def unconfigure(config: pytest.Config) -> None:
    writer = config.stash.get(PROBE_KEY, None)
    if writer is not None:
        uninstall()
        writer.close()


def begin(item: pytest.Item) -> None:
    """The test's setup begins: from now on its requests are its own."""
    writer = item.config.stash.get(PROBE_KEY, None)
    if writer is None:
        return
    item.stash[_OUTCOME_KEY] = "passed"
    item.stash[IDS_KEY] = []  # this attempt's; the cvdiag_test_id fixture's replaces it
    writer.begin_test(item.nodeid)


def on_report(item: pytest.Item, when: str, report: pytest.TestReport) -> None:
    """Each phase's report: the outcome kept; the test ids the test sent made the attempt's
    (before ``attempts.ship`` carries them) and its JUnit testcase's ``cvdiag_test_id``
    properties, as the fixture's is; after teardown, each test id's ``probe.exit``."""
    writer = item.config.stash.get(PROBE_KEY, None)
    if writer is None or not writer.active:
        return
    ids = item.stash.get(IDS_KEY, None)
    if ids is None:
        ids = item.stash[IDS_KEY] = []
    if when == "setup":
        for test_id in ids:  # the fixture's id opens now, at the test's start
            writer.start(test_id)
    for test_id in writer.test_ids():
        if test_id not in ids:  # an id of the test's own: the JUnit testcase carries it too
            ids.append(test_id)
            item.user_properties.append((PROPERTY, test_id))
            report.user_properties.append((PROPERTY, test_id))
    outcome = item.stash.get(_OUTCOME_KEY, "passed")
    if report.failed:
        timed_out = _TEST_TIMEOUT.search(report.longreprtext or "") is not None
        outcome = "timeout" if timed_out else "failed"
    elif report.skipped and outcome == "passed":
        outcome = "skipped"
    item.stash[_OUTCOME_KEY] = outcome
    if when == "teardown":
        writer.end_test(outcome)
