"""The probe's writer: one emitter whose sink is the probe log, and the state of each test id a
test forwarded, from its ``probe.start`` to its ``probe.exit``.

The lines go through ``Emitter.emit`` like the backend's: closed metadata (the schema's keys
for each ``probe.*`` boundary), scrubbed, capped, serialized once with orjson, appended whole
to the file (several processes, e.g. pytest-xdist workers, may share it: each batch is one
``write`` in append mode). Nothing here raises into the test: a failure is counted
(``cvdiag.core.guard``) and the test goes on.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from cvdiag.core.context import RequestContext
from cvdiag.core.guard import record_failure
from cvdiag.core.settings import Settings
from cvdiag.pipeline.emitter import Emitter
from cvdiag.schema.ids import join_key
from cvdiag.schema.vocabulary import Tier
from cvdiag.scrubbing.redact import scrub_text
from cvdiag.sinks import FileSink, Sink

#: The slug of probe lines: the runner does not know the backend's.
SLUG: Final = "probe"
#: Characters of a test's name kept (after scrubbing).
TEST_NAME_MAX: Final = 512
#: ``probe.exit``'s ``terminal_outcome`` and the envelope's outcome, by the test's outcome.
_TERMINAL: Final = {"passed": "ok", "skipped": "ok", "failed": "err", "timeout": "timeout"}


@dataclasses.dataclass(slots=True)
class TestIdState:
    """What the probe knows of one test id during one test."""

    context: RequestContext
    began: float  # time.perf_counter() at probe.start
    sent: int = 0
    events: int = 0
    first_byte: float | None = None
    #: Requests whose response head arrived and whose body has not ended (see ``finish``).
    open: dict[int, Any] = dataclasses.field(default_factory=dict)


class ProbeWriter:
    """Writes one runner's probe lines to ``path`` (or to ``sinks``) at ``tier``.

    ``begin_test`` / ``end_test`` bracket a test; requests seen between them are recorded
    (``clients.py`` hands them over), each test id opened with ``probe.start`` when the test
    forwards it first and closed with ``probe.exit`` when the test ends.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        tier: Tier = Tier.VERBOSE,
        runner: str = "pytest",
        sinks: list[Sink] | None = None,
    ) -> None:
        settings = dataclasses.replace(
            Settings.from_env(),
            enabled=True,
            tier=tier,
            otel=False,
            debug_refused=False,
            # A long session at DEBUG falls back to what a probe writes by default.
            debug_fallback_tier=Tier.VERBOSE,
        )
        self.path = None if path is None else os.fspath(path)
        if sinks is None:
            sinks = [FileSink(self.path or os.devnull)]
        self.emitter = Emitter(settings, sinks=sinks)
        self.runner = runner
        self._lock = threading.Lock()
        self._test: str | None = None
        self._ids: dict[str, TestIdState] = {}

    # --- a test -------------------------------------------------------------------------

    @property
    def debug(self) -> bool:
        """Whether every SSE event is written (the tier in force: DEBUG falls back at its
        bounds, as the backend's does), not only each response's first."""
        return self.emitter.tier >= Tier.DEBUG

    @property
    def active(self) -> bool:
        """Whether a test is running (requests outside one are not recorded)."""
        return self._test is not None

    def begin_test(self, name: str) -> None:
        with self._lock:
            self._test = name
            self._ids = {}

    def test_ids(self) -> list[str]:
        """The test ids the current test forwarded so far, in the order first seen."""
        return list(self._ids)

    def start(self, raw_test_id: str | bytes) -> TestIdState | None:
        """The state of a test id in this test, opening it (``probe.start``) when new; None
        when no test runs or the id is no join key (the backend would mint its own)."""
        test_id = join_key(raw_test_id)
        if test_id is None or self._test is None:
            return None
        with self._lock:
            state = self._ids.get(test_id)
            if state is not None:
                return state
            context = RequestContext(test_id=test_id, trace_id=test_id, slug=SLUG)
            state = self._ids[test_id] = TestIdState(context, time.perf_counter())
            name = self._test
        self.emit(
            state,
            "probe.start",
            "info",
            {
                "url": None,
                "viewport": None,
                "runner": self.runner,
                "test": scrub_text(name[:TEST_NAME_MAX]),
            },
        )
        return state

    def end_test(self, outcome: str) -> None:
        """The test ended with ``outcome`` (passed, failed, skipped, timeout): every stream it
        left open is closed as left early, then each test id gets its ``probe.exit``."""
        with self._lock:
            states, self._ids, self._test = self._ids, {}, None
        terminal = _TERMINAL.get(outcome, "err")
        for state in states.values():
            for observed in list(state.open.values()):
                observed.left_early()
            now = time.perf_counter()
            first = state.first_byte
            self.emit(
                state,
                "probe.exit",
                terminal,
                {
                    "terminal_outcome": terminal,
                    "total_duration_ms": _ms(state.began, now),
                    "sse_event_count": state.events,
                    "first_token_delta_ms": None if first is None else _ms(state.began, first),
                    "test_outcome": "failed" if outcome == "timeout" else outcome,
                    "requests": state.sent,
                },
            )
        self.flush()

    def next_index(self, state: TestIdState) -> int:
        with self._lock:
            index = state.sent
            state.sent += 1
        return index

    # --- writing ------------------------------------------------------------------------

    def emit(
        self,
        state: TestIdState,
        boundary: str,
        outcome: str,
        metadata: Mapping[str, Any],
        duration_ms: int | None = None,
    ) -> None:
        self.emitter.emit(
            boundary,
            outcome=outcome,
            metadata=metadata,
            duration_ms=duration_ms,
            context=state.context,
            parent_span_id=None,
        )

    def flush(self, timeout: float = 5.0) -> None:
        self.emitter.flush(timeout)

    def close(self) -> None:
        try:
            self.emitter.flush()
            for sink in self.emitter.sinks:
                sink.close()
        except Exception as exc:
            record_failure("sink", exc)


def _ms(start: float, end: float) -> int:
    return max(0, round((end - start) * 1000))
