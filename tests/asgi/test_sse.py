"""The incremental SSE readers agree with a whole-stream reference parser, however cut."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cvdiag.asgi import sse, sse_parser
from cvdiag.asgi.sse import SSECounter, json_type
from cvdiag.asgi.sse_parser import SSEEvent, SSEParser
from tests.support.compiled import patches_internals

# --- a reference: the WHATWG EventSource algorithm over the whole stream at once ---------------


def reference(stream: bytes) -> list[SSEEvent]:
    if stream.startswith(b"\xef\xbb\xbf"):
        stream = stream[3:]
    lines = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    lines.pop()  # an unterminated last line (or nothing) never dispatches
    events: list[SSEEvent] = []
    data: bytes | None = None
    name = b""
    for line in lines:
        if not line:
            if data is not None:
                kind = name.decode("utf-8", "replace") if name else _full_json_type(data)
                events.append(SSEEvent(kind or "message", len(data)))
            data, name = None, b""
            continue
        if line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data = value if data is None else data + b"\n" + value
        elif field == b"event":
            name = value[: sse.TYPE_MAX]
    return events


def _full_json_type(data: bytes) -> str | None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    return kind[: sse.TYPE_MAX] if isinstance(kind, str) and kind else None


def cut(stream: bytes, points: list[int]) -> list[bytes]:
    bounds = sorted({p % (len(stream) + 1) for p in points} | {0, len(stream)})
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def count_all(chunks: list[bytes]) -> int:
    counter = SSECounter()
    return sum(counter.feed(chunk) for chunk in chunks)


def parse_all(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


# --- examples ----------------------------------------------------------------------------------


def test_agui_events_named_by_json_type() -> None:
    stream = (
        b'data: {"type":"RUN_STARTED","threadId":"t"}\n\n'
        b'data: {"delta":"hi","type":"TEXT_MESSAGE_CONTENT"}\n\n'
        b"data: [DONE]\n\n"
    )
    assert parse_all([stream]) == [
        SSEEvent("RUN_STARTED", len(b'{"type":"RUN_STARTED","threadId":"t"}')),
        SSEEvent("TEXT_MESSAGE_CONTENT", len(b'{"delta":"hi","type":"TEXT_MESSAGE_CONTENT"}')),
        SSEEvent("message", len(b"[DONE]")),
    ]
    assert count_all([stream]) == 3


def test_event_field_wins_over_json_type() -> None:
    stream = (
        b"event: response.output_text.delta\r\n"
        b'data: {"type":"ignored"}\r\n\r\n'
        b"event:\n"  # an empty event field means "message"
        b"data: x\n\n"
    )
    assert parse_all([stream]) == [
        SSEEvent("response.output_text.delta", len(b'{"type":"ignored"}')),
        SSEEvent("message", 1),
    ]


def test_split_across_chunks_and_crlf_split_between_chunks() -> None:
    stream = b'data: {"type":"A"}\r\n\r\ndata: one\r\ndata: two\r\n\r\n'
    chunks = [stream[i : i + 1] for i in range(len(stream))]  # every byte its own chunk
    assert parse_all(chunks) == [SSEEvent("A", 12), SSEEvent("message", 7)]
    assert count_all(chunks) == 2
    # a CR at the end of one chunk and its LF at the start of the next are one line ending
    assert count_all([b"data: a\r", b"\ndata: b\r", b"\n\r\n"]) == 1


def test_a_chunk_that_is_only_the_lf_of_a_crlf() -> None:
    chunks = [b"data: a\r", b"\n", b"\ndata: b\n\n"]  # CRLF, then a blank line: two events
    assert count_all(chunks) == len(reference(b"".join(chunks))) == 2
    assert parse_all(chunks) == reference(b"".join(chunks))


def test_several_events_in_one_chunk_and_lone_cr() -> None:
    stream = b"data: a\r\rdata: b\r\r: ping\r\rdata: c\n\n"
    assert [e.size for e in parse_all([stream])] == [1, 1, 1]
    assert count_all([stream]) == 3


def test_comments_and_blocks_without_data_are_not_events() -> None:
    stream = b": ping - 2024\r\n\r\nevent: only-a-name\n\nid: 7\nretry: 10\n\n\n\n"
    assert parse_all([stream]) == []
    assert count_all([stream]) == 0


def test_bare_data_field_and_unterminated_tail() -> None:
    assert parse_all([b"data\n\ndata: cut off"]) == [SSEEvent("message", 0)]
    assert count_all([b"data\n\ndata: cut off"]) == 1


def test_leading_bom_is_ignored() -> None:
    assert count_all([b"\xef\xbb\xbfdata: x\n\n"]) == 1
    assert parse_all([b"\xef\xbb\xbfevent: e\ndata: x\n\n"]) == [SSEEvent("e", 1)]


def test_json_type() -> None:
    assert json_type('{"type": "A", "x": 1}') == "A"
    assert json_type(b'  {"nested": {"type": "inner"}, "type": "outer"}') == "outer"
    assert json_type(b'{"nested": {"type": "inner"}}') is None
    assert json_type(b'{"nested": {"type": "inner"}, "type": "x"', complete=False) is None
    assert json_type(b'{"type": "head", "blob": "cut of', complete=False) == "head"
    assert json_type(b'{"type": "A"}\n{}') is None  # two data lines: not one JSON value
    assert json_type(b'{"type": 5}') is None
    assert json_type(b"[1, 2]") is None
    assert json_type(b"not json") is None


# --- large events: bounded memory, exact sizes -------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1000, 65536 * 3])
def test_one_megabyte_event_is_counted_and_sized_without_being_held(chunk_size: int) -> None:
    payload = b'{"type":"BIG","blob":"' + b"x" * 1_000_000 + b'"}'
    stream = b"data: " + payload + b"\n\n" + b"data: after\n\n"
    chunks = [stream[i : i + chunk_size] for i in range(0, len(stream), chunk_size)]
    parser = SSEParser()
    counter = SSECounter()
    events: list[SSEEvent] = []
    total = 0
    for chunk in chunks:
        events += parser.feed(chunk)
        total += counter.feed(chunk)
        assert len(parser._line) <= sse.BUFFER_LIMIT
        assert len(parser._data) <= sse.DATA_KEEP + 1
        assert len(counter._tail) <= sse.BUFFER_LIMIT + len(chunk)
    assert events == [SSEEvent("BIG", len(payload)), SSEEvent("message", 5)]
    assert total == 2


def test_large_event_of_many_short_lines() -> None:
    lines = b"".join(b"data: %d\n" % i for i in range(30_000))
    stream = b"event: many\n" + lines + b"\n" + b"data: z\n\n"
    chunks = [stream[i : i + 50] for i in range(0, len(stream), 50)]
    expected = reference(stream)
    assert parse_all(chunks) == expected
    assert count_all(chunks) == len(expected) == 2
    counter = SSECounter()
    for chunk in chunks:
        counter.feed(chunk)
        assert len(counter._tail) <= sse.BUFFER_LIMIT + 50


def test_a_large_comment_only_block_stays_uncounted() -> None:
    stream = b": " + b"p" * 200_000 + b"\n\n" + b"data: x\n\n"
    chunks = [stream[i : i + 4096] for i in range(0, len(stream), 4096)]
    assert count_all(chunks) == 1
    assert parse_all(chunks) == [SSEEvent("message", 1)]


# --- properties --------------------------------------------------------------------------------

_ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r"])
_JSON = st.builds(
    lambda kind, extra: orjson.dumps({"type": kind, **extra} if kind else extra),
    st.one_of(st.none(), st.text(min_size=1, max_size=12)),
    st.dictionaries(st.sampled_from(["a", "delta", "type2"]), st.text(max_size=8), max_size=2),
)
_VALUE = st.one_of(
    _JSON, st.binary(max_size=20).filter(lambda b: b"\r" not in b and b"\n" not in b)
)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 6))):
        lines: list[bytes] = []
        if draw(st.booleans()):
            lines.append(
                b"event:"
                + draw(st.sampled_from([b" ", b""]))
                + draw(st.sampled_from([b"x", b"ev.t", b""]))
            )
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(
                st.sampled_from([b"data: ", b"data:", b": comment ", b"id: ", b"database: "])
            )
            lines.append(kind + draw(_VALUE))
        if draw(st.booleans()):
            lines.append(b"data")
        out += b"".join(line + draw(_ENDINGS) for line in lines) + draw(_ENDINGS)
    return out


_NOISE = st.lists(
    st.sampled_from([b"data", b"event", b":", b" ", b"\n", b"\r", b"\r\n", b'{"type":"T"}', b"x"]),
    max_size=60,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(stream=st.one_of(streams(), _NOISE), points=st.lists(st.integers(0, 10_000), max_size=12))
def test_incremental_readers_match_the_reference(stream: bytes, points: list[int]) -> None:
    expected = reference(stream)
    for chunks in (cut(stream, points), [stream[i : i + 1] for i in range(len(stream))]):
        assert parse_all(chunks) == expected
        assert count_all(chunks) == len(expected)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(
        st.one_of(
            st.builds(lambda v: b"data: " + v, _VALUE),
            st.sampled_from([b"", b"\n", b"event: x\ndata: 1", b": ping", b"data", b"id: 7"]),
        ),
        min_size=1,
        max_size=12,
    ),
    ending=_ENDINGS,
)
def test_a_batch_of_whole_events_counts_as_the_reference(
    events: list[bytes], ending: bytes
) -> None:
    # What the default tier feeds the counter: held chunks joined, whole events, at the stream's
    # start and after one event was counted alone.
    stream = b"".join(e.replace(b"\n", ending) + ending * 2 for e in events)
    first = events[0].replace(b"\n", ending) + ending * 2
    expected = len(reference(stream))
    assert count_all([stream]) == expected
    assert count_all([first, stream[len(first) :]]) == expected


_HELD_CHUNK = st.one_of(
    st.builds(lambda v: b"data: " + v + b"\r\n\r\n", _VALUE),  # what sse-starlette sends
    st.builds(lambda v: b"data:" + v + b"\r\n\r\n", _VALUE),
    st.builds(lambda v: b"data: " + v + b"\n\n", _VALUE),
    st.sampled_from(
        [
            b"",
            b"\xef\xbb\xbfdata: 1\r\n\r\n",  # a BOM: only the stream's first one is dropped
            b"data: 1\r\n\r\ndata: 2\r\n\r\n",  # two events in one chunk
            b"data: a\rb\r\n\r\n",  # a lone CR is a line break of its own
            b"data: a\r\n\r\n\r\n",
            b"data: 1\r\n",  # an event cut in two
            b": c",  # a comment cut before its end: the next line continues it
            b"\r\n",
            b"\r",
            b"\n",
            b": ping\r\n\r\n",
            b"event: x\r\ndata: 1\r\n\r\n",
            b"data\r\n\r\n",
            b"id: 7\r\n\r\n",
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.lists(_HELD_CHUNK, max_size=6), min_size=1, max_size=4))
@example(batches=[[b": c"], [b"data: 1\r\n\r\n"]])  # held: a comment's line goes on
def test_held_batches_count_as_the_reference(batches: list[list[bytes]]) -> None:
    # The default tier hands the counter each batch of held chunks with their bytes joined.
    # Compiled, a CRLF batch of single-line events is counted chunk by chunk (whole_events),
    # anything else fed whole; both ways are taken here, whichever build runs.
    stream = b"".join(b"".join(batch) for batch in batches) + b"data: last\n\n"
    expected = len(reference(stream))
    for chunkwise in (False, True):
        counter = SSECounter()
        counted = 0
        for batch in batches:
            joined = b"".join(batch)
            whole = counter.whole_events(batch, joined) if chunkwise else None
            counted += counter.feed(joined) if whole is None else whole
        assert counted + counter.feed(b"data: last\n\n") == expected
    counter = SSECounter()
    assert (
        sum(counter.feed_batch(batch, b"".join(batch)) for batch in batches)
        + counter.feed(b"data: last\n\n")
        == expected
    )


@patches_internals  # the limits are constants compiled in
@settings(max_examples=300, deadline=None)
@given(stream=st.one_of(streams(), _NOISE), points=st.lists(st.integers(0, 10_000), max_size=12))
def test_condensing_keeps_counts_and_sizes_exact(
    stream: bytes, points: list[int], monkeypatch_limits: None
) -> None:
    chunks = cut(stream, points)
    expected = reference(stream)
    assert [e.size for e in parse_all(chunks)] == [e.size for e in expected]
    assert count_all(chunks) == len(expected)


@pytest.fixture(scope="module")
def monkeypatch_limits() -> object:
    """Tiny buffers, so that short generated streams exercise the condensing paths."""
    patch = pytest.MonkeyPatch()
    for module in (sse, sse_parser):
        patch.setattr(module, "BUFFER_LIMIT", 8)
        patch.setattr(module, "DATA_KEEP", 6)
    yield None
    patch.undo()
