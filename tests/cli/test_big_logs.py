"""Reading big logs fast and in bounded memory must not change what the commands say.

The block scanner is held to a plain line split (block edges, lines longer than a block or than
``MAX_LINE``, CRLF, collector prefixes, no final newline); ``ls`` and ``stats --by-class``, which
fold test ids that fall out of the active set and read folded ones again, are held to the
output of keeping every test id open; ``ls --json`` written a row at a time is held to one
``orjson.dumps``; ``key_millis`` without ``strptime`` is held to ``strptime``.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag import cli
from cvdiag.cli.listing import _write_json
from cvdiag.cli.output import Output
from cvdiag.diagnosis import pertest
from cvdiag.diagnosis.facts import Facts
from cvdiag.diagnosis.pertest import PerTestId
from cvdiag.logs import reading
from cvdiag.logs.reading import MARKER, Input, candidate_lines
from cvdiag.logs.times import key_millis
from tests.support.cli import cvdiag
from tests.support.stories import STORIES, Story, write_log

# --- the block scanner ----------------------------------------------------------------------


def _reference(data: bytes, needle: bytes, max_line: int) -> list[tuple[int, bytes, bool]]:
    """A plain split: ``(line number, line, too long)`` for the lines holding the needle."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [(n, line, len(line) > max_line) for n, line in enumerate(lines, 1) if needle in line]


_pieces = st.sampled_from(
    [
        b"CVDIAG {",
        b"id-7",
        b"x",
        b"\r",
        b"\n",
        b"\r\n",
        b"web-1  | ",
        b"2026-11-22T03:00:00Z ",
        b"y" * 9,
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    chunks=st.lists(_pieces, max_size=50),
    block=st.integers(1, 12),
    max_line=st.integers(4, 40),
)
def test_the_scanner_agrees_with_a_line_split_even_past_max_line(
    chunks: list[bytes], block: int, max_line: int
) -> None:
    data = b"".join(chunks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reading, "BLOCK", block)
        patch.setattr(reading, "MAX_LINE", max_line)
        for needle in (MARKER, b"id-7"):
            got = list(candidate_lines(Input("log", io.BytesIO(data)), needle))
            want = _reference(data, needle, max_line)
            assert [(n, line) for n, line in got if line is not None] == [
                (n, line) for n, line, too_long in want if not too_long
            ]
            # A line past MAX_LINE is reported (None) when it holds the marker; one cut off
            # across blocks is decided on the bytes read before the cut.
            reported = {n for n, line in got if line is None}
            assert reported <= {n for n, line, too_long in want if too_long and MARKER in line}


def _envelope(test_id: str, n: int) -> bytes:
    story = Story(test_id)
    story.emit("backend.sse.event", float(n), metadata={"sequence_num": n})
    return story.lines()[0].encode()


def test_grep_finds_hits_across_block_edges_crlf_prefixes_and_a_last_line_without_newline(
    tmp_path: Path,
) -> None:
    rng = random.Random(3)
    lines: list[bytes] = []
    size = 0
    n = 0
    while size < 3 * reading.BLOCK:
        kind = rng.randrange(6)
        if kind == 0:
            line = _envelope("hit", n)
        elif kind == 1:
            line = b"web-1  | 2026-11-22T03:00:00.123Z " + _envelope("hit", n) + b"\r"
        elif kind == 2:
            line = _envelope("other", n)
        else:
            line = b"INFO " + b"z" * rng.randrange(0, 3000)
        lines.append(line)
        size += len(line) + 1
        n += 1
    lines.append(b"x" * (reading.BLOCK + 10))  # longer than a block, no marker
    lines.append(_envelope("hit", n))  # the last line, without a newline
    data = b"\n".join(lines)
    path = tmp_path / "big.log"
    path.write_bytes(data)
    got = cvdiag("grep", "--test-id", "hit", str(path))
    assert got.returncode == 0, got.stderr
    want = [
        line[line.index(b"CVDIAG {") :].rstrip() for line in lines if b'"test_id":"hit"' in line
    ]
    assert got.stdout.encode().splitlines() == want
    assert len(want) > 100


# --- folding test ids -----------------------------------------------------------------------


def _run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(list(args))
    return code, out.getvalue()


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two logs of many test ids whose envelopes interleave, one test id returning much later."""
    root = tmp_path_factory.mktemp("fold")
    names = sorted(STORIES)
    stories = []
    for i in range(80):
        story = STORIES[names[i % len(names)]](f"t-{i:03d}")
        shift = (i * 7919) % 50_000
        for env in story.envelopes:
            moment = datetime.datetime.fromisoformat(env["ts"][:-1]) + datetime.timedelta(
                milliseconds=shift
            )
            env["ts"] = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
            env["mono_ns"] += shift * 1_000_000
            env["slug"] = ["chat", "agui", "ws"][i % 3]
        stories.append(story)
    late = Story("t-001", start_ms=900_000)
    late.emit("backend.sse.aborted", 0.0, metadata={"termination_kind": "client_disconnect"})
    stories.append(late)
    write_log(root / "a.log", stories[:50])
    write_log(root / "b.log", stories[50:])
    return [str(root / "a.log"), str(root / "b.log")]


@pytest.mark.parametrize(
    "args",
    [
        ("ls",),
        ("ls", "--json"),
        ("ls", "--failed", "--since", "2026-11-22T03:00:10Z"),
        ("stats", "--by-class", "--json"),
        ("stats", "--by-class"),
    ],
)
def test_folding_test_ids_early_changes_nothing(
    interleaved: list[str], args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _run(*args, *interleaved)
    assert whole[0] == 0
    for active in (1, 2, 7):
        monkeypatch.setattr(pertest, "ACTIVE", active)
        assert _run(*args, *interleaved) == whole


def test_only_the_active_test_ids_keep_their_facts() -> None:
    stories = [STORIES["healthy"](f"id-{i}") for i in range(40)]
    from cvdiag.logs.reading import records

    data = "\n".join(line for story in stories for line in story.lines()).encode()
    folded_at: list[int] = []

    def fold(order: int, slug: str, facts: Facts) -> int:
        folded_at.append(order)
        return facts.count

    seen: PerTestId[int] = PerTestId(fold, lambda n: (0, ""), again=lambda ids: [], active=3)
    for record in records(Input("log", io.BytesIO(data)), print):
        seen.add(record)
        assert len(seen._open) <= 3
    assert dict(seen.finish().items()) == {s.test_id: len(s.envelopes) for s in stories}
    assert folded_at == list(range(40))


# --- output written a row at a time ---------------------------------------------------------

_cells = st.one_of(
    st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=12)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), _cells, max_size=4), max_size=5))
def test_ls_json_a_row_at_a_time_is_one_dump(rows: list[dict[str, Any]]) -> None:
    buffer = io.BytesIO()
    stream = io.TextIOWrapper(buffer)
    out = Output(stream=stream)
    _write_json(out, rows)
    out.flush()
    assert buffer.getvalue() == orjson.dumps(rows, option=orjson.OPT_INDENT_2) + b"\n"


# --- times ----------------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(st.datetimes(min_value=datetime.datetime(1000, 1, 1)))
def test_key_millis_is_strptimes_figure(moment: datetime.datetime) -> None:
    key = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    slow = datetime.datetime.strptime(key, "%Y-%m-%dT%H:%M:%S.%fZ")
    assert key_millis(key) == slow.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000.0
