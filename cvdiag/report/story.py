"""One drawn test id: its class from all its envelopes, and a bounded part of them to show.

Every envelope feeds the classifier's facts (so the class is ``cvdiag classify``'s) and the
waterfall's figures (when each SSE event left, when each heartbeat beat). The table keeps fewer:
of each repeating boundary (SSE events, heartbeats) the first ``HEAD`` and last ``TAIL``, the
run between folded into one row; of the others the first ``KEEP``. Each kept envelope's JSON is
shown on demand, cut at ``JSON_CAP`` bytes, and no more than ``JSON_BUDGET`` bytes of it per
test id: so a page's size is bounded whatever its log holds. Its offsets count from where
``cvdiag classify``'s do (``_one_clock``).
"""

from __future__ import annotations

import array
import collections
import dataclasses
from collections.abc import Iterable
from typing import Final

from cvdiag.diagnosis.classify import Verdict, add_drops, classify
from cvdiag.diagnosis.facts import Facts
from cvdiag.diagnosis.timeline import Clock
from cvdiag.layers.align import shift_key
from cvdiag.layers.split import is_probe, layer_of
from cvdiag.logs.reading import Record

#: Boundaries that repeat without bound in a long request: folded in the table.
REPEATING: Final = ("backend.sse.event", "backend.llm.call.heartbeat")
HEAD: Final = 30
TAIL: Final = 10
#: Other envelopes kept for the table.
KEEP: Final = 300
#: Offsets kept per test id for the density strip and the heartbeat ticks.
MAX_MARKS: Final = 100_000
#: An envelope's JSON shown on demand is cut past this many bytes...
JSON_CAP: Final = 16_384
#: ...and a test id shows no more than this many bytes of JSON in all.
JSON_BUDGET: Final = 262_144


@dataclasses.dataclass(slots=True)
class Row:
    """A row of the envelope table: one envelope, or a folded run of a repeating boundary."""

    #: Where the row stands: the envelope's place in the test id's story (a folded run: the
    #: place of the last envelope before it; a probe's row: just after the row before it).
    order: float
    offset_ms: float
    record: Record | None = None
    #: A folded run: its boundary, how many, and until when.
    folded: str = ""
    count: int = 0
    until_ms: float = 0.0


class Story:
    """A drawn test id's envelopes, read in time order (``add``), then ``finish``ed."""

    def __init__(self, test_id: str) -> None:
        self.test_id = test_id
        self.facts = Facts(test_id)
        self.clock: Clock | None = None
        self._kept: list[Row] = []
        self._tails: dict[str, collections.deque[Row]] = {}
        self._seen: collections.Counter[str] = collections.Counter()
        self._others = 0
        #: Envelopes left out of the table (neither kept nor in a folded run).
        self.left_out = 0
        #: SSE event offsets by the span they hang under (the request's), and heartbeats by call.
        self.events: dict[str, array.array[float]] = {}
        self.beats: dict[str, array.array[float]] = {}
        self._marks = 0
        #: The probe's records, placed once the clocks are joined.
        self._probe: list[Record] = []
        #: The table's rows in time order, once finished.
        self.rows: list[Row] = []
        self.verdict: Verdict = Verdict(test_id, "unclassified", "", {})

    def add(self, record: Record) -> None:
        self.facts.add(record)
        if is_probe(record) or layer_of(record.envelope) == "aimock":
            # Read on the backend's clock once every pair is in (``finish``): held till then.
            if len(self._probe) < KEEP:
                self._probe.append(record)
            else:
                self.left_out += 1
            return
        if self.clock is None:
            self.clock = Clock(record.key)
        self._place(record, self.facts.count)

    def _place(self, record: Record, index: float) -> None:
        assert self.clock is not None
        offset = self.clock.offset_ms(record.key)
        env = record.envelope
        boundary = env["boundary"]
        if boundary in REPEATING:
            self._mark(self.events if boundary == REPEATING[0] else self.beats, env, offset)
            seen = self._seen[boundary]
            self._seen[boundary] = seen + 1
            if seen < HEAD:
                self._kept.append(Row(index, offset, record))
            else:
                tail = self._tails.setdefault(boundary, collections.deque(maxlen=TAIL))
                tail.append(Row(index, offset, record))
            return
        if self._others < KEEP:
            self._others += 1
            self._kept.append(Row(index, offset, record))
        else:
            self.left_out += 1

    def _mark(self, into: dict[str, array.array[float]], env: dict[str, object], at: float) -> None:
        if self._marks >= MAX_MARKS:
            return
        self._marks += 1
        parent = env.get("parent_span_id")
        into.setdefault(parent if isinstance(parent, str) else "", array.array("d")).append(at)

    def finish(self, drops: Iterable[Record], *, first_token_timeout: float) -> None:
        """Classify (with the log's drop reports, as ``cvdiag classify`` does) and lay out the
        table's rows: the kept envelopes in time order, each folded run where it was."""
        add_drops(self.facts, drops)
        self.verdict = classify(self.facts, first_token_timeout=first_token_timeout)
        self._place_probe()
        rows = self._kept
        for boundary, tail in self._tails.items():
            rows.extend(tail)
            folded = self._seen[boundary] - HEAD - len(tail)
            if folded > 0:  # the run between the head and the tail, after the head's last
                last = max(
                    row.order
                    for row in rows
                    if _boundary(row) == boundary and row.order < tail[0].order
                )
                before = next(row for row in rows if row.order == last)
                rows.append(
                    Row(
                        last,
                        before.offset_ms,
                        folded=boundary,
                        count=folded,
                        until_ms=tail[0].offset_ms,
                    )
                )
        rows.sort(key=lambda row: (row.order, row.record is None))
        self._one_clock(rows)
        self.rows = rows
        self._kept = []
        self._tails.clear()

    def _place_probe(self) -> None:
        """The probe's rows (and the mock provider's), on the backend's clock, each after the
        last row before it."""
        if not self._probe:
            return
        offsets = self.facts.join.offsets()
        mock = self.facts.join.mock.offset()  # the mock provider's lines, from its entries
        shifted = []
        for record in self._probe:
            offset = offsets.get(record.source) if is_probe(record) else mock
            theta = offset.theta_ms if offset is not None else 0.0
            key = shift_key(record.key, theta) if theta else record.key
            shifted.append(Record(record.source, record.lineno, record.text, record.envelope, key))
        shifted.sort(key=lambda r: r.key)
        if self.clock is None:
            self.clock = Clock(shifted[0].key)
        backend = sorted((row.offset_ms, row.order) for row in self._kept)
        for record in shifted:
            at = self.clock.offset_ms(record.key)
            before = [order for offset_ms, order in backend if offset_ms <= at]
            self._place(record, (before[-1] if before else 0) + 0.5)
        self._probe = []

    def _one_clock(self, rows: list[Row]) -> None:
        """Every offset on the page from the classifier's origin, the start of the test id's
        first request: its first envelope when that is its ingress; at the default tier (no
        ingress) the terminal's ``duration_ms`` back from it. The reason, the evidence, the table
        and the waterfall then read the same time for the same envelope."""
        lead = self.facts.lead_ms(self.clock) if self.clock is not None else 0.0
        if not lead:
            return
        for row in rows:
            row.offset_ms += lead
            row.until_ms += lead if row.folded else 0.0
        for marks in (*self.events.values(), *self.beats.values()):
            for i, at in enumerate(marks):
                marks[i] = at + lead


def _boundary(row: Row) -> str:
    return row.record.envelope["boundary"] if row.record is not None else ""
