"""Hand-written probe lines (docs/envelope.md's probe rows, CONTRACT of issue 45): a ``Probe``
writes what a test client saw of one test id, on a clock of its own, ``skew_ms`` behind the
backend's (``Story``'s), as the pytest plugin or the Playwright fixture would write them.

``at`` is always the true moment on the backend's clock (as ``Story.emit`` takes it); the line's
``ts`` and ``mono_ns`` are the probe's own clock's reading of it, so a test plants a skew and
checks the reader finds it.
"""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import orjson

from cvdiag.pipeline.envelope import NULL_EDGE_HEADERS
from tests.support.stories import T0, Story

_spans = itertools.count(0x9000)


class Probe:
    """One probe writer's lines for one test id."""

    def __init__(
        self,
        test_id: str,
        *,
        skew_ms: float = 0.0,
        start_ms: float = 0.0,
        runner: str = "pytest",
        mono0: int = 7 * 10**11,
    ) -> None:
        self.test_id = test_id
        self.skew_ms = skew_ms
        self.start_ms = start_ms
        self.runner = runner
        self.mono0 = mono0
        self.envelopes: list[dict[str, Any]] = []
        self._sent = 0

    def emit(
        self,
        boundary: str,
        at_ms: float,
        metadata: dict[str, Any],
        *,
        outcome: str = "info",
        duration_ms: int | None = None,
    ) -> None:
        own = self.start_ms + at_ms - self.skew_ms  # the probe's clock reads the moment so
        moment = T0 + datetime.timedelta(milliseconds=own)
        ts = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        self.envelopes.append(
            {
                "schema_version": 1,
                "test_id": self.test_id,
                "trace_id": self.test_id,
                "span_id": f"{next(_spans):016x}",
                "parent_span_id": None,
                "layer": "probe",
                "boundary": boundary,
                "slug": "probe",
                "demo": "default",
                "ts": ts,
                "mono_ns": self.mono0 + int(own * 1_000_000),
                "duration_ms": duration_ms,
                "outcome": outcome,
                "edge_headers": dict(NULL_EDGE_HEADERS),
                "metadata": metadata,
            }
        )

    # -- the contract's boundaries --------------------------------------------------------------

    def start(self, at: float = 0.0, *, url: str | None = None) -> None:
        self.emit(
            "probe.start",
            at,
            {"url": url, "viewport": None, "runner": self.runner, "test": "test_chat"},
        )

    def send(
        self, at: float, *, url: str = "/chat", method: str = "POST", timeout: float | None = None
    ) -> int:
        index = self._sent
        self._sent += 1
        self.emit(
            "probe.message.send",
            at,
            {
                "message_index": index,
                "char_count": 42,
                "demo": None,
                "method": method,
                "url": url,
                "timeout_ms": timeout,
            },
        )
        return index

    def head(self, at: float, index: int, *, sent: float, status: int = 200) -> None:
        self.emit(
            "probe.network.response",
            at,
            {
                "url": "/chat",
                "status": status,
                "content_length": None,
                "duration_ms": at - sent,
                "message_index": index,
            },
            duration_ms=int(at - sent),
        )

    def event(self, at: float, index: int, sequence: int = 0) -> None:
        self.emit(
            "probe.sse.event",
            at,
            {
                "event_type": "TEXT_MESSAGE_CONTENT",
                "payload_size_bytes": 60,
                "sequence_num": sequence,
                "message_index": index,
            },
        )

    def aborted(
        self,
        at: float,
        index: int,
        *,
        cause: str = "client-timeout",
        timeout: float | None = None,
        size: int = 0,
    ) -> None:
        kind = "timeout" if cause == "client-timeout" else "rst"
        self.emit(
            "probe.sse.aborted",
            at,
            {
                "termination_kind": kind,
                "bytes_before_abort": size,
                "message_index": index,
                "timeout_ms": timeout,
                "cause": cause,
            },
            outcome="timeout" if cause == "client-timeout" else "info",
        )

    def error(
        self,
        at: float,
        index: int,
        *,
        error_class: str = "ReadTimeout",
        cause: str = "client-timeout",
        timeout: float | None = None,
        url: str = "/chat",
    ) -> None:
        self.emit(
            "probe.network.error",
            at,
            {
                "url": url,
                "error_class": error_class,
                "response_status": None,
                "message_index": index,
                "timeout_ms": timeout,
                "cause": cause,
            },
            outcome="timeout" if cause == "client-timeout" else "err",
        )

    def first_token(self, at: float) -> None:
        self.emit("probe.dom.firsttoken", at, {"delta_ms_from_start": at, "text_length": 12})

    def alternate(self, at: float) -> None:
        self.emit("probe.dom.alternate_content", at, {"child_type_histogram": {"div": 2}})

    def console_error(self, at: float, message: str = "TypeError: x is undefined") -> None:
        self.emit(
            "probe.console.error",
            at,
            {
                "level": "error",
                "message_scrubbed": message,
                "source_file": "app.js",
                "line_col": "1:2",
            },
            outcome="err",
        )

    def exit(
        self, at: float, *, passed: bool = True, events: int = 0, first: float | None = None
    ) -> None:
        self.emit(
            "probe.exit",
            at,
            {
                "terminal_outcome": "ok" if passed else "err",
                "total_duration_ms": at,
                "sse_event_count": events,
                "first_token_delta_ms": first,
                "failure_classifier": None,
                "test_outcome": "passed" if passed else "failed",
                "requests": self._sent,
            },
            outcome="ok" if passed else "err",
            duration_ms=int(at),
        )

    def lines(self) -> list[str]:
        return [f"CVDIAG {orjson.dumps(env).decode()}" for env in self.envelopes]


def write(path: Any, *writers: Story | Probe) -> None:
    """The writers' lines in one file, each writer's in its own order, writers one after the
    other (a reader must not rely on one log's order across writers)."""
    lines = [line for writer in writers for line in writer.lines()]
    path.write_text("\n".join(lines) + "\n")
