"""Malformed, truncated and hostile logs given to ``cvdiag diff`` and ``cvdiag flakes``: the
documented one-line errors and exit codes, never a traceback; stories built from any envelope
the reader lets through never raise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.compare.diff import compare
from cvdiag.compare.flakes import by_test
from cvdiag.compare.story import Story
from cvdiag.logs.reading import Record
from tests.support.cli import cvdiag

BASE: dict[str, Any] = {
    "schema_version": 1,
    "test_id": "t-1",
    "trace_id": "x",
    "span_id": "0123456789abcdef",
    "parent_span_id": None,
    "layer": "backend",
    "boundary": "backend.request.ingress",
    "slug": "s",
    "demo": "d",
    "ts": "2026-11-28T10:00:00.000Z",
    "mono_ns": 1,
    "duration_ms": None,
    "outcome": "info",
    "edge_headers": {},
    "metadata": {"method": "POST", "path": "/chat"},
}


def line(**changes: Any) -> str:
    return "CVDIAG " + json.dumps({**BASE, **changes}) + "\n"


def no_traceback(done: Any) -> None:
    assert "Traceback" not in done.stderr
    assert "internal error" not in done.stderr


def test_a_missing_log_is_exit_2(tmp_path: Path) -> None:
    done = cvdiag("diff", "a", "b", str(tmp_path / "missing.log"))
    no_traceback(done)
    assert done.returncode in (1, 2)


def test_an_id_not_in_the_log_is_exit_1(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(line())
    done = cvdiag("diff", "t-1", "t-2", str(log))
    no_traceback(done)
    assert done.returncode == 1
    assert "no envelope with test id t-2" in done.stderr


def test_one_story_is_a_usage_error(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(line())
    done = cvdiag("diff", "t-1", str(log))
    no_traceback(done)
    assert done.returncode == 2
    assert "give two stories" in done.stderr


def test_truncated_and_binary_lines_are_skipped_with_a_warning(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    good = line() + line(test_id="t-2")
    log.write_bytes(
        good.encode()
        + b'CVDIAG {"schema_version": 1, "test_id": "t-1"\n\x00\xff\xfe'
        + line()[:40].encode()
    )
    done = cvdiag("diff", "t-1", "t-2", str(log))
    no_traceback(done)
    assert done.returncode == 0  # two ingresses alike
    assert "warning" in done.stderr


def test_hostile_values_in_known_keys(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    hostile = {"method": ["x"] * 3, "path": {"a": 1}, "http_status": "NaN", "event_type": None}
    log.write_text(
        line(metadata=hostile)
        + line(
            test_id="t-2",
            boundary="backend.response.complete",
            metadata=hostile,
            parent_span_id="0123456789abcdef",
            outcome="ok",
        )
        + line(
            test_id="t-2",
            boundary="backend.llm.call.response",
            metadata={"first_token_delta_ms": "soon"},
            parent_span_id="ffff",
        )
        + line(test_id="t-2", boundary="backend.agent.exit", metadata={}, parent_span_id=None)
    )
    for args in (
        ("diff", "t-1", "t-2", str(log)),
        ("flakes", str(log)),
        ("flakes", "--json", str(log)),
    ):
        done = cvdiag(*args)
        no_traceback(done)
        assert done.returncode in (0, 1), done.stderr


def test_a_bad_junit_file_is_one_line(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(line())
    junit = tmp_path / "r.xml"
    junit.write_text("<!DOCTYPE x [<!ENTITY a 'a'>]><testsuite>&a;</testsuite>")
    for args in (
        ("diff", "name", str(log), "--junit", str(junit)),
        ("flakes", str(log), "--junit", str(junit)),
    ):
        done = cvdiag(*args)
        no_traceback(done)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_log_without_envelopes_is_exit_1(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("hello\nworld\n")
    done = cvdiag("flakes", str(log))
    no_traceback(done)
    assert done.returncode == 1


values = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
metadata = st.dictionaries(
    st.sampled_from(
        ["method", "path", "http_status", "event_type", "agent_name", "provider", "model",
         "request_fingerprint", "first_token_delta_ms", "latency_ms", "error_class",
         "response_token_count", "finish_reasons", "termination_kind", "sse_event_count",
         "elapsed_ms_since_start", "total_duration_ms", "terminal_outcome"]
    ),
    values | st.lists(values, max_size=3),
)  # fmt: skip
boundaries = st.sampled_from(
    ["backend.request.ingress", "backend.response.complete", "backend.sse.aborted",
     "backend.sse.event", "backend.sse.first_byte", "backend.agent.enter", "backend.agent.exit",
     "backend.llm.call.start", "backend.llm.call.heartbeat", "backend.llm.call.response",
     "cvdiag.queue_dropped"]
)  # fmt: skip
spans = st.sampled_from(["0123456789abcdef", "1111111111111111", "2222222222222222"])
envelopes = st.lists(
    st.tuples(boundaries, metadata, spans, st.none() | spans, st.integers(0, 10**9)), max_size=25
)


def _story(test_id: str, items: list[tuple[str, dict[str, Any], str, str | None, int]]) -> Story:
    story = Story(test_id)
    for boundary, meta, span, parent, mono in items:
        env = {**BASE, "test_id": test_id, "boundary": boundary, "metadata": meta,
               "span_id": span, "parent_span_id": parent, "mono_ns": mono}  # fmt: skip
        story.add(Record("x", 1, b"", env, (env["ts"], mono)))
    return story.finish(first_token_timeout=60)


@settings(max_examples=150, deadline=None)
@given(envelopes, envelopes)
def test_any_envelopes_make_stories_that_compare(one: Any, two: Any) -> None:
    a, b = _story("a-run1", one), _story("a-run2", two)
    result = compare(a, b)
    json.dumps(result.to_json(), default=str)
    assert result.same == (not result.differences)
    assert compare(a, a).same
    for test in by_test([("r1", a), ("r2", b)]):
        test.to_json()
