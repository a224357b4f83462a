"""Folded test ids spilled to a temporary file must not change what ``ls`` and ``stats
--by-class`` say, must keep memory flat, and must leave nothing behind.

Every comparison is against the same command with nothing folded early and nothing spilled
(the defaults, on logs far smaller than ``SPILL_AT``); the spilling runs shrink ``ACTIVE``,
``SPILL_AT`` and ``AGAIN_AT_ONCE`` so a few hundred test ids go through every path: folded,
spilled, seen again while folded in memory, seen again once in the file, set aside in memory and
in the file, read again in several chunks.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag import cli
from cvdiag.diagnosis import pertest
from cvdiag.diagnosis.facts import Facts
from cvdiag.diagnosis.pertest import PerTestId
from cvdiag.logs import folded
from cvdiag.logs.folded import Folded
from cvdiag.logs.reading import Input, Record, records
from tests.support.stories import STORIES, Story, write_log


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return code, out.getvalue(), err.getvalue()


def _shift(story: Story, ms: int) -> Story:
    for env in story.envelopes:
        moment = datetime.datetime.fromisoformat(env["ts"][:-1]) + datetime.timedelta(
            milliseconds=ms
        )
        env["ts"] = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        env["mono_ns"] += ms * 1_000_000
    return story


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """240 test ids of every class over three slugs, in two files; one in eight comes back an
    hour later (long after it was folded and spilled), one in eight after a few other test ids
    (folded, perhaps still in memory)."""
    root = tmp_path_factory.mktemp("spill")
    names = sorted(STORIES)
    stories = []
    for i in range(240):
        story = STORIES[names[i % len(names)]](f"s-{i:03d}")
        if i % 8 == 0:
            story.emit("backend.sse.event", 3_600_000.0, metadata={"sequence_num": 99})
        elif i % 8 == 4:
            story.emit("backend.sse.aborted", 200.0, metadata={"termination_kind": "rst"})
        for env in story.envelopes:
            env["slug"] = ["chat", "agui", "ws"][i % 3]
        stories.append(_shift(story, i * 40))
    write_log(root / "a.log", stories[::2])
    write_log(root / "b.log", stories[1::2])
    return [str(root / "a.log"), str(root / "b.log")]


COMMANDS = [
    ("ls",),
    ("ls", "--json"),
    ("ls", "--failed", "--since", "2026-11-22T03:00:03Z", "--until", "2026-11-22T03:00:08Z"),
    ("ls", "--json", "--class", "healthy", "--class", "client-abort"),
    ("stats", "--by-class", "--json"),
    ("stats", "--by-class"),
]


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Folded[Any]]:
    """Every ``Folded`` that made its file, and the temporary folder (``tmp_path/tmp``), which
    must be empty as soon as the file is open: it is unlinked at once."""
    made: list[Folded[Any]] = []
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    open_file = Folded._open_file

    def recording(self: Folded[Any]) -> bool:
        done = open_file(self)
        if done:
            made.append(self)
            assert list(scratch.iterdir()) == []
        return done

    monkeypatch.setattr(Folded, "_open_file", recording)
    return made


def _shrink(monkeypatch: pytest.MonkeyPatch, active: int, spill_at: int, at_once: int) -> None:
    monkeypatch.setattr(pertest, "ACTIVE", active)
    monkeypatch.setattr(folded, "SPILL_AT", spill_at)
    monkeypatch.setattr(pertest, "AGAIN_AT_ONCE", at_once)


@pytest.mark.parametrize("args", COMMANDS)
def test_spilling_changes_nothing(
    many: list[str],
    args: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    opened: list[Folded[Any]],
) -> None:
    whole = _run(*args, *many)
    assert whole[0] == 0, whole[2]
    assert whole[1]
    assert opened == []  # 240 test ids: nothing spilled by default
    for active, spill_at, at_once in [(1, 3, 2), (2, 8, 5), (7, 16, 1000), (40, 5, 3)]:
        _shrink(monkeypatch, active, spill_at, at_once)
        assert _run(*args, *many) == whole
        assert opened, "the run never spilled"
        opened.clear()


def test_the_paths_are_taken(
    many: list[str], monkeypatch: pytest.MonkeyPatch, opened: list[Folded[Any]]
) -> None:
    """The log above does go through the file: test ids set aside in memory and in the file,
    read again in chunks no larger than ``AGAIN_AT_ONCE``."""
    _shrink(monkeypatch, 2, 8, 2)
    chunks: list[int] = []
    refold = PerTestId._refold

    def counting(self: PerTestId[Any], items: list[tuple[str, Any]]) -> list[Any]:
        chunks.append(len(items))
        return refold(self, items)

    monkeypatch.setattr(PerTestId, "_refold", counting)
    spills: list[bool] = []
    spill = Folded._spill

    def spilling(self: Folded[Any], entries: dict[str, Any], *, aside: bool) -> None:
        spills.append(aside)
        spill(self, entries, aside=aside)

    monkeypatch.setattr(Folded, "_spill", spilling)
    assert _run("ls", "--json", *many)[0] == 0
    assert True in spills
    assert False in spills
    assert max(chunks) == 2
    assert sum(chunks) >= 60  # one test id in four comes back, and ACTIVE=1 folds overlaps


def test_no_temporary_file_falls_back_to_memory(
    many: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    whole = {args: _run(*args, *many) for args in COMMANDS}
    _shrink(monkeypatch, 2, 5, 4)
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setattr("tempfile.tempdir", str(not_a_folder))  # TMPDIR unusable
    for args in COMMANDS:
        code, out, err = _run(*args, *many)
        assert (code, out) == whole[args][:2]
        (line,) = err.splitlines()
        assert line.startswith(f"cvdiag: warning: {args[0]}: cannot make a temporary file (")
        assert line.endswith("): every test id is kept in memory")


def test_a_python_without_sqlite3_falls_back_to_memory(
    many: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _run("ls", "--json", *many)
    _shrink(monkeypatch, 2, 5, 4)
    monkeypatch.setattr(folded, "sqlite3", None)
    code, out, err = _run("ls", "--json", *many)
    assert (code, out) == whole[:2]
    assert (
        err == "cvdiag: warning: ls: this Python has no sqlite3: every test id is kept in memory\n"
    )


@pytest.mark.parametrize("command", [("ls",), ("stats", "--by-class")])
def test_a_file_that_fills_up_is_one_error_line(
    many: list[str],
    command: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    opened: list[Folded[Any]],
    tmp_path: Path,
) -> None:
    _shrink(monkeypatch, 1, 3, 2)
    open_file = Folded._open_file

    def small(self: Folded[Any]) -> bool:
        done = open_file(self)
        assert self._db is not None
        # A disk that is full: small pages, and not one more than the empty tables use.
        self._db.execute("PRAGMA page_size = 512")
        self._db.execute("VACUUM")
        (pages,) = self._db.execute("PRAGMA page_count").fetchone()
        self._db.execute(f"PRAGMA max_page_count = {pages}")
        return done

    monkeypatch.setattr(Folded, "_open_file", small)
    code, out, err = _run(*command, *many)
    assert code == 2
    assert out == ""
    assert err == (
        f"cvdiag: error: {command[0]}: the temporary file of test ids failed:"
        " database or disk is full\n"
    )
    assert list((tmp_path / "tmp").iterdir()) == []


# --- the store on its own -------------------------------------------------------------------


def _lines(ids: list[int]) -> list[Record]:
    """One envelope per entry of ``ids`` (a test id number), in that order, times increasing."""
    text = []
    for n, test_id in enumerate(ids):
        story = Story(f"id-{test_id}", slug=f"slug-{test_id % 3}", start_ms=n * 10.0)
        story.emit("backend.sse.event", 0.0, metadata={"sequence_num": n})
        text.extend(story.lines())
    return list(records(Input("log", io.BytesIO("\n".join(text).encode())), print))


def _fold(order: int, slug: str, facts: Facts) -> bytes:
    """What a test id was folded with, sortable: order, slug, envelopes, first and last."""
    first, last = facts.first, facts.last
    assert first is not None
    assert last is not None
    return f"{order:05d}|{slug}|{facts.count}|{first[1]}|{last[1]}".encode()


def _restore(value: bytes) -> tuple[int, str]:
    order, slug, *_ = value.decode().split("|")
    return int(order), slug


def _seen(
    envelopes: list[Record], *, active: int | None, again: bool
) -> tuple[list[tuple[str, bytes]], dict[bytes, int], int, int]:
    """Rows by value, counts by value, how many test ids, and the most values held in memory."""

    def read(ids: frozenset[str]) -> Iterator[Record]:
        assert len(ids) <= pertest.AGAIN_AT_ONCE
        return (r for r in envelopes if r.envelope["test_id"] in ids)

    seen = PerTestId(_fold, _restore, again=read if again else None, active=active)
    most = 0
    for record in envelopes:
        seen.add(record)
        most = max(most, len(seen._folded._memory), len(seen._folded._aside))
    done = seen.finish()
    try:
        return list(done.sorted_items()), dict(done.counts()), len(done), most
    finally:
        done.close()


@settings(max_examples=150, deadline=None)
@given(
    ids=st.lists(st.integers(0, 40), min_size=1, max_size=150),
    active=st.integers(1, 6),
    spill_at=st.integers(1, 8),
    at_once=st.integers(1, 5),
    filter_bits=st.sampled_from([8, 64, folded.FILTER_BITS]),
)
def test_any_interleaving_spilled_or_not_gives_the_same(
    ids: list[int], active: int, spill_at: int, at_once: int, filter_bits: int
) -> None:
    """8 filter bits: nearly every new test id is looked up in the file (false positives)."""
    envelopes = _lines(ids)
    want_items, want_counts, count, _ = _seen(envelopes, active=None, again=False)
    assert count == len(set(ids))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(folded, "SPILL_AT", spill_at)
        patch.setattr(pertest, "AGAIN_AT_ONCE", at_once)
        patch.setattr(folded, "FILTER_BITS", filter_bits)
        items, counts, count, most = _seen(envelopes, active=active, again=True)
    assert items == want_items
    assert counts == want_counts
    assert count == len(set(ids))
    assert most < spill_at  # memory holds fewer than SPILL_AT values, whatever the log


def test_values_sort_in_the_file_as_in_python() -> None:
    """``ls`` merges rows from memory and from the file by value: SQLite must order BLOBs as
    Python orders bytes (a prefix first, then byte by byte, unsigned)."""
    values = [b"", b"\x00", b"\x00\x00", b"\x7f", b"\x80", b"\xff", b"a", b"ab", b"b"]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (v)")
    db.executemany("INSERT INTO t VALUES (?)", [(v,) for v in reversed(values)])
    assert [v for (v,) in db.execute("SELECT v FROM t ORDER BY v")] == sorted(values)
