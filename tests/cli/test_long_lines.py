"""An envelope longer than a CRI line part is read whole, in every log format the docs list.

A debug-tier envelope is up to 16 384 bytes of JSON; with ``CVDIAG `` in front its line can pass
16 KiB, and the CRI log format (containerd, CRI-O) then writes it as parts tagged ``P`` and a
final ``F``, the other stream's lines between them. The envelope here is a real one, written by
the real emitter; each log is formatted as its collector writes it, and every command that
reads logs must read the envelope whole, valid, at its line (the line of its first part).
"""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag import MemorySink, Settings
from cvdiag.core.context import RequestContext
from cvdiag.logs import partial, ranges, reading
from cvdiag.logs.reading import MARKER, Input, candidate_lines, envelope_text
from cvdiag.pipeline.emitter import Emitter
from cvdiag.schema.vocabulary import BYTE_CAPS, Tier
from tests.support.cli import cvdiag

#: containerd's part size: bytes of content per CRI line.
PART = 16 * 1024
STAMP = "2026-11-22T03:00:00.{:09d}Z"


def _envelopes() -> tuple[list[bytes], list[bytes]]:
    """``(one test id's lines, another test id's lines)`` from the real emitter, the first
    test id's LLM response a debug-tier envelope whose line (``CVDIAG `` and its JSON) passes
    16 KiB while its JSON stays under the debug cap (a cut envelope would prove nothing)."""
    sink = MemorySink()
    emitter = Emitter(Settings(enabled=True, tier=Tier.DEBUG), sinks=[sink])
    big = RequestContext(test_id="t-long", trace_id="trace-long", slug="chat")
    other = RequestContext(test_id="t-other", trace_id="trace-other", slug="chat")
    emitter.emit("backend.request.ingress", metadata={"method": "POST"}, context=big)
    emitter.emit("backend.request.ingress", metadata={"method": "GET"}, context=other)
    # 64 finish reasons (the most a list keeps) of up to 256 characters (the most a string
    # keeps uncut), lengthened until the JSON is 2 bytes under the cap.
    reasons = [f"stop-{i:02d}-" + "x" * 200 for i in range(64)]
    response = {"provider": "openai", "model": "gpt-4o", "finish_reasons": reasons}
    emitter.emit("backend.llm.call.response", outcome="ok", metadata=response, context=big)
    missing = BYTE_CAPS[Tier.DEBUG] - 2 - len(sink.lines[-1])
    for i in range(64):
        more = min(missing, 256 - len(reasons[i]))
        reasons[i] += "y" * more
        missing -= more
    sink.clear()
    emitter.emit("backend.request.ingress", metadata={"method": "POST"}, context=big)
    emitter.emit("backend.request.ingress", metadata={"method": "GET"}, context=other)
    emitter.emit("backend.llm.call.response", outcome="ok", metadata=response, context=big)
    emitter.emit("backend.response.complete", outcome="ok", duration_ms=5.0, context=big)
    emitter.emit("backend.response.complete", outcome="ok", duration_ms=2.0, context=other)
    lines = [b"CVDIAG " + line for line in sink.lines]
    assert "_truncated" not in sink.envelopes[2]
    assert PART < len(lines[2]) <= PART + len(b"CVDIAG ") + BYTE_CAPS[Tier.DEBUG] - PART
    return [lines[0], lines[2], lines[3]], [lines[1], lines[4]]


LONG, OTHER = _envelopes()
HOST = b"INFO:     Application startup complete."


def _prefixed(prefix: Callable[[int], bytes]) -> tuple[bytes, dict[bytes, int]]:
    """A log of one line per envelope (the other test id's between), each after ``prefix``,
    and the line number of each envelope."""
    order = [HOST, LONG[0], OTHER[0], LONG[1], OTHER[1], LONG[2]]
    return b"".join(prefix(n) + line + b"\n" for n, line in enumerate(order)), {
        line: n + 1 for n, line in enumerate(order)
    }


def _cri() -> tuple[bytes, dict[bytes, int]]:
    """As the kubelet's containerd writes it: the long envelope in parts of 16 KiB of content
    on stdout, the other test id's envelopes on stderr between the parts."""
    rows: list[bytes] = []
    at: dict[bytes, int] = {}

    def row(stream: str, tag: str, content: bytes) -> None:
        stamp = STAMP.format(len(rows)).encode()
        rows.append(stamp + b" " + stream.encode() + b" " + tag.encode() + b" " + content + b"\n")

    row("stdout", "F", HOST)
    at[LONG[0]] = len(rows) + 1
    row("stdout", "F", LONG[0])
    at[LONG[1]] = len(rows) + 1
    parts = [LONG[1][i : i + PART] for i in range(0, len(LONG[1]), PART)]
    assert len(parts) >= 2
    for n, part in enumerate(parts):
        row("stdout", "P" if n < len(parts) - 1 else "F", part)
        if n < len(OTHER):  # stdout and stderr interleave
            at[OTHER[n]] = len(rows) + 1
            row("stderr", "F", OTHER[n])
    at[LONG[2]] = len(rows) + 1
    row("stdout", "F", LONG[2])
    return b"".join(rows), at


FORMATS: dict[str, Callable[[], tuple[bytes, dict[bytes, int]]]] = {
    "plain": lambda: _prefixed(lambda n: b""),
    "compose": lambda: _prefixed(lambda n: b"web-1  | "),
    "compose-colour": lambda: _prefixed(lambda n: b"\x1b[36mweb-1  | \x1b[0m"),
    "timestamps": lambda: _prefixed(lambda n: STAMP.format(n).encode() + b" "),
    "compose-timestamps": lambda: _prefixed(
        lambda n: b"web-1  | " + STAMP.format(n).encode() + b" "
    ),
    "cri": _cri,
}


def _json(line: bytes) -> bytes:
    text = envelope_text(line)
    assert text is not None
    return text


@pytest.mark.parametrize("form", list(FORMATS))
def test_every_reader_reads_the_long_envelope_whole_at_its_line(tmp_path: Path, form: str) -> None:
    data, at = FORMATS[form]()
    log = tmp_path / "app.log"
    log.write_bytes(data)
    long = LONG[1]

    grep = cvdiag("grep", "--test-id", "t-long", str(log))
    assert (grep.returncode, grep.stderr) == (0, "")
    assert grep.stdout.encode() == b"".join(line + b"\n" for line in LONG)
    other = cvdiag("grep", "--test-id", "t-other", str(log))
    assert (other.returncode, other.stderr) == (0, "")
    assert other.stdout.encode() == b"".join(line + b"\n" for line in OTHER)
    everything = cvdiag("grep", str(log))
    assert (everything.returncode, everything.stderr) == (0, "")
    assert sorted(everything.stdout.encode().splitlines()) == sorted(LONG + OTHER)

    replay = cvdiag("replay", "--json", "t-long", str(log))
    assert (replay.returncode, replay.stderr) == (0, "")
    events = json.loads(replay.stdout)["events"]
    where = {event["boundary"]: event["source"] for event in events}
    assert where["backend.llm.call.response"] == f"{log}:{at[long]}"
    assert [event["source"] for event in events] == [f"{log}:{at[line]}" for line in LONG]
    response = next(e for e in events if e["boundary"] == "backend.llm.call.response")
    assert len(response["metadata"]["finish_reasons"]) == 64

    classify = cvdiag("classify", "--json", "t-long", str(log))
    assert classify.returncode == 0, classify.stderr
    assert classify.stderr == ""
    evidence = json.loads(classify.stdout)["evidence"]
    assert evidence["envelope_count"] == 3
    sources = {ref["source"] for ref in evidence["envelopes"]}
    assert sources <= {f"{log}:{at[line]}" for line in LONG}

    listing = cvdiag("ls", "--json", str(log))
    assert (listing.returncode, listing.stderr) == (0, "")
    counts = {row["test_id"]: row["envelopes"] for row in json.loads(listing.stdout)}
    assert counts == {"t-long": 3, "t-other": 2}

    validate = cvdiag("validate", "--strict", str(log))
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "5 envelopes: 5 valid, 0 invalid; 0 malformed lines; 0 lines set aside" in (
        validate.stdout
    )
    stats = cvdiag("stats", "--json", str(log))
    assert (stats.returncode, stats.stderr) == (0, "")
    figures = json.loads(stats.stdout)
    assert figures.get("malformed_lines", 0) == 0
    assert figures.get("set_aside_lines", 0) == 0

    tail = cvdiag("tail", "--no-follow", "--lines", "100", "--color", "never", str(log))
    assert (tail.returncode, tail.stderr) == (0, "")
    shown = tail.stdout.splitlines()
    ids = [("t-long" if "t-long" in line else "t-other") for line in shown if " t-" in line]
    # In the order of their lines (a joined line stands at its first part's).
    order = sorted(LONG + OTHER, key=at.__getitem__)
    assert ids == [("t-long" if line in LONG else "t-other") for line in order]
    assert "stop-00" not in tail.stdout  # no part shown as a host's line
    assert sum("llm.response" in line for line in shown) == 1


def test_validate_numbers_the_lines_after_a_joined_one_as_written(tmp_path: Path) -> None:
    """A malformed line after the parts is reported at its own line: joining moves no line."""
    data, at = _cri()
    broken = STAMP.format(99).encode() + b" stderr F CVDIAG {not json}\n"
    log = tmp_path / "app.log"
    log.write_bytes(data + broken)
    done = cvdiag("validate", str(log))
    assert done.returncode == 1
    number = data.count(b"\n") + 1
    assert f"{log}:{number}: malformed" in done.stdout + done.stderr
    assert f"{log}:{at[LONG[1]]}" not in done.stdout + done.stderr


def test_the_parallel_read_never_cuts_between_parts(tmp_path: Path) -> None:
    """``validate`` and ``stats`` in ranges of a few hundred bytes say what one read says."""
    data, _ = _cri()
    log = tmp_path / "app.log"
    log.write_bytes(data * 3)
    runner = (
        "import sys\nfrom cvdiag.logs import ranges\n"
        "ranges.PARALLEL_MIN, ranges.RANGE_SIZE = 0, 300\n"
        "seen = []\nrun = ranges.run\n"
        "def counted(job, source, spans, **kw):\n"
        "    seen.append(len(spans)); print(len(spans), file=sys.stderr)\n"
        "    return run(job, source, spans, **kw)\n"
        "ranges.run = counted\n"
        "from cvdiag.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    for command in (["validate", "--strict"], ["stats", "--json"]):
        one = cvdiag(*command, str(log))
        many = subprocess.run(
            [sys.executable, "-c", runner, *command, str(log)], capture_output=True, text=True
        )
        assert int(many.stderr.split()[0]) > 3  # it did read in ranges
        assert (many.returncode, many.stdout) == (one.returncode, one.stdout), many.stderr
        assert one.returncode == 0, one.stdout
        if command[0] == "validate":
            assert "15 envelopes: 15 valid, 0 invalid; 0 malformed lines" in one.stdout


def test_split_moves_an_edge_out_of_a_run() -> None:
    data, _ = _cri()
    first = data.index(b" stdout P ")
    first = data.rfind(b"\n", 0, first) + 1  # the run's first line
    last = data.index(b"\n", data.index(b" stdout F ", first)) + 1  # just after its F
    for step in (50, 200, 16_000, 17_000, 30_000):
        edges = ranges.split(lambda at, count: data[at : at + count], len(data), step)
        assert not [start for start, _ in edges if first < start < last], step
        assert (edges[0][0], edges[-1][1]) == (0, len(data))


@pytest.mark.parametrize("block", [1, 13, 4096, PART + 7, 1 << 20])
@pytest.mark.parametrize("numbered", [True, False])
def test_the_block_reader_joins_parts_across_any_block_edge(block: int, numbered: bool) -> None:
    data, at = _cri()
    offsets = {}
    position = 0
    for number, line in enumerate(data.splitlines(keepends=True), 1):
        offsets[number] = position
        position += len(line)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reading, "BLOCK", block)
        source = Input("log", io.BytesIO(data))
        source.numbered = numbered
        got = [(n, _json(line)) for n, line in candidate_lines(source, MARKER) if line]
    want = sorted((at[line], _json(line)) for line in LONG + OTHER)
    if not numbered:  # the byte offset of each envelope's first part
        want = [(offsets[n], text) for n, text in want if text != _json(OTHER[0])]
        got = [(n, text) for n, text in got if text != _json(OTHER[0])]
    assert got == want


def test_a_run_without_its_final_part_is_reported_not_completed() -> None:
    data, _ = _cri()
    cut = data.index(b" stdout F ", data.index(b" stdout P "))
    head = data[: data.rfind(b"\n", 0, cut) + 1]  # the log ends before the F part
    problems: list[reading.Malformed] = []
    texts = [t for _, t, _ in reading.parsed_lines(Input("log", io.BytesIO(head)), problems.append)]
    assert _json(LONG[1]) not in texts
    assert [p.lineno for p in problems] == [3]
    assert "invalid JSON" in problems[0].reason


def test_lines_are_joined_for_tail_in_order() -> None:
    data, _ = _cri()
    lines = list(partial.joined_lines(io.BytesIO(data).readlines(), 1 << 20))
    texts = [_json(line.rstrip(b"\n")) for line in lines if MARKER in line]
    assert texts == [_json(line) for line in [LONG[0], LONG[1], OTHER[0], OTHER[1], LONG[2]]]


def test_without_partial_lines_blocks_are_handed_on_unchanged() -> None:
    data, _ = _prefixed(lambda n: b"")
    chunks = list(partial.joined_blocks(io.BytesIO(data).read, 1 << 20, 1 << 20))
    assert chunks == [data]


@pytest.mark.parametrize("across", [False, True])
def test_a_test_id_in_a_later_part_is_found(tmp_path: Path, across: bool) -> None:
    """Parts cut anywhere, the other stream between them: the test id wholly in the second part
    (the fast search of ``grep --test-id`` meets it there and hands the file to the block
    reader), or cut in two by the split (only the block reader, which ``replay`` uses, can see
    it then: containerd never cuts there, 16 KiB past an envelope's start)."""
    line = LONG[1]
    cut = line.index(b"t-long") + (3 if across else -1)
    log = tmp_path / "app.log"
    log.write_bytes(
        STAMP.format(1).encode()
        + b" stdout P "
        + line[:cut]
        + b"\n"
        + STAMP.format(2).encode()
        + b" stderr F "
        + OTHER[0]
        + b"\n"
        + STAMP.format(3).encode()
        + b" stdout F "
        + line[cut:]
        + b"\n"
    )
    if not across:
        grep = cvdiag("grep", "--test-id", "t-long", str(log))
        assert (grep.returncode, grep.stderr, grep.stdout.encode()) == (0, "", line + b"\n")
    other = cvdiag("grep", "--test-id", "t-other", str(log))
    assert (other.returncode, other.stderr, other.stdout.encode()) == (0, "", OTHER[0] + b"\n")
    replay = cvdiag("replay", "--json", "t-long", str(log))
    assert replay.returncode == 0, replay.stderr
    assert [e["source"] for e in json.loads(replay.stdout)["events"]] == [f"{log}:1"]


@st.composite
def _cri_logs(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, bytes]]]:
    """A CRI log of both streams, each line cut into random parts, the streams' rows merged at
    random; and ``(line of its first part, content)`` of each envelope."""
    streams: dict[str, list[tuple[int, bytes, bool]]] = {"stdout": [], "stderr": []}
    for number in range(draw(st.integers(0, 8))):
        stream = draw(st.sampled_from(["stdout", "stderr"]))
        content = b'CVDIAG {"n":%d,"s":"%s"}' % (number, b"x" * draw(st.integers(0, 40)))
        if draw(st.booleans()):
            content = b"host line %d" % number
        # containerd cuts 16 KiB into a line: the first part holds the marker whole
        low = 1 if content.startswith(b"host") else len(MARKER)
        cuts = sorted(set(draw(st.lists(st.integers(low, len(content) - 1), max_size=3))))
        edges = [0, *cuts, len(content)]
        for n, (start, end) in enumerate(itertools.pairwise(edges)):
            streams[stream].append((number if n == 0 else -1, content[start:end], n < len(cuts)))
    rows: list[bytes] = []
    first: dict[int, int] = {}
    contents: dict[int, bytes] = {}
    while streams["stdout"] or streams["stderr"]:
        stream = draw(st.sampled_from([s for s in streams if streams[s]]))
        number, part, more = streams[stream].pop(0)
        if number >= 0:
            first[number] = len(rows) + 1
            contents[number] = b""
        tag = b"P" if more else b"F"
        rows.append(STAMP.format(len(rows)).encode() + b" %s %s " % (stream.encode(), tag) + part)
    data = b"\n".join(rows) + (b"\n" if rows and draw(st.booleans()) else b"")
    # each envelope's content, joined in its stream's order
    joined: dict[int, bytes] = {}
    for line in partial.joined_lines(io.BytesIO(data).readlines(), 1 << 20):
        if MARKER in line:
            text = _json(line.rstrip(b"\n")[line.index(b"CVDIAG") :])
            joined[orjson.loads(text)["n"]] = text
    return data, sorted((first[n], text) for n, text in joined.items())


@settings(max_examples=300, deadline=None)
@given(log=_cri_logs(), block=st.integers(1, 70))
def test_the_block_reader_agrees_with_the_line_joiner(
    log: tuple[bytes, list[tuple[int, bytes]]], block: int
) -> None:
    data, want = log
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reading, "BLOCK", block)
        got = [
            (n, _json(line))
            for n, line in candidate_lines(Input("log", io.BytesIO(data)), MARKER)
            if line
        ]
    assert got == want
    joined = b"".join(partial.joined_blocks(io.BytesIO(data).read, block, 1 << 20))
    assert (len(joined), joined.count(b"\n")) == (len(data), data.count(b"\n"))
