"""The fixed-string search over plain files (``cvdiag.logs.search``) against a plain line
split: random contents, needles, chunk sizes and line limits, with and without ``memmem``, in
one thread or several; and ``cvdiag grep`` over a file of many chunks against the block path."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.logs import reading, search
from cvdiag.logs.inputs import InputError, Inputs
from cvdiag.pipeline.envelope import NULL_EDGE_HEADERS
from tests.support.cli import cvdiag

MARKER = reading.MARKER


def _reference(
    data: bytes, needle: bytes, max_line: int, marker: bytes = MARKER
) -> list[tuple[int, bytes | None]]:
    """What the search promises, spelled the slow way."""
    found: list[tuple[int, bytes | None]] = []
    at = 0
    for line in data.split(b"\n"):
        if needle in line:
            if len(line) <= max_line:
                found.append((at, line))
            elif marker in line:
                found.append((at, None))
        at += len(line) + 1
    return found


def _search(path: Path, needle: bytes, max_line: int) -> list[tuple[int, bytes | None]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return list(search.lines_with(fd, needle, max_line=max_line, marker=MARKER))
    finally:
        os.close(fd)


_pieces = st.sampled_from(
    [b"CVDIAG {", b"x", b"ab", b"\n", b"\n\n", b"id-1", b"id-", b"-1", b"i", b"\xff", b"xxxxxxxx"]
)
_needles = st.sampled_from([b"id-1", b"CVDIAG {", b"x", b"ab", b"d-1i", b"\xffx"])


@settings(max_examples=500, deadline=None)
@given(
    chunks=st.lists(_pieces, max_size=80),
    needle=_needles,
    chunk=st.integers(1, 40),
    max_line=st.integers(1, 48),
    threads=st.integers(1, 3),
    memmem=st.booleans(),
)
def test_the_search_finds_what_a_line_split_finds(
    chunks: list[bytes], needle: bytes, chunk: int, max_line: int, threads: int, memmem: bool
) -> None:
    data = b"".join(chunks)
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        path = Path(folder, "log")
        path.write_bytes(data)
        patch.setattr(search, "CHUNK", chunk)
        patch.setattr(search, "THREADS", threads)
        patch.setattr(search, "MEMMEM", memmem)
        assert _search(path, needle, max_line) == _reference(data, needle, max_line)


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    needle=st.binary(min_size=1, max_size=5).filter(lambda b: b"\n" not in b),
    chunk=st.integers(1, 64),
    memmem=st.booleans(),
    end=st.booleans(),
)
def test_arbitrary_bytes_and_needles(
    lines: list[bytes], needle: bytes, chunk: int, memmem: bool, end: bool
) -> None:
    data = b"\n".join(lines) + (b"\n" if end else b"")
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        path = Path(folder, "log")
        path.write_bytes(data)
        patch.setattr(search, "CHUNK", chunk)
        patch.setattr(search, "THREADS", 2)
        patch.setattr(search, "MEMMEM", memmem)
        assert _search(path, needle, 1 << 20) == _reference(data, needle, 1 << 20)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(_pieces, max_size=60), chunk=st.integers(1, 32), block=st.integers(1, 16))
def test_candidate_lines_take_the_same_lines_by_either_road(
    chunks: list[bytes], chunk: int, block: int
) -> None:
    """A plain file read with byte offsets goes through the search; the same bytes read as a
    stream (stdin, gzip) go through the block path: the lines are the same."""
    data = b"".join(chunks)
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        path = Path(folder, "log")
        path.write_bytes(data)
        patch.setattr(search, "CHUNK", chunk)
        patch.setattr(search, "THREADS", 2)
        patch.setattr(reading, "BLOCK", block)
        for needle in (b"id-1", b"x"):
            with Inputs([str(path)]) as (plain,):
                plain.numbered = False
                assert plain.descriptor() is not None
                fast = list(reading.candidate_lines(plain, needle))
            with Inputs([str(path)]) as (stream,):
                stream.numbered = False
                patch.setattr(stream, "descriptor", lambda: None)
                slow = list(reading.candidate_lines(stream, needle))
            assert fast == slow


def test_the_bytes_find_road_when_there_is_no_memmem(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a platform whose C library has no ``memmem`` (or no ``ctypes``)."""
    monkeypatch.setattr(search, "_memmem", False)
    monkeypatch.setattr(search, "CHUNK", 7)
    data = b"a id-1\nid-1 b id-1\n" + b"x" * 30 + b"id-1\nlast id-1"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "log")
        path.write_bytes(data)
        assert _search(path, b"id-1", 100) == _reference(data, b"id-1", 100)


def test_memmem_is_found_here() -> None:
    """The platforms the suite runs on (Linux, macOS) have it: the fast road is the one tested."""
    assert search._load_memmem()


def test_a_line_over_the_limit_holding_the_marker_far_from_the_hit_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search, "CHUNK", 8)
    monkeypatch.setattr(search, "_STEP", 5)
    data = b"ok id-1\n" + b"id-1" + b"y" * 100 + MARKER + b"z" * 50 + b"\nid-1 again"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "log")
        path.write_bytes(data)
        assert _search(path, b"id-1", 20) == [(0, b"ok id-1"), (8, None), (171, b"id-1 again")]


def _lines(path: Path) -> Iterator[tuple[int, bytes | None]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        yield from search.lines_with(fd, b"id-1", max_line=1 << 20, marker=MARKER)
    finally:
        os.close(fd)


def test_stopping_early_stops_the_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "CHUNK", 64)
    monkeypatch.setattr(search, "THREADS", 2)
    path = tmp_path / "log"
    path.write_bytes(b"id-1 line\n" * 10_000)
    before = threading.active_count()
    lines = _lines(path)
    assert next(lines) == (0, b"id-1 line")
    assert threading.active_count() > before
    lines.close()
    assert threading.active_count() == before


def test_a_file_truncated_while_searched_ends_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "CHUNK", 64)
    path = tmp_path / "log"
    path.write_bytes(b"id-1 line\n" * 10_000)
    lines = _lines(path)
    next(lines)
    os.truncate(path, 1000)
    rest = list(lines)  # no error; what was read before the cut may still come
    assert all(line == b"id-1 line" for _, line in rest)


# --- end to end -----------------------------------------------------------------------------


def _envelope(test_id: str, n: int) -> bytes:
    value = {
        "schema_version": 1,
        "test_id": test_id,
        "trace_id": "0193f1a2-0000-7000-8000-000000000000",
        "span_id": f"{n:016x}",
        "parent_span_id": None,
        "layer": "backend",
        "boundary": "backend.agent.enter",
        "slug": "chat",
        "demo": "chat",
        "ts": f"2026-11-22T03:00:{n % 60:02d}.000Z",
        "mono_ns": n,
        "duration_ms": None,
        "outcome": "info",
        "edge_headers": NULL_EDGE_HEADERS,
        "metadata": {"agent_name": "a", "model_id": "m"},
    }
    return b"CVDIAG " + orjson.dumps(value) + b"\n"


def test_cvdiag_grep_over_many_chunks_prints_what_the_block_path_prints(tmp_path: Path) -> None:
    """A 10 MB log (three chunks) with the id's envelopes on every chunk edge, at its start and
    as its last line without a newline: ``grep FILE`` (the search) and ``grep - < FILE`` (the
    block path) print the same envelopes, once each."""
    filler = b'INFO: 10.0.0.1:5123 - "POST /chat HTTP/1.1" 200 OK request_id=t-2 worker=1\n'
    out = bytearray(_envelope("t-1", 0))
    n = 1
    for edge in (search.CHUNK, 2 * search.CHUNK):
        for shift in (-300, -5, 0, 1):  # the envelope crosses, ends at, or starts at the edge
            while len(out) < edge + shift - 400:
                out += filler if n % 3 else _envelope("t-2", n)
                n += 1
            out += b"x" * (edge + shift - len(out) - 200) + b"\n"
            out += _envelope("t-1", n)
            n += 1
    out += _envelope("t-1", n).rstrip(b"\n")
    path = tmp_path / "big.log"
    path.write_bytes(bytes(out))
    assert path.stat().st_size > 2 * search.CHUNK
    fast = cvdiag("grep", "--test-id", "T-1", str(path))
    slow = cvdiag("grep", "--test-id", "t-1", "-", stdin=bytes(out))
    assert (fast.returncode, fast.stderr) == (0, "")
    assert fast.stdout == slow.stdout
    assert fast.stdout.count("CVDIAG ") == 10


def test_progress_is_reported_as_the_ranges_are_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "CHUNK", 100)
    path = tmp_path / "log"
    path.write_bytes(b"id-1 line\n" * 95)
    seen: list[tuple[int, int | None]] = []
    inputs = Inputs([str(path)])
    inputs.watch(lambda done, total: seen.append((done, total)))
    with inputs as (plain,):
        plain.numbered = False
        assert len(list(reading.candidate_lines(plain, b"id-1"))) == 95
    assert seen == [(n, 950) for n in range(100, 950, 100)] + [(950, 950)]


def test_a_failed_read_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Like the block path's: one line from the command, not an internal error."""

    def failing(*args: object) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(search, "CHUNK", 64)
    monkeypatch.setattr(search, "_read", failing)
    path = tmp_path / "log"
    path.write_bytes(b"id-1 line\n" * 100)
    with Inputs([str(path)]) as (plain,):
        plain.numbered = False
        with pytest.raises(InputError, match=r"cannot read .*log: input/output error"):
            list(reading.candidate_lines(plain, b"id-1"))
