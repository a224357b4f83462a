"""A drop report's lines, and what one written in part still owes (cvdiag/sinks/losses.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag.sinks.losses import owed, report_lines


def _line(count: int, test_id: str | None) -> bytes:
    return b'{"test_id":"%s","dropped_count":%d}' % ((test_id or "own").encode(), count)


@given(
    count=st.integers(min_value=0, max_value=10_000),
    cut=st.lists(
        st.tuples(st.text("abc-0123", min_size=1, max_size=8), st.integers(1, 99)), max_size=70
    ),
    data=st.data(),
)
def test_the_written_lines_and_the_owed_ones_are_the_report_exactly_once(
    count: int, cut: list[tuple[str, int]], data: st.DataObject
) -> None:
    lines = report_lines(_line, count, cut)
    assert len(lines) == bool(count) + len(cut)
    report = b"".join(b"CVDIAG " + line + b"\n" for line in lines)
    went = data.draw(st.integers(min_value=0, max_value=len(lines)), label="lines written")
    rest = b"".join(b"CVDIAG " + line + b"\n" for line in lines[went:])
    still, ids = owed(report, rest, count, cut)
    # What the next report would write, after what went: each line of the first, once.
    again = report_lines(_line, still, ids)
    assert lines[:went] + again == lines


def test_a_line_that_cannot_be_made_fails_the_whole_report() -> None:
    with pytest.raises(ValueError, match="could not be made"):
        report_lines(
            lambda count, test_id: None if test_id == "b" else b"{}", 3, [("a", 1), ("b", 1)]
        )
