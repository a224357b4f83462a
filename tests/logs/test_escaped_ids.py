"""A test id that a JSON writer escapes is still found when it is looked for alone.

One test id is searched for as bytes (``reading.records``), which is fast; but a quote, a
backslash, a slash, a control character or any non-ASCII character may stand in the line as an
escape, so such an id is looked for by parsing every envelope instead. Found while drawing a
hostile log's one test id in ``cvdiag report``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cvdiag.logs.inputs import Inputs
from cvdiag.logs.reading import Malformed, records
from tests.support.stories import Story


def _ignore(problem: Malformed) -> None:
    pass


@pytest.mark.parametrize(
    "test_id",
    ['say "hi"', "back\\slash", "a/b", "esc\x1b[31m", "caf\u00e9", "rtl\u202e", "plain-1"],
)
def test_one_escaped_test_id_is_found(tmp_path: Path, test_id: str) -> None:
    story = Story(test_id)
    story.ingress()
    other = Story("someone-else")
    other.ingress()
    log = tmp_path / "app.log"
    # ensure_ascii writes every non-ASCII character as an escape, as many writers do.
    lines = [f"CVDIAG {json.dumps(env)}" for env in story.envelopes + other.envelopes]
    log.write_text("\n".join(lines) + "\n")
    with Inputs([str(log)]) as inputs:
        found = [r.envelope["test_id"] for r in records(inputs[0], _ignore, test_id=test_id)]
    assert found == [test_id]
