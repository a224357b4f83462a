"""pytest plugin: the ``cvdiag_events`` fixture, the ``cvdiag`` marker, ``--cvdiag-log`` and
``--cvdiag-report`` (``cvdiag.pytest_report``).

Registered through the ``pytest11`` entry point, so installing cvdiag is enough.
"""

from __future__ import annotations

import asyncio
import collections
import difflib
import os
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

import pytest

from cvdiag import pytest_aimock, pytest_report, pytest_runs
from cvdiag.core.context import _CURRENT
from cvdiag.core.settings import Settings
from cvdiag.pipeline import emitter as _emitter_module
from cvdiag.pipeline.emitter import Emitter
from cvdiag.schema.vocabulary import Tier
from cvdiag.sinks import FileSink, MemorySink, Sink, StdoutSink

Envelope = Mapping[str, Any]
_LOG_KEY = pytest.StashKey[FileSink]()
RECORDER_KEY = pytest_runs.RECORDER_KEY
cvdiag_test_id = pytest_runs.cvdiag_test_id
#: Where a test's ``CvdiagEvents`` is kept on its item (the failure report reads it).
EVENTS_KEY = pytest.StashKey["CvdiagEvents"]()


class CvdiagEvents:
    """The envelopes emitted during one test, in emit order.

    Call it to capture with other settings from then on — a tier chosen by a test parameter, a
    setting a marker cannot carry: ``cvdiag_events("verbose", debug_max_envelopes=10)``.
    """

    def __init__(self, sink: MemorySink, emitter: Emitter, sinks: Sequence[Sink] = ()) -> None:
        self._sink = sink
        self._sinks = tuple(sinks) or (sink,)
        self.emitter = emitter

    def __call__(self, tier: Tier | str = Tier.DEBUG, **settings: Any) -> CvdiagEvents:
        """Capture from now on with ``Settings(enabled=True, tier=tier, **settings)``, starting
        from no envelopes; returns this object. The test's process-wide emitter is replaced
        (and restored with the rest after the test)."""
        try:
            configured = Settings(enabled=True, tier=tier, **settings)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            pytest.fail(f"cvdiag_events(...): {exc}", pytrace=False)
        self.emitter.flush()
        self.emitter = Emitter(configured, sinks=list(self._sinks))
        _emitter_module._install(self.emitter)
        self._sink.clear()
        return self

    @property
    def envelopes(self) -> collections.deque[Envelope]:
        """The captured envelopes themselves (live: they grow as the test emits)."""
        return self._sink.envelopes

    @property
    def lines(self) -> collections.deque[bytes]:
        """Each captured envelope's ``CVDIAG`` line as written, without the prefix."""
        return self._sink.lines

    def all(self) -> list[Envelope]:
        # list() of a deque copies it in C without releasing the GIL: a consistent snapshot
        # even while the heartbeat thread appends. Iterating the deque itself could raise.
        return list(self._sink.envelopes)

    def boundaries(self) -> list[str]:
        return [str(env["boundary"]) for env in self.all()]

    def of(self, boundary: str) -> list[Envelope]:
        return [env for env in self.all() if env["boundary"] == boundary]

    def for_test_id(self, test_id: str) -> list[Envelope]:
        return [env for env in self.all() if env["test_id"] == test_id]

    def clear(self) -> None:
        self._sink.clear()

    def wait_for(self, boundary: str, *, timeout: float = 5.0, count: int = 1) -> list[Envelope]:
        """Block until ``count`` envelopes of ``boundary`` were emitted; fail after ``timeout``.

        For a server running in another thread. Inside a coroutine use ``wait_for_async``, which
        lets the event loop run while it waits.
        """
        deadline = time.monotonic() + timeout
        while len(found := self.of(boundary)) < count:
            if time.monotonic() > deadline:
                self._timed_out(boundary, count, timeout)
            time.sleep(0.005)
        return found

    async def wait_for_async(
        self, boundary: str, *, timeout: float = 5.0, count: int = 1
    ) -> list[Envelope]:
        """``wait_for`` for async tests (pytest-asyncio, anyio)."""
        deadline = time.monotonic() + timeout
        while len(found := self.of(boundary)) < count:
            if time.monotonic() > deadline:
                self._timed_out(boundary, count, timeout)
            await asyncio.sleep(0.005)
        return found

    def _timed_out(self, boundary: str, count: int, timeout: float) -> None:
        seen = len(self.of(boundary))
        pytest.fail(
            f"cvdiag: waited {timeout}s for {count} x {boundary}, saw {seen}; emitted so far: "
            f"{self.boundaries()}"
        )

    def assert_sequence(self, expected: Sequence[str], *, test_id: str | None = None) -> None:
        """Assert that ``expected`` boundaries occur in this order (others may come between)."""
        envelopes = self.for_test_id(test_id) if test_id is not None else self.all()
        actual = [str(env["boundary"]) for env in envelopes]
        position = 0
        for boundary in actual:
            if position < len(expected) and boundary == expected[position]:
                position += 1
        if position == len(expected):
            return
        diff = "\n".join(
            difflib.unified_diff(
                list(expected), actual, "expected (in order)", "emitted", lineterm="", n=len(actual)
            )
        )
        scope = f" for test id {test_id}" if test_id is not None else ""
        pytest.fail(
            f"cvdiag: boundary {expected[position]!r} (#{position + 1} of the expected sequence)"
            f" was not emitted in order{scope}\n{diff}",
            pytrace=False,
        )


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
    pytest_report.add_options(group)
    pytest_aimock.add_options(group)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cvdiag(tier='debug', stdout=False, **settings): options of the cvdiag_events fixture",
    )
    path = config.getoption("--cvdiag-log", default=None)
    if path:
        config.stash[_LOG_KEY] = FileSink(_log_path(config, str(path)))
    backend = list(config.getoption("cvdiag_backend_log", default=None) or [])
    if _recording(config) and not hasattr(config, "workerinput"):
        wait = float(config.getoption("cvdiag_backend_wait", default=5.0))
        recorder = pytest_runs.Recorder(backend, pytest_runs.root_of(config), wait)
        config.stash[RECORDER_KEY] = recorder
        config.pluginmanager.register(recorder, "cvdiag-runs")
    pytest_report.configure(config)
    pytest_aimock.configure(config)


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
    sink = config.stash.get(_LOG_KEY, None)
    if sink is not None:
        sink.close()
    pytest_report.unconfigure(config)


@pytest.fixture
def cvdiag_events(request: pytest.FixtureRequest) -> Iterator[CvdiagEvents]:
    """Enable cvdiag for this test and capture every envelope in memory.

    Options come from ``@pytest.mark.cvdiag(tier=..., stdout=..., **Settings fields)``; the
    tier defaults to debug, so every boundary is captured. The process-wide emitter and the
    request context are restored afterwards.
    """
    marker = request.node.get_closest_marker("cvdiag")
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    to_stdout = bool(options.pop("stdout", False))
    options.setdefault("tier", "debug")
    memory = MemorySink()
    sinks: list[Sink] = [memory]
    if to_stdout:
        sinks.append(StdoutSink())
    log = request.config.stash.get(_LOG_KEY, None)
    if log is not None:
        sinks.append(log)

    try:
        settings = Settings(enabled=True, **options)
    except (TypeError, ValueError) as exc:  # a bad marker: say which, not a bare KeyError
        pytest.fail(f"@pytest.mark.cvdiag(...): {exc}", pytrace=False)
    previous = _emitter_module._emitter
    emitter = Emitter(settings, sinks=sinks)
    _emitter_module._install(emitter)
    token = _CURRENT.set(None)
    events = CvdiagEvents(memory, emitter, sinks)
    request.node.stash[EVENTS_KEY] = events
    try:
        yield events
    finally:
        events.emitter.flush()
        _CURRENT.reset(token)
        _emitter_module._install(previous)  # type: ignore[arg-type]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Add the replay of what a failed test emitted to its report (and, with
    ``--cvdiag-report``, where the page shows it)."""
    report = yield
    if _recording(item.config):  # in an xdist worker too: the controller records
        pytest_runs.ship(item, report)
    events = item.stash.get(EVENTS_KEY, None)
    if events is not None and report.failed and call.when == "call":
        report.sections.append(("cvdiag replay", _replay(events.all())))
    pytest_report.on_report(item, call.when, report, events.lines if events is not None else None)
    return report


def _replay(envelopes: Sequence[Envelope]) -> str:
    """Each test id's timeline, drawn as ``cvdiag replay`` draws it, for the failure report."""
    from cvdiag.diagnosis.timeline import build, render
    from cvdiag.logs.reading import Record, ts_key

    by_test: dict[str, list[Record]] = {}
    for number, env in enumerate(envelopes, 1):
        record = Record(
            "memory", number, b"", dict(env), (ts_key(str(env["ts"])) or "", int(env["mono_ns"]))
        )
        by_test.setdefault(str(env["test_id"]), []).append(record)
    if not by_test:
        return "no envelopes were emitted"
    # render's first line already names the test id (with its count and span).
    return "\n\n".join(
        "\n".join(render(build(test_id, records))) for test_id, records in by_test.items()
    )
