"""The saved Playwright run (tests/data/playwright-*): what readers of probe lines test against
is what the fixture really writes, whole and valid, joined to its backend and its JUnit."""

from __future__ import annotations

import json
from typing import Any

from cvdiag.runs import read_junit
from tests.conftest import REFERENCE
from tests.probe.test_playwright import EXTENSIONS, _validators


def _lines(name: str) -> list[dict[str, Any]]:
    text = (REFERENCE / name).read_text(encoding="utf-8")
    return [json.loads(line[7:]) for line in text.splitlines() if line.startswith("CVDIAG {")]


def test_the_sample_is_valid_and_each_layer_tells_the_same_test_ids() -> None:
    probe, backend = _lines("playwright-probe.log"), _lines("playwright-backend.log")
    reference, packaged = _validators()
    v1_keys = json.loads((REFERENCE / "cvdiag-schema-v1.json").read_text())["$defs"][
        "boundary_metadata_keys"
    ]
    for line in probe:
        assert not list(reference.iter_errors(line))
        assert not list(packaged.iter_errors(line))
        allowed = set(v1_keys[line["boundary"]]) | EXTENSIONS.get(line["boundary"], set())
        assert set(line["metadata"]) <= allowed, line
    assert {line["layer"] for line in probe} == {"probe"}
    assert {line["layer"] for line in backend} == {"backend"}
    probe_ids = {line["test_id"] for line in probe}
    assert len(probe_ids) == 7
    assert probe_ids <= {line["test_id"] for line in backend}
    cases = read_junit(str(REFERENCE / "playwright-results.xml"))
    assert probe_ids == {i for case in cases for attempt in case.attempts for i in attempt.test_ids}
    causes = {line["metadata"].get("cause") for line in probe}
    assert {"client-timeout", "left-early"} <= causes
