"""What a queued sink could not write: counted by why, with the test ids that lost their terminal.

A reader of a log cannot tell "incomplete" from "never happened" unless the loss is said. Every
line a sink gives up on is counted here under its reason; the count reaches the log as a
``cvdiag.queue_dropped`` line once a line can be written again (cvdiag/sinks/queued.py), with
one more ``cvdiag.queue_dropped`` line under each test id whose terminal was lost (its
``dropped_count``: that story's envelopes not written), so the log itself says which stories the
writer cut; and at exit, on stderr, as one line saying how many, why, and which test ids' stories
lost their terminal (the envelope a reader needs to call a story whole).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import cast

import orjson

#: The queue was full: the oldest line made room for a new one.
QUEUE_FULL = "queue full"
#: The descriptor refused the write (a closed stdout, a broken pipe, a full disk).
WRITE_FAILED = "write failed"
#: The shutdown bound ran out with lines still waiting for a slow or wedged reader.
AT_SHUTDOWN = "reader too slow at shutdown"

#: Test ids named on the stderr line at most: it stays one bounded line.
NAMED_IDS = 8
#: Test ids given a ``cvdiag.queue_dropped`` line of their own at most (a few hundred bytes
#: each, written within what is left of the shutdown bound); more are in the count alone.
LOGGED_IDS = 64
#: Test ids whose lost lines are counted one by one at most.
_COUNTED_IDS = 4096
_TEST_ID = b'"test_id":"'
_TERMINALS = (b'"boundary":"backend.response.complete"', b'"boundary":"backend.sse.aborted"')


def report_lines(
    line_of: Callable[[int, str | None], bytes | None], count: int, cut: list[tuple[str, int]]
) -> list[bytes]:
    """A drop report's lines: the count's first (none when only cut test ids are owed), then one
    per cut test id in ``cut``'s order, as ``owed`` reads them. A line that cannot be made fails
    the report: it is owed whole."""
    lines = [line_of(count, None)] if count else []
    lines += [line_of(lost, test_id) for test_id, lost in cut]
    if None in lines:
        raise ValueError("a cvdiag.queue_dropped line could not be made")
    return cast("list[bytes]", lines)


def owed(
    report: bytes, rest: bytes, count: int, cut: list[tuple[str, int]]
) -> tuple[int, list[tuple[str, int]]]:
    """What a drop report that went out in part (its end ``rest``, whole lines, was not
    written) still owes the log: the count unless its line went, and the cut test ids whose
    lines did not. Owing the whole report again wrote a count the log already held twice."""
    written = report.count(b"\n") - rest.count(b"\n")
    if count:
        return (count, cut) if written <= 0 else (0, cut[written - 1 :])
    return 0, cut[written:]


class Abandoned(Exception):
    """The shutdown bound ran out while a batch waited for room: ``rest`` was not written."""

    def __init__(self, rest: bytes) -> None:
        super().__init__("stdout did not drain before the shutdown bound")
        self.rest = rest


class Losses:
    """The lines a sink did not write, by reason, and the first test ids whose terminal was among
    them. Thread-safe: the loop, the writer thread and the exit flush all count here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_reason: Counter[str] = Counter()
        self.cut_short: list[str] = []
        self.more_cut_short = 0
        #: How many of the losses stderr has been told of already.
        self.said = 0
        #: Losses the log has not been told of yet (a ``cvdiag.queue_dropped`` line is owed).
        self.unreported = 0
        #: Lines lost, by test id; and the test ids whose terminal was lost that the log has
        #: not been told of yet (a line of their own is owed to each).
        self.by_test_id: Counter[str] = Counter()
        self.cut_unreported: list[str] = []
        self.cut_logged = 0

    @property
    def owing(self) -> bool:
        """Whether the log is owed a report: a count, or lines for cut test ids."""
        return bool(self.unreported or self.cut_unreported)

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def count(self, reason: str, lines: Iterable[bytes] = (), *, number: int = 0) -> int:
        """Count ``lines`` (or ``number`` lines not at hand) lost for ``reason``; the count."""
        ids: list[str] = []
        owners: list[str] = []
        counted = number
        for line in lines:
            counted += 1
            if line.find(_TERMINALS[0]) >= 0 or line.find(_TERMINALS[1]) >= 0:
                ids.append(_test_id(line))
            owners.append(_owner(line))
        with self._lock:
            self.by_reason[reason] += counted
            self.unreported += counted
            for owner in owners:
                if owner in self.by_test_id or len(self.by_test_id) < _COUNTED_IDS:
                    self.by_test_id[owner] += 1
            for test_id in ids:
                if len(self.cut_short) < NAMED_IDS:
                    self.cut_short.append(test_id)
                else:
                    self.more_cut_short += 1
                if test_id != "?" and self.cut_logged < LOGGED_IDS:
                    self.cut_logged += 1
                    self.cut_unreported.append(test_id)
        return counted

    def take_cut(self) -> list[tuple[str, int]]:
        """The test ids whose terminal was lost and the log has not been told of, each with how
        many of its lines were lost: now owed no more."""
        with self._lock:
            ids, self.cut_unreported = self.cut_unreported, []
            return [(test_id, max(1, self.by_test_id[test_id])) for test_id in ids]

    def owe_cut(self, ids: list[tuple[str, int]]) -> None:
        """Lines for cut test ids that could not be written: owed to the next report."""
        with self._lock:
            self.cut_unreported[:0] = [test_id for test_id, _ in ids]

    def take_unreported(self) -> int:
        """The count a ``cvdiag.queue_dropped`` line is about to report, now owed no more."""
        with self._lock:
            count, self.unreported = self.unreported, 0
        return count

    def owe(self, count: int) -> None:
        """A report that could not be written: its count waits for the next one."""
        with self._lock:
            self.unreported += count

    def stderr_line(self) -> str | None:
        """The one line for stderr about losses not yet said, or None; marks them said."""
        with self._lock:
            total = sum(self.by_reason.values())
            if total <= self.said:
                return None
            self.said = total
            reasons = [reason for reason, n in self.by_reason.most_common() if n]
            why = (
                reasons[0]
                if len(reasons) == 1
                else ", ".join(f"{reason}: {self.by_reason[reason]}" for reason in reasons)
            )
            line = f"{total} envelopes not written ({why})"
            if self.cut_short:
                more = f" (+{self.more_cut_short} more)" if self.more_cut_short else ""
                line += f"; test ids without their terminal: {', '.join(self.cut_short)}{more}"
            return line


def _test_id(line: bytes) -> str:
    """The test id of a terminal's line (rare: only lines that are lost are read)."""
    start = line.find(b"{")
    try:
        value = orjson.loads(line[start:] if start > 0 else line).get("test_id")
    except (orjson.JSONDecodeError, AttributeError):
        return "?"
    return value[:128] if isinstance(value, str) else "?"


def _owner(line: bytes) -> str:
    """The test id a line's envelope names (first in the envelope: found without parsing)."""
    start = line.find(_TEST_ID)
    if start < 0:
        return "?"
    start += len(_TEST_ID)
    end = line.find(b'"', start, start + 129)
    return line[start:end].decode("ascii", "replace") if end > start else "?"


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a batch's bytes not yet written (the first may be a line's tail)."""
    return [line for line in data.split(b"\n") if line]
