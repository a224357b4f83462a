"""The folded value of every test id (``pertest``), in memory that stays flat.

A folded value is small (an ``ls`` row, a class index), but with its test id and a dict entry
it still costs 120–220 bytes, so a log of a million test ids would hold 200 MB. Past
``SPILL_AT`` values in memory they go, in one sorted batch, to a temporary SQLite file; memory
holds at most ``SPILL_AT`` of them again, and what is read back is streamed: rows in their sort
order (``sorted_items``), counts aggregated by SQLite (``counts``). Whether a test id entering
the open set was folded before is asked of the file only when a fixed bit filter says it may be.

A test id folded and then seen again is *set aside* (``reopen``): ``pertest`` reads it again at
the end. Set-aside test ids are bounded the same way: past ``SPILL_AT`` they go to the file,
flagged, and ``refold`` hands them back in chunks.

The file is unlinked as soon as it is open (POSIX), so nothing is left behind, even on an
interrupt or a kill; where that is refused (Windows) it is removed at exit. No file can be made
(TMPDIR unwritable, a Python without ``sqlite3``): everything stays in memory, as before, with
one warning. A file that fails later (disk full) is an error (``SpillError``).
"""

from __future__ import annotations

import atexit
import contextlib
import heapq
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Final, Generic, TypeVar

from cvdiag.logs.inputs import InputError

try:
    import sqlite3
except ImportError:  # some Python builds have no sqlite3: memory only
    sqlite3 = None  # type: ignore[assignment]

#: Folded values (and set-aside ones) held in memory before they go to the file.
SPILL_AT: Final = 50_000
#: Bits of the filter that spares most new test ids a lookup in the file (2 MiB, made with the
#: file): two bits per test id in the file; a test id with either bit clear is not in it.
#: About 1% of new test ids are looked up for nothing at a million test ids in the file.
FILTER_BITS: Final = 1 << 24

#: ``bytes`` sort in SQLite as in Python (``memcmp``, then the shorter first); ``int`` alike.
T = TypeVar("T", bytes, int)

_SCHEMA = (
    # No type for ``value``: a BLOB stays bytes, an integer an int. WITHOUT ROWID: the rows live
    # in the test id's own B-tree, one lookup per test id. The partial index finds set-aside rows.
    "CREATE TABLE folded (test_id TEXT PRIMARY KEY, value, aside INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE INDEX set_aside ON folded (test_id) WHERE aside",
)


class SpillError(InputError):
    """The temporary file failed after it was made (disk full): one line, exit 2."""


class Folded(Generic[T]):
    """Folded values by test id: a dict, then a temporary SQLite file."""

    def __init__(self, *, warn: Callable[[str], None] | None = None) -> None:
        self._spill_at = SPILL_AT  # read at call time: the tests shrink it
        self._memory: dict[str, T] = {}
        #: Set-aside test ids still in memory, with the value they had been folded into.
        self._aside: dict[str, T] = {}
        self._warn = warn
        self._db: sqlite3.Connection | None = None
        self._stored = 0  # rows in the file
        self._filter = bytearray()
        self._mask = 0

    def __len__(self) -> int:
        return len(self._memory) + len(self._aside) + self._stored

    def put(self, test_id: str, value: T) -> None:
        """The folded value of a test id not folded before (nor set aside)."""
        self._memory[test_id] = value
        if len(self._memory) >= self._spill_at:
            self._spill(self._memory, aside=False)

    def reopen(self, test_id: str) -> bool:
        """Whether ``test_id`` was folded; if so it is set aside (if not already)."""
        if test_id in self._aside:
            return True
        value = self._memory.pop(test_id, None)
        if value is not None:
            self._aside[test_id] = value
            if len(self._aside) >= self._spill_at:
                self._spill(self._aside, aside=True)
            return True
        if self._db is None or not self._maybe_stored(test_id):
            return False
        row = self._one("SELECT aside FROM folded WHERE test_id = ?", test_id)
        if row is None:
            return False
        if not row[0]:
            self._write("UPDATE folded SET aside = 1 WHERE test_id = ?", [(test_id,)])
        return True

    def refold(self, again: Callable[[list[tuple[str, T]]], list[T]], chunk: int) -> None:
        """Every set-aside test id, ``chunk`` at a time: ``again(items)`` gives new values."""
        while self._aside:
            items = [self._aside.popitem() for _ in range(min(chunk, len(self._aside)))]
            for (test_id, _), value in zip(items, again(items), strict=True):
                self.put(test_id, value)
        # Each chunk is fetched whole before it is updated, then the next is asked for.
        query = "SELECT test_id, value FROM folded WHERE aside LIMIT ?"
        while self._db is not None and (items := list(self._rows(query, chunk))):
            values = again(items)
            self._write(
                "UPDATE folded SET value = ?, aside = 0 WHERE test_id = ?",
                [(value, test_id) for (test_id, _), value in zip(items, values, strict=True)],
            )

    def items(self) -> Iterator[tuple[str, T]]:
        """Every test id and its value, in no particular order (after ``refold``)."""
        yield from self._memory.items()
        yield from self._rows("SELECT test_id, value FROM folded")

    def sorted_items(self) -> Iterator[tuple[str, T]]:
        """Every test id and its value, by value (after ``refold``); streamed from the file."""
        memory = sorted(self._memory.items(), key=_value)
        stored = self._rows("SELECT test_id, value FROM folded ORDER BY value")
        yield from heapq.merge(memory, stored, key=_value)

    def counts(self) -> Counter[T]:
        """How many test ids have each value (after ``refold``), counted by SQLite."""
        counts = Counter(self._memory.values())
        for value, count in self._rows("SELECT value, COUNT(*) FROM folded GROUP BY value"):
            counts[value] += count
        return counts

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- the file -------------------------------------------------------------------------

    def _spill(self, entries: dict[str, T], *, aside: bool) -> None:
        """Move ``entries`` to the file, sorted (B-tree inserts in key order are the cheapest)."""
        if self._db is None and not self._open_file():
            self._spill_at = 2**62  # no file: memory only, and no more attempts
            return
        flag = int(aside)
        self._write(
            "INSERT INTO folded VALUES (?, ?, ?)",
            [(test_id, value, flag) for test_id, value in sorted(entries.items())],
        )
        bits, mask = self._filter, self._mask
        for test_id in entries:
            h = hash(test_id)  # one 64-bit hash, two probes
            bits[(h & mask) >> 3] |= 1 << (h & 7)
            bits[((h >> 32) & mask) >> 3] |= 1 << ((h >> 32) & 7)
        self._stored += len(entries)
        entries.clear()

    def _open_file(self) -> bool:
        if sqlite3 is None:
            self._say("this Python has no sqlite3")
            return False
        try:
            fd, path = tempfile.mkstemp(prefix="cvdiag-", suffix=".sqlite3")
            os.close(fd)
        except OSError as exc:
            self._say(f"cannot make a temporary file ({exc})")
            return False
        try:
            db = sqlite3.connect(path)
            # A scratch file: no journal, no fsync. No mmap: mapped pages would count as the
            # process's own memory.
            db.execute("PRAGMA journal_mode = OFF")
            db.execute("PRAGMA synchronous = OFF")
            db.execute("PRAGMA cache_size = -8192")  # KiB
            for statement in _SCHEMA:
                db.execute(statement)
        except sqlite3.Error as exc:
            with contextlib.suppress(OSError):
                os.unlink(path)
            self._say(f"cannot use a temporary file ({exc})")
            return False
        try:
            os.unlink(path)  # open, it lives until closed: gone even if the process is killed
        except OSError:
            atexit.register(_remove, db, path)
        self._db = db
        self._filter = bytearray(FILTER_BITS // 8)
        self._mask = FILTER_BITS - 1
        return True

    def _maybe_stored(self, test_id: str) -> bool:
        h = hash(test_id)
        bits, mask = self._filter, self._mask
        return bool(
            bits[(h & mask) >> 3] & (1 << (h & 7))
            and bits[((h >> 32) & mask) >> 3] & (1 << ((h >> 32) & 7))
        )

    def _say(self, reason: str) -> None:
        if self._warn is not None:
            self._warn(f"{reason}: every test id is kept in memory")

    def _one(self, query: str, *parameters: object) -> Any:
        assert self._db is not None
        try:
            return self._db.execute(query, parameters).fetchone()
        except sqlite3.Error as exc:
            raise _failed(exc) from None

    def _rows(self, query: str, *parameters: object) -> Iterator[Any]:
        if self._db is None:
            return
        try:
            yield from self._db.execute(query, parameters)
        except sqlite3.Error as exc:
            raise _failed(exc) from None

    def _write(self, query: str, rows: list[tuple[object, ...]]) -> None:
        assert self._db is not None
        try:
            with self._db:
                self._db.executemany(query, rows)
        except sqlite3.Error as exc:
            raise _failed(exc) from None


def _failed(exc: Exception) -> SpillError:
    return SpillError(f"the temporary file of test ids failed: {exc}")


def _value(item: tuple[str, T]) -> T:
    return item[1]


def _remove(db: sqlite3.Connection, path: str) -> None:
    db.close()
    with contextlib.suppress(OSError):
        os.unlink(path)
