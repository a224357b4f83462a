"""The mock provider's layer joined to the backend's: each ``aimock.*`` entry (one request the
mock served, as its journal recorded it: ``cvdiag.logs.aimock``) paired with the backend's LLM
call that sent it, and the mock's clock bounded against the backend's from those pairs.

θ is the backend's clock minus the mock's. The mock decided on a request after the backend's
call began (θ ≥ call start − entry) and before the call saw its answer or its end (θ ≤ the
call's first chunk, else its response, − entry); the interval is bounded as ``offset.bound``
bounds the probe's, and θ is 0 (the wall clocks as they are) when the interval holds it, else
its nearest end (``MockOffset``). Entries and calls are paired in order, by model when
both name one; a call that failed before it reached anything (a refused connection) is no pair.
A call the backend began with no entry of the mock's, in a test id the mock's record holds, is
a request the mock never saw. The record has one time per request, so an entry's lines all
stand at it: no head, chunk or end time of the mock's is ever read.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from cvdiag.layers.offset import Offset, bound
from cvdiag.logs.reading import Record, key_millis, ts_key

#: Entries and calls kept per test id.
MAX_ENTRIES: Final = 64
#: Error classes of a call that never reached its server: such a call leaves no entry.
_UNREACHED: Final = ("connecterror", "apiconnectionerror", "connectionrefused", "connecttimeout")


def _ms(record: Record) -> float:
    ts = record.envelope.get("ts")
    key = ts_key(ts) if isinstance(ts, str) else None
    return key_millis(key if key is not None else record.key[0])


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: Any, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


@dataclasses.dataclass(slots=True)
class Entry:
    """One request the mock served, as its journal recorded it; ``at_ms`` on the backend's
    clock once the view is made (on the mock's own before)."""

    span: str
    at_ms: float
    records: list[Record] = dataclasses.field(default_factory=list)
    method: str | None = None
    path: str | None = None
    model: str | None = None
    stream: bool = False
    last_user_message: str | None = None
    request_id: str | None = None
    fixture: str | None = None
    decided: bool = False
    status: float | None = None
    latency_ms: float | None = None
    truncate_after_chunks: float | None = None
    disconnect_after_ms: float | None = None
    streaming_profile: bool = False
    #: The mock cut its stream: aimock's ``interruptReason``.
    interrupted: str | None = None
    #: The backend's call this request came from (its span id), once paired.
    call: str | None = None

    @property
    def matched(self) -> bool:
        return self.fixture is not None

    @property
    def request(self) -> str:
        """The request in words: method, path, model, and the last user message."""
        said = f"{self.method or 'POST'} {self.path or '?'}"
        if self.model:
            said += f" for {self.model}"
        if self.last_user_message is not None:
            said += f', last user message "{self.last_user_message[:120]}"'
        return said

    def timing(self) -> str | None:
        """How the fixture told the mock to pace or cut its answer, in its own keys."""
        parts = []
        if self.latency_ms:
            parts.append(f"latency {self.latency_ms:.0f} ms before each chunk")
        if self.streaming_profile:
            parts.append("a streamingProfile")
        if self.truncate_after_chunks is not None:
            parts.append(f"truncateAfterChunks {self.truncate_after_chunks:.0f}")
        if self.disconnect_after_ms is not None:
            parts.append(f"disconnectAfterMs {self.disconnect_after_ms:.0f}")
        return ", ".join(parts) or None


@dataclasses.dataclass(slots=True)
class _Call:
    span: str
    start_ms: float
    model: str | None = None
    answer_ms: float | None = None
    error_class: str | None = None


@dataclasses.dataclass(slots=True)
class MockView:
    """The mock's record of one test id on the backend's clock."""

    entries: list[Entry]
    offset: Offset
    #: The backend's calls (span ids) the mock holds no request of, in start order.
    unseen_calls: list[str]

    def of_call(self, span: str) -> Entry | None:
        return next((e for e in self.entries if e.call == span), None)


class MockJoin:
    """One test id's ``aimock.*`` lines and the backend's LLM calls, in any order."""

    __slots__ = ("_calls", "_entries")

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._calls: dict[str, _Call] = {}

    @property
    def has_mock(self) -> bool:
        return bool(self._entries)

    def add(self, record: Record) -> None:
        env = record.envelope
        boundary = env["boundary"]
        meta = env["metadata"]
        if boundary.startswith("aimock."):
            self._add_entry(record, boundary, env, meta)
        elif boundary == "backend.llm.call.start" and len(self._calls) < MAX_ENTRIES:
            call = self._calls.setdefault(env["span_id"], _Call(env["span_id"], _ms(record)))
            call.start_ms = _ms(record)
            call.model = _str(meta.get("model"), 80) or call.model
        elif boundary == "backend.llm.call.response":
            parent = env.get("parent_span_id")
            answered = self._calls.get(parent) if isinstance(parent, str) else None
            if answered is not None:
                first = _num(meta.get("first_token_delta_ms"))
                at = answered.start_ms + first if first is not None else _ms(record)
                answered.answer_ms = at
                answered.error_class = _str(meta.get("error_class"), 80)
                answered.model = answered.model or _str(meta.get("model"), 80)

    def _add_entry(
        self, record: Record, boundary: str, env: dict[str, Any], meta: dict[str, Any]
    ) -> None:
        span = env["span_id"] if boundary == "aimock.request.ingress" else env.get("parent_span_id")
        if not isinstance(span, str):
            return
        entry = self._entries.get(span)
        if entry is None:
            if len(self._entries) >= MAX_ENTRIES:
                return
            entry = self._entries[span] = Entry(span, _ms(record))
        entry.records.append(record)
        if boundary == "aimock.request.ingress":
            entry.at_ms = _ms(record)
            entry.method = _str(meta.get("method"), 16)
            entry.path = _str(meta.get("path"))
            entry.model = _str(meta.get("model"), 80)
            entry.stream = meta.get("stream") is True
            entry.last_user_message = _str(meta.get("last_user_message"), 160)
            entry.request_id = _str(meta.get("request_id"), 64)
        elif boundary == "aimock.match.decision":
            entry.decided = True
            entry.fixture = _str(meta.get("fixture_id"))
            entry.status = _num(meta.get("status")) or entry.status
            entry.latency_ms = _num(meta.get("fixture_latency_ms"))
            entry.truncate_after_chunks = _num(meta.get("truncate_after_chunks"))
            entry.disconnect_after_ms = _num(meta.get("disconnect_after_ms"))
            entry.streaming_profile = meta.get("streaming_profile") is True
        elif boundary == "aimock.response.aborted":
            entry.interrupted = _str(meta.get("interrupt_reason"), 40) or "cut"
        elif boundary == "aimock.response.complete":
            entry.status = _num(meta.get("http_status")) or entry.status

    def offset(self) -> MockOffset:
        return self._paired()[1]

    def view(self) -> MockView | None:
        """The mock's record on the backend's clock, each entry paired with its call; None
        when the test id has no line of the mock's."""
        if not self._entries:
            return None
        entries, offset, unseen = self._paired()
        for entry in entries:
            entry.at_ms += offset.theta_ms
        return MockView(entries, offset, unseen)

    def _paired(self) -> tuple[list[Entry], MockOffset, list[str]]:
        entries = sorted(
            (dataclasses.replace(e, records=list(e.records)) for e in self._entries.values()),
            key=lambda e: e.at_ms,
        )
        calls = sorted(self._calls.values(), key=lambda c: c.start_ms)
        free = [c for c in calls if not _unreached(c)]
        lowers: list[float] = []
        uppers: list[float] = []
        for entry in entries:
            call = next((c for c in free if _same_model(entry, c)), None)
            if call is None:
                continue
            free.remove(call)
            entry.call = call.span
            lowers.append(call.start_ms - entry.at_ms)
            if call.answer_ms is not None:
                uppers.append(call.answer_ms - entry.at_ms)
        paired = {e.call for e in entries}
        unseen = [c.span for c in calls if c.span not in paired]
        found = bound(uppers, lowers)
        offset = MockOffset(found.lower, found.upper, found.pairs, found.widened_ms)
        return entries, offset, unseen


@dataclasses.dataclass(frozen=True, slots=True)
class MockOffset(Offset):
    """θ for the mock's clock: its wall clock as it is (θ = 0) whenever every pair holds with
    it, else the nearest end of the interval. A mock on the backend's host (the usual harness)
    shares its clock, and a pair's bound is loose (a call's answer may come long after the
    mock decided, or never, cut by a timeout), so the middle of the interval would move an
    entry for nothing."""

    @property
    def theta_ms(self) -> float:
        if self.lower is not None and self.lower > 0:
            return self.lower
        if self.upper is not None and self.upper < 0:
            return self.upper
        return 0.0

    def said(self) -> str:
        if not self.known:
            return "the mock's journal on its own wall clock (no entry paired with an LLM call)"
        many = f"{self.pairs} bound{'s' if self.pairs != 1 else ''}"
        low = "-inf" if self.lower is None else f"{self.lower:+.0f}"
        high = "+inf" if self.upper is None else f"{self.upper:+.0f}"
        moved = (
            f"shifted {self.theta_ms:+.0f} ms"
            if self.theta_ms
            else "its wall clock kept (every pair holds with it)"
        )
        widened = " (the pairs disagreed: widened to hold them)" if self.widened_ms else ""
        return (
            f"the mock's journal within [{low}, {high}] ms of the backend's clock from {many}"
            f" with its LLM calls, {moved}{widened}"
        )


def _same_model(entry: Entry, call: _Call) -> bool:
    return not (entry.model and call.model and entry.model != call.model)


def _unreached(call: _Call) -> bool:
    error = (call.error_class or "").lower()
    return any(word in error for word in _UNREACHED)


__all__ = ["Entry", "MockJoin", "MockOffset", "MockView"]
