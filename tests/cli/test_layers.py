"""The reading commands over a backend's log and a probe's (issue 45): two files in either
order, and the same lines in one file, tell the same story, the probe's lines on the backend's
clock: ``classify``, ``replay``, ``ls``, ``report``, ``diff``, ``flakes``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cvdiag
from tests.support.client_stories import held_stream, slow_llm
from tests.support.probes import write


@pytest.fixture
def logs(tmp_path: Path) -> dict[str, Path]:
    slow, slow_probe = slow_llm()
    held, held_probe = held_stream()
    calm, calm_probe = held_stream(held=False)
    calm.test_id = "t-calm"
    for env in calm.envelopes:
        env["test_id"] = "t-calm"
    assert calm_probe is not None
    assert slow_probe is not None
    assert held_probe is not None
    for env in calm_probe.envelopes:
        env["test_id"] = env["trace_id"] = "t-calm"
    paths = {
        "backend": tmp_path / "backend.log",
        "probe": tmp_path / "probe.log",
        "one": tmp_path / "one.log",
    }
    write(paths["backend"], slow, held, calm)
    write(paths["probe"], slow_probe, held_probe, calm_probe)
    write(paths["one"], slow_probe, slow, held, held_probe, calm_probe, calm)
    return paths


def _layouts(logs: dict[str, Path]) -> list[list[str]]:
    return [
        [str(logs["backend"]), str(logs["probe"])],
        [str(logs["probe"]), str(logs["backend"])],
        [str(logs["one"])],
    ]


@pytest.mark.parametrize(
    ("test_id", "wanted"),
    [("t-slow-llm", "slow-first-token"), ("t-held", "edge-interference"), ("t-calm", "healthy")],
)
def test_classify_reads_both_layers_in_any_layout(
    logs: dict[str, Path], test_id: str, wanted: str
) -> None:
    for files in _layouts(logs):
        result = cvdiag("classify", test_id, *files, "--json")
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["flap_class"] == wanted, (files, data["reason"])
        assert data["layers"] == ["backend", "probe"]
        assert data["joined"].startswith("aligned")
    text = cvdiag("classify", "t-slow-llm", str(logs["backend"]), str(logs["probe"])).stdout
    assert "\nlayers    backend + probe: aligned" in text
    assert "\ndecided   client_left_ms" in text


def test_backend_alone_is_told_what_it_was(logs: dict[str, Path]) -> None:
    data = json.loads(cvdiag("classify", "t-slow-llm", str(logs["backend"]), "--json").stdout)
    assert data["flap_class"] == "client-abort"
    assert data["layers"] == ["backend"]


def test_replay_reads_the_probe_on_the_backends_clock(logs: dict[str, Path]) -> None:
    """The probe's clock is 3.25 s behind: on its own clock its send would come seconds before
    the ingress; aligned, it comes just before it and its timeout 2 s after."""
    for files in _layouts(logs):
        result = cvdiag("replay", "t-slow-llm", *files, "--json")
        assert result.returncode == 0, result.stderr
        events = json.loads(result.stdout)["events"]
        order = [e["boundary"] for e in events]
        assert order.index("probe.message.send") < order.index("backend.request.ingress")
        assert order.index("probe.network.error") < order.index("backend.llm.call.response")
        offsets = {e["boundary"]: e["offset_ms"] for e in events}
        gap = offsets["probe.network.error"] - offsets["probe.message.send"]
        assert gap == pytest.approx(2000, abs=2)
        assert offsets["backend.request.ingress"] - offsets["probe.message.send"] < 5


def test_ls_lists_each_test_id_once_with_its_class(logs: dict[str, Path]) -> None:
    for files in _layouts(logs):
        result = cvdiag("ls", *files, "--json")
        assert result.returncode in (0, 1), result.stderr
        listed = json.loads(result.stdout)
        assert {row["slug"] for row in listed} == {"chat"}  # the backend's, not the probe's
        rows = {row["test_id"]: row["flap_class"] for row in listed}
        assert rows == {
            "t-slow-llm": "slow-first-token",
            "t-held": "edge-interference",
            "t-calm": "healthy",
        }


def test_report_draws_both_layers(logs: dict[str, Path], tmp_path: Path) -> None:
    for number, files in enumerate(_layouts(logs)):
        page = tmp_path / f"page{number}.html"
        result = cvdiag("report", *files, "-o", str(page))
        assert result.returncode in (0, 1), result.stderr
        html = page.read_text()
        assert "slow-first-token" in html
        assert "edge-interference" in html
        assert "probe.network.error" in html


def test_diff_says_when_the_client_left(logs: dict[str, Path]) -> None:
    result = cvdiag("diff", "t-calm", "t-held", str(logs["backend"]), str(logs["probe"]), "--json")
    assert result.returncode in (0, 1), result.stderr
    json.loads(result.stdout)


def test_flakes_reads_both_layers(logs: dict[str, Path]) -> None:
    for files in _layouts(logs):
        result = cvdiag("flakes", *files, "--json")
        assert result.returncode in (0, 1), result.stderr
        text = result.stdout
        assert "slow-first-token" in text


def _junit(path: Path) -> Path:
    """Playwright's JUnit for two attempts of one test: the first timed out on the client's
    side (its request's own 2 s timeout), the retry passed."""
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="chat.spec.ts"'
        ' tests="1"><testcase name="chat answers" classname="chat.spec.ts" time="2.1">'
        '<failure message="apiRequestContext.post: Timeout 2000ms exceeded." type="FAILURE">'
        "<![CDATA[Error: apiRequestContext.post: Timeout 2000ms exceeded.\nCall log:\n"
        "  - → POST http://127.0.0.1:8000/chat]]></failure>"
        "<system-out><![CDATA[cvdiag-test-id: t-slow-llm\n]]></system-out>"
        '<flakyFailure message="x" type="FAILURE"><stackTrace>x</stackTrace></flakyFailure>'
        '</testcase><testcase name="calm" classname="chat.spec.ts" time="0.9">'
        "<system-out><![CDATA[cvdiag-test-id: t-calm\n]]></system-out></testcase>"
        "</testsuite></testsuites>",
        encoding="utf-8",
    )
    return path


def test_flakes_reads_the_runners_words_without_probe_lines(
    logs: dict[str, Path], tmp_path: Path
) -> None:
    junit = _junit(tmp_path / "results.xml")
    result = cvdiag("flakes", str(logs["backend"]), "--junit", str(junit), "--json")
    assert result.returncode == 0, result.stderr
    causes = [c["flap_class"] for t in json.loads(result.stdout) for c in t["causes"]]
    assert causes == ["slow-first-token"]
    # without the JUnit, the backend's lines alone
    alone = cvdiag("flakes", str(logs["backend"]), "--json")
    assert "slow-first-token" not in alone.stdout


def test_report_reads_the_runners_words(logs: dict[str, Path], tmp_path: Path) -> None:
    junit = _junit(tmp_path / "results.xml")
    page = tmp_path / "page.html"
    result = cvdiag("report", str(logs["backend"]), "--junit", str(junit), "-o", str(page))
    assert result.returncode in (0, 1), result.stderr
    html = page.read_text()
    assert "slow-first-token" in html
    assert "the runner&#x27;s JUnit says the client timed out after 2000 ms" in html or (
        "the runner's JUnit says the client timed out after 2000 ms" in html
    )


def test_diff_says_when_the_client_left_by_its_own_side(
    logs: dict[str, Path], tmp_path: Path
) -> None:
    """The backend found its client gone at +4123 ms; the client left at +2000 ms."""
    backend, probe = str(logs["backend"]), str(logs["probe"])
    junit = str(_junit(tmp_path / "r.xml"))
    for words in (
        ["t-calm", "t-slow-llm", backend, probe],  # a log right after another: one story
        ["calm", "chat answers", backend, "--junit", junit],  # the runner's words
    ):
        result = cvdiag("diff", *words)
        assert result.returncode == 1, result.stderr
        assert "the client left at +2000ms" in result.stdout, result.stdout
        # the client's side of each request is a point of the story
        shown = (
            "client POST /chat #1 end  client_end: complete → client-timeout"
            if probe in words
            else "client POST /chat #1 end  only in one: false → true"
        )
        assert shown in result.stdout, result.stdout
    alone = cvdiag("diff", "t-calm", "t-slow-llm", backend)
    assert "the client left at +4123ms" in alone.stdout


def _renamed(test_id: str, *writers: object) -> None:
    for writer in writers:
        for env in writer.envelopes:  # type: ignore[attr-defined]
            env["test_id"] = env["trace_id"] = test_id


def test_flakes_separates_on_the_clients_timeout(tmp_path: Path) -> None:
    """Four failures whose client's 2 s timeout ran out, against four passes: said as the fact
    that separates them, from the probe's lines in a file of their own."""
    backends: list[object] = []
    probes: list[object] = []
    for run in range(4):
        slow, slow_probe = slow_llm()
        calm, calm_probe = held_stream(held=False)
        _renamed(f"t-chat-run{run}", slow, slow_probe)
        _renamed(f"t-chat-try{run}", calm, calm_probe)
        backends += [slow, calm]
        probes += [slow_probe, calm_probe]
    write(tmp_path / "backend.log", *backends)  # type: ignore[arg-type]
    write(tmp_path / "probe.log", *probes)  # type: ignore[arg-type]
    result = cvdiag("flakes", str(tmp_path / "backend.log"), str(tmp_path / "probe.log"))
    assert result.returncode == 0, result.stderr
    assert "4 slow-first-token" in result.stdout
    assert (
        "separates: the client's 2,000 ms timeout was reached (in 4 of 4 failures, 0 of 4"
        " passes)" in result.stdout
    ), result.stdout
