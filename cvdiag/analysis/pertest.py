"""The facts of every test id of a large log, in memory that does not grow with the log.

``stats --by-class`` and ``ls`` classify every test id, and a test id's class can depend on any
of its envelopes, so its ``Facts`` must stay open while more may come. In a real log a test id's
envelopes come close together: so only the test ids seen most recently keep their ``Facts``
(``ACTIVE`` of them, lean: no text), and one that falls out is *folded* into the small value the
command shows (its class, or its ``ls`` row). Should an envelope of a folded test id come later,
the fold is wrong: that test id is set aside, and read again on its own once the first pass is
over (``again``), so the figures are exactly those of keeping everything. An input that cannot
be read twice (stdin, a pipe) keeps every test id open instead.

What stays per test id is the folded value, a few hundred bytes at most.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final, Generic, TypeVar

from cvdiag.analysis.facts import Facts
from cvdiag.analysis.reading import Record

#: Test ids whose facts are kept open; a log's concurrent requests are far fewer.
ACTIVE: Final = 2048

T = TypeVar("T")
#: Folds one test id: ``(first-seen order, slug, facts) -> value``.
Fold = Callable[[int, str, Facts], T]
#: Reads the inputs again, only the envelopes of the given test ids, in the same order.
Again = Callable[[frozenset[str]], Iterable[Record]]


class PerTestId(Generic[T]):
    """Facts per test id, folded with ``fold`` when they fall out of the active set."""

    def __init__(
        self,
        fold: Fold[T],
        restore: Callable[[T], tuple[int, str]],
        *,
        again: Again | None = None,
        active: int | None = None,
    ) -> None:
        self._fold = fold
        self._restore = restore
        self._again = again
        limit = ACTIVE if active is None else active  # read at call time: the tests shrink it
        self._limit = limit if again is not None else None
        self._open: OrderedDict[str, tuple[int, str, Facts]] = OrderedDict()
        #: The folded test ids, by test id.
        self.folded: dict[str, T] = {}
        #: Test ids folded too early, with their order and slug: read again at the end.
        self._reopened: dict[str, tuple[int, str]] = {}
        self._seen = 0

    def add(self, record: Record, slug: str | None = None) -> None:
        """One envelope, in input order; ``slug`` overrides the envelope's (a capped slug)."""
        env = record.envelope
        test_id = env["test_id"]
        entry = self._open.get(test_id)
        if entry is not None:
            self._open.move_to_end(test_id)
        else:
            if test_id in self._reopened:
                return
            folded = self.folded.pop(test_id, None)
            if folded is not None:
                self._reopened[test_id] = self._restore(folded)
                return
            entry = (self._seen, env["slug"] if slug is None else slug, Facts(test_id, lean=True))
            self._seen += 1
            self._open[test_id] = entry
            if self._limit is not None and len(self._open) > self._limit:
                old, (order, old_slug, facts) = self._open.popitem(last=False)
                self.folded[old] = self._fold(order, old_slug, facts)
        entry[2].add(record)

    def finish(self) -> dict[str, T]:
        """Every test id folded, those set aside read again first."""
        while self._open:
            test_id, (order, slug, facts) = self._open.popitem(last=False)
            self.folded[test_id] = self._fold(order, slug, facts)
        if self._reopened and self._again is not None:
            reopened, self._reopened = self._reopened, {}
            facts_of = {test_id: Facts(test_id, lean=True) for test_id in reopened}
            for record in self._again(frozenset(reopened)):
                facts_of[record.envelope["test_id"]].add(record)
            for test_id, (order, slug) in reopened.items():
                self.folded[test_id] = self._fold(order, slug, facts_of[test_id])
        return self.folded
