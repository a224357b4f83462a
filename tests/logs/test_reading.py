"""Reading logs: the block scanner against a naive line split, the prefix rule, gzip, malformed
lines, and the time-ordered merge."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.logs import reading
from cvdiag.logs.reading import (
    Input,
    InputError,
    Inputs,
    Malformed,
    candidate_lines,
    envelope_text,
    merged,
    records,
    ts_key,
)
from tests.support.stories import Story, healthy, stalled


def _input(data: bytes, name: str = "log") -> Input:
    return Input(name, io.BytesIO(data))


def _naive(data: bytes, needle: bytes) -> list[tuple[int, bytes]]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [(i, line) for i, line in enumerate(lines, 1) if needle in line]


_pieces = st.sampled_from([b"CVDIAG {", b"x", b"ab", b"\n", b"\n\n", b"id-1", b" | ", b"\xff"])


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(_pieces, max_size=60), block=st.integers(1, 16))
def test_block_scanner_finds_what_a_line_split_finds(chunks: list[bytes], block: int) -> None:
    data = b"".join(chunks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reading, "BLOCK", block)
        for needle in (b"CVDIAG {", b"id-1"):
            assert list(candidate_lines(_input(data), needle)) == _naive(data, needle)


def _naive_offsets(data: bytes, needle: bytes) -> list[tuple[int, bytes]]:
    found, at = [], 0
    for line in data.split(b"\n"):
        if needle in line:
            found.append((at, line))
        at += len(line) + 1
    return found


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(_pieces, max_size=60), block=st.integers(1, 16))
def test_without_line_numbers_positions_are_byte_offsets(chunks: list[bytes], block: int) -> None:
    data = b"".join(chunks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reading, "BLOCK", block)
        for needle in (b"CVDIAG {", b"id-1"):
            source = _input(data)
            source.numbered = False
            assert list(candidate_lines(source, needle)) == _naive_offsets(data, needle)


def test_overlong_lines_are_skipped_and_reported_and_numbering_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reading, "BLOCK", 8)
    monkeypatch.setattr(reading, "MAX_LINE", 32)
    data = b"CVDIAG {a}\n" + b"CVDIAG {" + b"x" * 100 + b"}\n" + b"y" * 100 + b"\nCVDIAG {b}\n"
    assert list(candidate_lines(_input(data), b"CVDIAG {")) == [
        (1, b"CVDIAG {a}"),
        (2, None),
        (4, b"CVDIAG {b}"),
    ]


@pytest.mark.parametrize(
    ("line", "json"),
    [
        (b'CVDIAG {"a":1}', b'{"a":1}'),
        (b'CVDIAG {"a":1}  \r', b'{"a":1}'),
        (b'web-1  | CVDIAG {"a":1}', b'{"a":1}'),
        (b'2026-11-22T03:00:00.0000000Z CVDIAG {"a":1}', b'{"a":1}'),
        (b'\x1b[36mweb-1  |\x1b[0mCVDIAG {"a":1}', b'{"a":1}'),
        (b'web-1|CVDIAG {"a":1}', b'{"a":1}'),
        (b"2026-11-22T03:00:00.123456789Z stdout F CVDIAG {}", b"{}"),
        (b"web-1  | 2026-11-22T03:00:00Z CVDIAG {}", b"{}"),
        (b'x"CVDIAG {"a":1} then CVDIAG {"b":2}', None),
        (b"host log 0 CVDIAG {}", None),
        (b"host log 0CVDIAG {}", None),
        (b"INFO: CVDIAG {}", None),
        (b'{"msg":"CVDIAG {\\"a\\":1}"}', None),
        (b'XCVDIAG {"a":1}', None),
        (b"CVDIAG{}", None),
    ],
)
def test_the_prefix_rule(line: bytes, json: bytes | None) -> None:
    assert envelope_text(line) == json


def test_an_envelope_after_other_text_is_set_aside_and_reported() -> None:
    good = healthy("t1").lines()
    forged = good[1].replace("t1", "t2")
    data = "\n".join([good[0], f"host log 0 {forged}", f"glued{good[2]}", good[3]]).encode()
    found, bad = _collect(data)
    assert len(found) == 2
    assert [(b.lineno, b.set_aside) for b in bad] == [(2, True), (3, True)]


def _collect(data: bytes, test_id: str | None = None) -> tuple[list[str], list[Malformed]]:
    bad: list[Malformed] = []
    found = [r.envelope["boundary"] for r in records(_input(data), bad.append, test_id=test_id)]
    return found, bad


def test_malformed_lines_are_reported_with_their_line_and_skipped() -> None:
    good = healthy("t1").lines()
    data = "\n".join(
        [
            good[0],
            "CVDIAG {not json",
            "CVDIAG [1, 2]",
            'CVDIAG {"test_id": "t1"}',
            good[1].replace('"mono_ns":', '"mono_ns":"x","was":'),
            good[2].replace('"ts":"2026', '"ts":"yesterday","old":"2026'),
            "plain log line",
            good[3],
        ]
    ).encode()
    found, bad = _collect(data)
    assert found == ["backend.request.ingress", "backend.llm.call.response"]
    assert [(b.lineno, b.reason.split(":")[0].split(" ")[0]) for b in bad] == [
        (2, "invalid"),
        (4, "missing"),
        (5, "field"),
        (6, "field"),
    ]
    assert "mono_ns" in bad[2].reason
    assert "date-time" in bad[3].reason
    assert str(bad[0]).startswith("log:2: invalid JSON")


def test_a_test_id_filter_keeps_only_exact_matches() -> None:
    one, other = healthy("abc"), healthy("abc-2")
    data = "\n".join(one.lines() + other.lines()).encode()
    found, _ = _collect(data, test_id="abc")
    assert len(found) == len(one.envelopes)


def test_gzip_is_recognised_by_its_magic_not_its_name(tmp_path: Path) -> None:
    text = "\n".join(healthy("t1").lines()).encode()
    (tmp_path / "plain.log").write_bytes(gzip.compress(text))
    with Inputs([str(tmp_path / "plain.log")]) as inputs:
        assert len(list(merged(inputs, print))) == len(healthy().envelopes)


def test_truncated_gzip_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.log.gz"
    path.write_bytes(gzip.compress(b"CVDIAG {}\n" * 10000)[:-30])
    with Inputs([str(path)]) as inputs, pytest.raises(InputError, match="ends early"):
        list(merged(inputs, print))


@pytest.mark.parametrize("name", ["missing.log", "."])
def test_unreadable_inputs_fail_before_anything_is_read(name: str) -> None:
    with pytest.raises(InputError, match=r"cannot read"):
        Inputs([name])


def test_stdin_only_once() -> None:
    with pytest.raises(InputError, match="once"):
        Inputs(["-", "-"])


def test_merge_orders_by_ts_then_mono(tmp_path: Path) -> None:
    first = Story("m", start_ms=0.0)
    second = Story("m", start_ms=0.4, mono0=5 * 10**12)  # another process: other monotonic clock
    for i in range(5):
        first.emit("backend.sse.event", i * 2.0)
        second.emit("backend.sse.event", i * 2.0)
    (tmp_path / "a.log").write_text("\n".join(first.lines()))
    (tmp_path / "b.log").write_text("\n".join(second.lines()))
    with Inputs([str(tmp_path / "a.log"), str(tmp_path / "b.log")]) as inputs:
        keys = [r.key for r in merged(inputs, print)]
    assert [k[0] for k in keys] == sorted(k[0] for k in keys)
    assert len(keys) == 10


@pytest.mark.parametrize(
    ("ts", "key"),
    [
        ("2026-11-22T03:00:00.123Z", "2026-11-22T03:00:00.123000Z"),
        ("2026-11-22T04:00:00.123+01:00", "2026-11-22T03:00:00.123000Z"),
        ("2026-11-22T03:00:00", "2026-11-22T03:00:00.000000Z"),
        ("2026-11-22 03:00:00.500Z", "2026-11-22T03:00:00.500000Z"),
        ("not a time", None),
    ],
)
def test_ts_keys_sort_as_time(ts: str, key: str | None) -> None:
    assert ts_key(ts) == key


def test_records_carry_their_text_as_written() -> None:
    story = stalled("t9")
    data = ("\n".join(story.lines()) + "\n").encode()
    got = list(records(_input(data), print))
    assert [orjson.loads(r.text) for r in got] == story.envelopes
    assert [r.lineno for r in got] == list(range(1, len(story.envelopes) + 1))
