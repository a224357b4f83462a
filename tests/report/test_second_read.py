"""The report's second read: the envelopes of several drawn test ids, each line parsed only when
its bytes leave a doubt (``gather._drawn``), are exactly those of parsing every line, whatever
way a writer spelt the line; and the drawn stories get the class ``cvdiag classify`` gives."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.diagnosis.classify import classify
from cvdiag.diagnosis.facts import Facts
from cvdiag.logs.reading import Input, Inputs, Malformed, Record, merged, records
from cvdiag.report import gather
from tests.support.stories import backend_error, client_abort, healthy, stalled, write_log

# ``cvdiag.report`` exports the function ``gather``, which hides its module of that name.
reading_two = sys.modules["cvdiag.report.gather"]


def _ignore(problem: Malformed) -> None:
    pass


def _envelope(test_id: Any, n: int, **extra: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "test_id": test_id,
        "trace_id": "t",
        "span_id": f"{n:016x}",
        "parent_span_id": None,
        "layer": "backend",
        "boundary": "backend.request.ingress",
        "slug": "chat",
        "demo": "d",
        "ts": f"2026-11-22T10:00:{n % 60:02d}.000Z",
        "mono_ns": 10**12 + n,
        "duration_ms": None,
        "outcome": "info",
        "edge_headers": {},
        "metadata": {},
        **extra,
    }


# Ways a writer may spell a line: orjson (cvdiag), json.dumps with its default separators,
# ASCII-only escapes, compact separators, the key order reversed.
_SPELLINGS = [
    lambda value: orjson.dumps(value),
    lambda value: json.dumps(value).encode(),
    lambda value: json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode(),
    lambda value: json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(),
    lambda value: orjson.dumps(dict(reversed(value.items()))),
]


def _first(key: str, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with ``key`` written first."""
    return {key: value[key], **value}


def _read(read: Any, data: bytes, ids: frozenset[str]) -> list[tuple[int, bytes, Any]]:
    found = read(Input("log", io.BytesIO(data)), ids)
    return [(record.lineno, record.text, record.key) for record in found]


def _reference(source: Input, ids: frozenset[str]) -> list[Record]:
    return list(records(source, _ignore, test_id=ids))


def _compare(data: bytes, ids: frozenset[str]) -> None:
    assert _read(reading_two._drawn, data, ids) == _read(_reference, data, ids)


def test_lines_that_could_mislead_a_bytes_check_are_read_as_a_parse_reads_them() -> None:
    wanted = frozenset({"a-1", 'q"uo\\te', "é-2"})
    lines = [
        orjson.dumps(_envelope("a-1", 1)),  # wanted, as cvdiag writes it
        orjson.dumps(_envelope("b-1", 2)),  # another's
        # Another's, with a wanted id under a nested "test_id" key: parsed, not kept.
        orjson.dumps(_envelope("b-1", 3, metadata={"test_id": "a-1"})),
        # Wanted, with another id under a nested key after it, and before it.
        orjson.dumps(_envelope("a-1", 4, metadata={"test_id": "b-1"})),
        orjson.dumps(_first("metadata", _envelope("a-1", 5, metadata={"test_id": "b-1"}))),
        # The envelope's own key escaped, a nested literal one naming another id.
        orjson.dumps(_envelope("a-1", 6, metadata={"test_id": "b-1"})).replace(
            b'"test_id":"a-1"', b'"test\\u005fid":"a-1"'
        ),
        json.dumps(_envelope("é-2", 7)).encode(),  # the id escaped: \u00e9
        orjson.dumps(_envelope('q"uo\\te', 8)),  # quotes and backslashes in the id
        json.dumps(_envelope("a-1", 9)).encode(),  # "test_id": "a-1", with a space
        orjson.dumps(_envelope(7, 10)),  # a test id that is no string
        orjson.dumps(["test_id", "a-1"]),  # no object
        b'{"test_id":"a-1", broken',  # malformed
        b'{"test_id":"b-1","x":"\\"test_id\\":\\"a-1\\""}',  # quoted in a string: no envelope
    ]
    text = b"".join(b"CVDIAG " + line + b"\nother text\n" for line in lines)
    text += b"web-1  | CVDIAG " + orjson.dumps(_envelope("a-1", 11)) + b"\n"
    text += b"noise CVDIAG " + orjson.dumps(_envelope("a-1", 12)) + b"\n"  # set aside
    _compare(text, wanted)
    assert len(_read(reading_two._drawn, text, wanted)) == 8


_ids = st.text(alphabet='ab"\\é/\x01', min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(pool=st.lists(_ids, min_size=3, max_size=5, unique=True), data=st.data())
def test_several_ids_are_read_as_parsing_every_line_reads_them(
    pool: list[str], data: st.DataObject
) -> None:
    # Ids from one small pool, so that lines of wanted ids and nested wanted ids are common.
    wanted = data.draw(st.lists(st.sampled_from(pool), min_size=2, unique=True))
    lines = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(pool),
                st.sampled_from(range(len(_SPELLINGS))),
                st.one_of(st.none(), st.sampled_from(pool)),
            ),
            max_size=12,
        )
    )
    out = []
    for n, (test_id, spelling, nested) in enumerate(lines):
        metadata = {} if nested is None else {"test_id": nested}
        out.append(b"CVDIAG " + _SPELLINGS[spelling](_envelope(test_id, n, metadata=metadata)))
    _compare(b"\n".join(out) + b"\n", frozenset(wanted))


def test_drawn_stories_across_inputs_get_the_class_classify_gives(tmp_path: Path) -> None:
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    write_log(first, [healthy("h-1"), stalled("s-1"), backend_error("e-1")])
    write_log(second, [healthy("h-2"), client_abort("c-1"), backend_error("e-2")])
    files = [str(first), str(second)]
    found = gather(files)
    drawn = {story.test_id: story for story in found.stories}
    assert sorted(drawn) == ["c-1", "e-1", "e-2", "s-1"]
    with Inputs(files) as inputs:
        every = list(merged(inputs, _ignore, test_id=frozenset(drawn)))
    for test_id, story in drawn.items():
        facts = Facts(test_id)
        for record in every:
            if record.envelope["test_id"] == test_id:
                facts.add(record)
        assert story.facts.count == facts.count
        assert story.verdict == classify(facts, first_token_timeout=found.first_token_timeout)
