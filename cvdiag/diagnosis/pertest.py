"""The facts of every test id of a large log, in memory that does not grow with the log.

``stats --by-class`` and ``ls`` classify every test id, and a test id's class can depend on any
of its envelopes, so its ``Facts`` must stay open while more may come. In a real log a test id's
envelopes come close together: so only the test ids seen most recently keep their ``Facts``
(``ACTIVE`` of them, lean: no text), and one that falls out is *folded* into the small value the
command shows (its class, or its ``ls`` row). Should an envelope of a folded test id come later,
the fold is wrong: that test id is set aside, and read again on its own once the first pass is
over (``again``), so the figures are exactly those of keeping everything. An input that cannot
be read twice (stdin, a pipe) keeps every test id open instead.

What stays per test id is the folded value, a few hundred bytes at most, and past
``folded.SPILL_AT`` of them not even that: they go to a temporary file (``folded``). Test ids set
aside are read again ``AGAIN_AT_ONCE`` at a time, so their open facts stay bounded too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Generic

from cvdiag.diagnosis.facts import Facts
from cvdiag.logs.folded import Folded, T
from cvdiag.logs.inputs import Inputs
from cvdiag.logs.reading import Malformed, Record, records

#: Test ids whose facts are kept open; a log's concurrent requests are far fewer.
ACTIVE: Final = 2048
#: Set-aside test ids read again in one pass: about 1.5 KB of lean facts each while it lasts.
AGAIN_AT_ONCE: Final = 8192

#: Folds one test id: ``(first-seen order, slug, facts) -> value``.
Fold = Callable[[int, str, Facts], T]
#: Reads the inputs again, only the envelopes of the given test ids, in the same order.
Again = Callable[[frozenset[str]], Iterable[Record]]


def reread(files: Sequence[str]) -> Again:
    """The ``Again`` of ``files`` (each one that can be read twice): only envelopes of a test's
    story (no accounting), in the first read's order, nothing reported twice (the first read
    reported every malformed line)."""

    def read(ids: frozenset[str]) -> Iterator[Record]:
        with Inputs(files) as sources:
            for source in sources:
                source.numbered = False
                for record in records(source, _reported_already, test_id=ids):
                    if not record.envelope["boundary"].startswith("cvdiag."):
                        yield record

    return read


def _reported_already(problem: Malformed) -> None:
    pass


class PerTestId(Generic[T]):
    """Facts per test id, folded with ``fold`` when they fall out of the active set."""

    def __init__(
        self,
        fold: Fold[T],
        restore: Callable[[T], tuple[int, str]],
        *,
        again: Again | None = None,
        active: int | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        """``warn`` hears, once, that no temporary file could be made (see ``folded``)."""
        self._fold: Fold[T] = fold
        self._restore: Callable[[T], tuple[int, str]] = restore
        self._again = again
        limit = ACTIVE if active is None else active  # read at call time: the tests shrink it
        self._limit = limit if again is not None else None
        self._open: OrderedDict[str, tuple[int, str, Facts]] = OrderedDict()
        #: The folded test ids, and those set aside (folded too early).
        self._folded: Folded[T] = Folded(warn=warn)
        self._seen = 0

    def add(self, record: Record, slug: str | None = None) -> None:
        """One envelope, in input order; ``slug`` overrides the envelope's (a capped slug)."""
        env = record.envelope
        test_id = env["test_id"]
        entry = self._open.get(test_id)
        if entry is not None:
            self._open.move_to_end(test_id)
            if entry[2].backend_first is None and not env["boundary"].startswith("probe."):
                # The backend's first line names the slug: a probe's file read first does not.
                entry = self._open[test_id] = (
                    entry[0],
                    env["slug"] if slug is None else slug,
                    entry[2],
                )
        else:
            # Only when a test id (re)enters the open set: at most once per fold, not per line.
            if self._limit is not None and self._folded.reopen(test_id):
                return
            entry = (self._seen, env["slug"] if slug is None else slug, Facts(test_id, lean=True))
            self._seen += 1
            self._open[test_id] = entry
            if self._limit is not None and len(self._open) > self._limit:
                old, (order, old_slug, facts) = self._open.popitem(last=False)
                self._folded.put(old, self._fold(order, old_slug, facts))
        entry[2].add(record)

    def finish(self) -> Folded[T]:
        """Every test id folded, those set aside read again first."""
        while self._open:
            test_id, (order, slug, facts) = self._open.popitem(last=False)
            self._folded.put(test_id, self._fold(order, slug, facts))
        if self._again is not None:
            self._folded.refold(self._refold, AGAIN_AT_ONCE)
        return self._folded

    def _refold(self, items: list[tuple[str, T]]) -> list[T]:
        """Set-aside test ids, read again: folded with the order and slug first seen."""
        assert self._again is not None
        facts_of = {test_id: Facts(test_id, lean=True) for test_id, _ in items}
        for record in self._again(frozenset(facts_of)):
            facts_of[record.envelope["test_id"]].add(record)
        values = []
        for test_id, folded in items:
            order, slug = self._restore(folded)
            values.append(self._fold(order, slug, facts_of[test_id]))
        return values
