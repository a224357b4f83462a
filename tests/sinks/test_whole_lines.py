"""Whole lines on a shared descriptor (issue 34): batches cut on line boundaries within
``PIPE_BUF``, a pipe that takes a piece whole or not at all, and an envelope capped to fit."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag import Settings, StdoutSink
from cvdiag.pipeline.emitter import Emitter
from cvdiag.schema.vocabulary import Tier
from cvdiag.sinks.descriptor import PIPE_BUF, cut_at, write_lines

_LINES = st.lists(st.binary(max_size=6000).map(lambda b: b.replace(b"\n", b"x")), max_size=30)


@given(lines=_LINES, limit=st.sampled_from([None, 64, 512, PIPE_BUF]))
def test_pieces_are_whole_lines_within_the_limit_and_lose_nothing(
    lines: list[bytes], limit: int | None
) -> None:
    data = b"".join(line + b"\n" for line in lines)
    pieces = list(cut_at(data, limit))
    assert b"".join(pieces) == data
    for piece in pieces:
        assert piece.endswith(b"\n")
        # Within the limit, unless the piece is one line that alone is longer.
        assert limit is None or len(piece) <= limit or piece.count(b"\n") == 1


@pytest.fixture
def full_pipe() -> Iterator[tuple[int, int]]:
    """A non-blocking pipe, filled up but for a few hundred bytes."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        while True:
            os.write(write_fd, b"z" * 1024)
    except BlockingIOError:
        pass
    os.read(read_fd, 300)  # room for less than one line below
    yield read_fd, write_fd
    os.close(read_fd)
    os.close(write_fd)


def test_a_full_pipe_takes_whole_pieces_or_nothing(full_pipe: tuple[int, int]) -> None:
    read_fd, write_fd = full_pipe
    data = b"".join(b"CVDIAG " + b"a" * 1000 + b"\n" for _ in range(20))
    assert write_lines(write_fd, data, PIPE_BUF) == 0  # no part of a piece went in
    drained = b""
    while len(drained) < 4 * 1024:  # now room for a piece of whole lines, and more
        drained += os.read(read_fd, 1024)
    done = write_lines(write_fd, data, PIPE_BUF)
    assert done > 0
    assert data[:done].endswith(b"\n")  # what went in ends at a line's end


def _stdout_to(path_or_pipe: str, tmp_path: Path) -> IO[str]:
    if path_or_pipe == "file":
        return open(tmp_path / "out", "w", buffering=1)
    os.mkfifo(tmp_path / "fifo")
    reader = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    stream = open(tmp_path / "fifo", "w", buffering=1)  # noqa: SIM115 - closed by the test
    os.close(reader)  # the writer stays a pipe's end; nothing is written in this test
    return stream


@pytest.mark.parametrize(("kind", "cap"), [("file", 16384), ("pipe", PIPE_BUF - 8)])
def test_the_debug_cap_fits_a_pipe(
    kind: str, cap: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a pipe a line reaches the reader whole only within PIPE_BUF, prefix and line break
    # included: the debug tier's 16 KiB cap shrinks to fit; a regular file keeps it.
    stream = _stdout_to(kind, tmp_path)
    monkeypatch.setattr(sys, "stdout", stream)
    try:
        emitter = Emitter(Settings(enabled=True, tier=Tier.DEBUG), sinks=[StdoutSink()])
        assert emitter.byte_cap == cap
        verbose = Emitter(Settings(enabled=True, tier=Tier.VERBOSE), sinks=[StdoutSink()])
        assert verbose.byte_cap == min(4096, cap)
    finally:
        stream.close()


def test_a_file_sink_on_a_named_pipe_caps_lines_to_fit(tmp_path: Path) -> None:
    from cvdiag import FileSink

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    emitter = Emitter(Settings(enabled=True, tier=Tier.DEBUG), sinks=[FileSink(fifo)])
    assert emitter.byte_cap == PIPE_BUF - 8
    regular = Emitter(Settings(enabled=True, tier=Tier.DEBUG), sinks=[FileSink(tmp_path / "f")])
    assert regular.byte_cap == 16384
