"""The report's waterfall draws what the client saw (issue 45): a lane per request the probe
sent, on the backend's time axis, its own timeout marked; with no probe lines, no such lane."""

from __future__ import annotations

from pathlib import Path

import pytest

from cvdiag.report import gather
from cvdiag.report.lanes import build
from tests.support.client_stories import held_stream, slow_llm
from tests.support.probes import write


@pytest.mark.parametrize("layout", ["one log", "two files"])
def test_the_clients_lane_stands_on_the_backends_clock(tmp_path: Path, layout: str) -> None:
    story, probe = slow_llm()
    assert probe is not None
    if layout == "one log":
        write(tmp_path / "one.log", probe, story)
        files = [str(tmp_path / "one.log")]
    else:
        write(tmp_path / "backend.log", story)
        write(tmp_path / "probe.log", probe)
        files = [str(tmp_path / "probe.log"), str(tmp_path / "backend.log")]
    report = gather(files)
    drawn = report.stories[0]
    assert drawn.verdict.flap_class == "slow-first-token"
    waterfall = build(drawn)
    client = [lane for lane in waterfall.lanes if lane.kind == "client"]
    assert [lane.label for lane in client] == ["the test (its probe)", "client POST /chat"]
    request = client[1]
    # sent just before the backend's ingress (its clock is 3.25 s behind: aligned, not raw)
    assert request.start == pytest.approx(-1, abs=2)
    assert request.outcome == "timeout"
    timeout = [mark for mark in request.marks if mark.kind == "timeout"]
    assert len(timeout) == 1
    assert timeout[0].at == pytest.approx(1999, abs=3)
    assert timeout[0].label == "the client's 2,000 ms timeout"
    call = next(lane for lane in waterfall.lanes if lane.kind == "call")
    assert call.end is not None
    assert call.end > timeout[0].at


def test_the_held_streams_client_lane_shows_its_late_first_event(tmp_path: Path) -> None:
    story, probe = held_stream()
    assert probe is not None
    write(tmp_path / "backend.log", story)
    write(tmp_path / "probe.log", probe)
    report = gather([str(tmp_path / "backend.log"), str(tmp_path / "probe.log")])
    waterfall = build(report.stories[0])
    request = next(lane for lane in waterfall.lanes if lane.label == "client POST /chat")
    backend = next(lane for lane in waterfall.lanes if lane.kind == "request")
    assert backend.first is not None
    assert request.first is not None
    assert request.first - backend.first == pytest.approx(792, abs=8)


def test_no_probe_no_client_lane(tmp_path: Path) -> None:
    story, _ = slow_llm()
    write(tmp_path / "backend.log", story)
    waterfall = build(gather([str(tmp_path / "backend.log")]).stories[0])
    assert not [lane for lane in waterfall.lanes if lane.kind == "client"]


def test_the_section_says_which_layers_its_class_rests_on(tmp_path: Path) -> None:
    from cvdiag.report import render

    story, probe = slow_llm()
    assert probe is not None
    write(tmp_path / "backend.log", story)
    write(tmp_path / "probe.log", probe)
    page = "".join(render(gather([str(tmp_path / "backend.log"), str(tmp_path / "probe.log")])))
    assert '<p class="layers">layers read: backend + probe: aligned from 1 pair' in page
    alone = "".join(render(gather([str(tmp_path / "backend.log")])))
    assert '<p class="layers">layers read: backend</p>' in alone
