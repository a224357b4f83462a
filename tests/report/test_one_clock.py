"""One clock on the report's page: every offset of a section from the same origin, the start of
the test id's first request, as ``cvdiag classify`` counts (at the default tier, with no ingress,
the terminal's ``duration_ms`` back from it). The reason, the evidence, the envelope table and
the waterfall read the same time for the same envelope."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.report import envelope, report, write


def _section_text(page_source: str, test_id: str) -> str:
    start = page_source.index(f'aria-label="{test_id}"')
    return page_source[start : page_source.index("</section>", start)]


@pytest.mark.parametrize("lasted", [2040, 35])
def test_a_default_tier_abort_reads_one_time_everywhere(tmp_path: Path, lasted: int) -> None:
    log = write(
        tmp_path / "backend.log",
        [
            envelope(
                "t-clock",
                "backend.sse.aborted",
                0,
                "00000000000000a1",
                None,
                {
                    "termination_kind": "rst",
                    "bytes_before_abort": 243,
                    "termination_cause": "client_disconnect",
                },
                outcome="err",
                duration_ms=lasted,
            )
        ],
    )
    page = report(log, tmp_path / "report.html")
    html = _section_text(page.source, "t-clock")
    assert page.section_of("t-clock").flap_class == "client-abort"
    assert f"at +{lasted} ms" in html  # the reason
    assert f"+{lasted}.0 ms" in html  # the evidence's envelope
    assert re.search(rf'<td class="n">\+{lasted}\.0</td>', html)  # the table
    origin = re.search(r'data-origin="([^"]+)"', html)
    assert origin is not None
    assert float(origin.group(1)) == 0.0  # the request's bar starts at the origin, not before it
