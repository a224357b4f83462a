"""CopilotKit aimock's journal read as the mock provider's lines.

``tests/data/aimock-journal-1.43.0.json`` is a journal aimock 1.43.0 answered to ``GET
/__aimock/journal`` after six requests, each with its own ``x-test-id``: a streamed match, a
slow one (``latency``), one cut after two chunks (``truncateAfterChunks``), one cut after a time
(``latency`` and ``disconnectAfterMs``), one no fixture matched (404), and a JSON (unstreamed)
match. Every reading command reads such a file as another input; nothing the journal does not
record (a head, a chunk, an end time) is written; secrets in its entries never reach a line;
and no value, however odd, hurts the reader.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.logs.aimock import entry_envelopes, journal_lines, looks_like_journal
from cvdiag.logs.inputs import Inputs
from cvdiag.logs.reading import merged
from cvdiag.logs.shape import shape_problem
from tests.support.cli import cvdiag

JOURNAL = Path(__file__).parents[1] / "data" / "aimock-journal-1.43.0.json"


def _read(path: Path) -> list[dict[str, Any]]:
    problems: list[object] = []
    with Inputs([str(path)]) as inputs:
        found = [r.envelope for r in merged(inputs, problems.append)]
    assert problems == []
    return found


def _by_test(envelopes: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for env in envelopes:
        out.setdefault(env["test_id"], {})[env["boundary"]] = env
    return out


def test_a_real_journal_is_read_as_the_mocks_lines() -> None:
    stories = _by_test(_read(JOURNAL))
    assert sorted(stories) == ["t-cut", "t-drop", "t-hello", "t-json", "t-nope", "t-slow"]
    for lines in stories.values():
        # One time per entry: every line of it stands there; no head, chunk or end is made.
        assert len({env["ts"] for env in lines.values()}) == 1
        assert not {"aimock.response.start", "aimock.sse.chunk"} & set(lines)
        assert all(env["layer"] == "aimock" for env in lines.values())
        assert all(env["metadata"]["source"] == "journal" for env in lines.values())
    hello = stories["t-hello"]
    assert hello["aimock.match.decision"]["metadata"]["fixture_id"] == 'userMessage="hello"'
    assert hello["aimock.request.ingress"]["metadata"]["last_user_message"] == "hello"
    assert hello["aimock.request.ingress"]["metadata"]["stream"] is True
    assert hello["aimock.response.complete"]["metadata"]["total_duration_ms"] is None
    assert stories["t-json"]["aimock.request.ingress"]["metadata"]["stream"] is False
    assert stories["t-slow"]["aimock.match.decision"]["metadata"]["fixture_latency_ms"] == 300
    cut = stories["t-cut"]["aimock.response.aborted"]["metadata"]
    assert cut["interrupt_reason"] == "truncateAfterChunks"
    assert cut["bytes_before_abort"] is None
    drop = stories["t-drop"]
    assert drop["aimock.response.aborted"]["metadata"]["interrupt_reason"] == "disconnectAfterMs"
    assert drop["aimock.match.decision"]["metadata"]["disconnect_after_ms"] == 500
    nope = stories["t-nope"]
    assert nope["aimock.match.decision"]["metadata"]["fixture_id"] is None
    assert nope["aimock.match.decision"]["metadata"]["reject_reasons"] == ["no_fixture_match"]
    assert nope["aimock.response.complete"]["metadata"]["http_status"] == 404
    assert nope["aimock.response.complete"]["outcome"] == "err"


def test_every_line_is_valid_cvdiag_v1(tmp_path: Path) -> None:
    done = cvdiag("validate", str(JOURNAL))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "18 valid, 0 invalid" in done.stdout
    packed = tmp_path / "journal.json.gz"
    packed.write_bytes(gzip.compress(JOURNAL.read_bytes()))
    assert _read(packed) == _read(JOURNAL)


def test_a_log_starting_with_a_bracket_is_still_a_log(tmp_path: Path) -> None:
    line = json.loads(orjson.dumps(entry_envelopes(json.loads(JOURNAL.read_text())[0])[0]))
    log = tmp_path / "app.log"
    log.write_text("[2026-12-07 10:00:00] INFO booting\nCVDIAG " + json.dumps(line) + "\n")
    assert [e["boundary"] for e in _read(log)] == ["aimock.request.ingress"]
    assert not looks_like_journal(b"[INFO] booting\n")
    assert looks_like_journal(b"[]")
    assert looks_like_journal(b' [ {"timestamp": 1, "response"')


def test_a_journal_whose_first_request_is_large_is_still_a_journal(tmp_path: Path) -> None:
    """aimock keeps request bodies up to 64 KB: the entry's response may be far past the
    head the reader looks at."""
    entries = json.loads(JOURNAL.read_text())
    entries[0]["body"]["messages"].insert(0, {"role": "system", "content": "x" * 60_000})
    big = tmp_path / "journal.json"
    big.write_text(json.dumps(entries, separators=(",", ":")))
    assert len(_read(big)) == len(_read(JOURNAL))


def test_secrets_in_an_entry_never_reach_a_line() -> None:
    entry = {
        "id": "req-1",
        "timestamp": 1_796_665_471_191,
        "method": "POST",
        "path": "/v1/chat/completions?testId=t-secret",
        "headers": {"authorization": "Bearer sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"},
        "body": {
            "model": "gpt-4o-mini",
            "messages": [
                {
                    "role": "user",
                    "content": "my key is sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
                }
            ],
        },
        "response": {"status": 404, "fixture": None},
    }
    lines = journal_lines(orjson.dumps([entry]))
    assert lines is not None
    assert b"abcdefghijklmnopqrstuvwxyz0123456789" not in lines
    assert b"t-secret" in lines  # the query's test id, when no header names one


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**63 - 1)
        | st.floats()
        | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "timestamp",
                        "headers",
                        "x-test-id",
                        "path",
                        "body",
                        "response",
                        "fixture",
                        "status",
                        "interrupted",
                        "interruptReason",
                        "match",
                        "latency",
                        "messages",
                        "role",
                        "content",
                        "model",
                        "id",
                    ]
                ),
                inner,
                max_size=6,
            )
        ),
        max_leaves=30,
    )
)
def test_any_value_is_read_or_refused_never_raises(value: Any) -> None:
    data = orjson.dumps([value], option=orjson.OPT_NON_STR_KEYS) if value is not None else b"[]"
    lines = journal_lines(data)
    if lines is None:  # not an array of entries: read as a log (no envelope in it)
        assert value is not None
        assert not isinstance(value, dict)
        return
    for raw in lines.splitlines():
        assert raw.startswith(b"CVDIAG {")
        assert shape_problem(orjson.loads(raw[7:])) is None
