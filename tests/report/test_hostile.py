"""``cvdiag report`` on logs from scenarios the project has not seen, on big logs, and on logs
real servers wrote.

Each odd log must give a page (exit 0) listing the test ids it holds, each drawn one with the
class ``cvdiag classify`` gives it. Big logs must give pages within their bound, their long runs
folded with the count of what was folded. The demo's log gives the demo's own classes.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from cvdiag.cli.demo import DEMO_FIRST_TOKEN_TIMEOUT, SCENARIOS
from cvdiag.cli.demo import run as run_demo
from cvdiag.report import page
from cvdiag.report.story import HEAD, KEEP, TAIL
from tests.support.cli import cvdiag
from tests.support.report import Page, classify, envelope, line, report, write

Envelopes = list[dict[str, Any]]


def _default_tier() -> Envelopes:
    """Only what the default tier writes: no ingress, no first byte, no LLM call."""
    return [
        envelope("dflt", "backend.agent.enter", 1, "a", "r", {"agent_name": "x"}),
        envelope("dflt", "backend.error.caught", 2, "e", "a", {"exception_type": "ValueError"}),
        envelope("dflt", "backend.agent.exit", 3, "x", "r", {"terminal_outcome": "error"}),
        envelope(
            "dflt",
            "backend.response.complete",
            4,
            "c",
            "r",
            {"http_status": 500},
            outcome="err",
            duration_ms=4,
        ),
    ]


def _unpaired() -> Envelopes:
    """An agent exit without its enter, a response without its start, a terminal first."""
    return [
        envelope("unpaired", "backend.sse.aborted", 0, "ab", "r", {"termination_kind": "rst"}),
        envelope("unpaired", "backend.request.ingress", 1, "r", None, {}),
        envelope("unpaired", "backend.agent.exit", 2, "x", "r", {}, duration_ms=9),
        envelope("unpaired", "backend.llm.call.response", 3, "lr", "gone", {}, outcome="err"),
        envelope("unpaired", "backend.response.complete", 4, "c", "r", {"http_status": 200}),
        envelope("unpaired", "backend.response.complete", 5, "c2", "r", {"http_status": 502}),
    ]


def _loops() -> Envelopes:
    """Spans that are their own parent, and spans in a circle."""
    return [
        envelope("loops", "backend.request.ingress", 0, "r", "r", {}),
        envelope("loops", "backend.agent.enter", 1, "a", "b", {}),
        envelope("loops", "backend.agent.enter", 2, "b", "a", {}),
        envelope("loops", "backend.llm.call.start", 3, "c", "c", {}),
        envelope("loops", "backend.llm.call.response", 4, "c", "c", {}, outcome="err"),
        envelope("loops", "backend.error.caught", 5, "e", "e", {}, outcome="err"),
        envelope("loops", "backend.response.complete", 6, "r", "r", {"http_status": 500}),
    ]


def _deep() -> Envelopes:
    """Agent scopes nested 10 000 deep."""
    out = [envelope("deep", "backend.request.ingress", 0, "s-1", None, {})]
    for n in range(10_000):
        out.append(envelope("deep", "backend.agent.enter", 1 + n / 100, f"s{n}", f"s{n - 1}", {}))
    out.append(envelope("deep", "backend.sse.aborted", 200, "t", "s9999", {}, outcome="err"))
    return out


def _hosts() -> Envelopes:
    """One test id written by three hosts: their ``mono_ns`` unrelated, their clocks apart."""
    out = [envelope("hosts", "backend.request.ingress", 0, "r", None, {})]
    for host, (skew_ms, mono) in enumerate([(-4000, 5), (70_000, 2**62), (0, -(2**63))]):
        env = envelope("hosts", "backend.llm.call.start", 10 + skew_ms, f"c{host}", "r", {})
        env["mono_ns"] = mono
        out.append(env)
    out.append(envelope("hosts", "backend.response.complete", 20, "d", "r", {"http_status": 200}))
    return out


def _open_call() -> Envelopes:
    """An LLM call that never ends: heartbeats, then the client leaves."""
    out = [
        envelope("open-call", "backend.request.ingress", 0, "r", None, {}),
        envelope("open-call", "backend.llm.call.start", 1, "c", "r", {"provider": "p"}),
    ]
    for n in range(1, 40):
        meta = {"elapsed_ms_since_start": n * 1000}
        out.append(
            envelope("open-call", "backend.llm.call.heartbeat", n * 1000, f"h{n}", "c", meta)
        )
    gone = {"termination_kind": "rst", "bytes_before_abort": 0}
    out.append(envelope("open-call", "backend.sse.aborted", 40_000, "ab", "r", gone, outcome="err"))
    return out


def _accounting() -> Envelopes:
    """A test id with only cvdiag.* accounting envelopes (not a story), and one with a story."""
    return [
        envelope("books", "cvdiag.queue_dropped", 0, "q", None, {"dropped_count": 3}),
        envelope("books", "cvdiag.purge_audit", 1, "p", None, {"reason": "x"}),
        envelope("told", "backend.request.ingress", 2, "r", None, {}),
        envelope("told", "backend.response.complete", 3, "c", "r", {"http_status": 503}),
    ]


def _extended() -> Envelopes:
    """Boundaries, fields and metadata from a newer writer: unknown, nested, at JSON's edges."""
    meta = {
        "nested": {"a": [1, [2, [3, {"b": None}]]], "c": {"d": {"e": {}}}},
        "huge": 1.7976931348623157e308,
        "tiny": -5e-324,
        "big_int": 18446744073709551615,
        "small_int": -(2**63),
        "empty": "",
        "bool": True,
    }
    return [
        envelope("ext", "backend.request.ingress", 0, "r", None, meta, schema_version=2, extra=[1]),
        envelope("ext", "backend.tool.invoke", 1, "t", "r", meta, outcome="maybe"),
        envelope("ext", "frontend.click", 2, "f", None, meta, layer="frontend"),
        envelope("ext", "backend.response.complete", 3, "c", "r", meta, outcome="err"),
    ]


ODD: dict[str, tuple[Callable[[], Envelopes], set[str]]] = {
    "default tier": (_default_tier, {"dflt"}),
    "unpaired": (_unpaired, {"unpaired"}),
    "loops": (_loops, {"loops"}),
    "deep": (_deep, {"deep"}),
    "hosts": (_hosts, {"hosts"}),
    "open call": (_open_call, {"open-call"}),
    "accounting": (_accounting, {"told"}),
    "extended": (_extended, {"ext"}),
}


def _assert_listed_as_classified(parsed: Page, logs: list[Path], ids: set[str]) -> None:
    assert set(parsed.rows) == ids
    for test_id in ids:
        flap_class = classify(test_id, logs)
        assert parsed.rows[test_id] == flap_class
        assert parsed.section_of(test_id).flap_class == flap_class


@pytest.mark.parametrize("name", sorted(ODD))
def test_an_odd_log_gives_a_page_with_classifys_classes(tmp_path: Path, name: str) -> None:
    build, ids = ODD[name]
    log = write(tmp_path / "odd.log", build())
    parsed = report(log, tmp_path / "odd.html", "--all")
    _assert_listed_as_classified(parsed, [log], ids)


def test_every_odd_log_at_once_in_several_files_gzip_and_cri(tmp_path: Path) -> None:
    """All the odd logs together: split over plain files, a gzip file and a CRI file, whose
    lines a Kubernetes runtime prefixed (and cut in parts, for a long one)."""
    plain: Envelopes = []
    zipped: Envelopes = []
    cri: Envelopes = []
    for index, name in enumerate(sorted(ODD)):
        [plain, zipped, cri][index % 3].extend(ODD[name][0]())
    first = write(tmp_path / "a.log", plain)
    second = tmp_path / "b.log.gz"
    second.write_bytes(gzip.compress(b"".join(map(line, zipped))))
    third = tmp_path / "c.log"
    with third.open("wb") as out:
        for env in cri:
            text = line(env)[:-1]
            stamp = b"2026-11-22T03:00:00.000000001Z stdout "
            if len(text) > 200:  # long: cut in parts, as the runtime cuts past 16 KiB
                out.write(stamp + b"P " + text[:100] + b"\n")
                out.write(b"2026-11-22T03:00:00.000000002Z stderr F other stream\n")
                out.write(stamp + b"F " + text[100:] + b"\n")
            else:
                out.write(stamp + b"F " + text + b"\n")
    logs = [first, second, third]
    parsed = report(logs, tmp_path / "all.html", "--all")
    _assert_listed_as_classified(parsed, logs, set().union(*(ids for _, ids in ODD.values())))


def test_stdin_gives_the_page_a_file_gives(tmp_path: Path) -> None:
    log = write(tmp_path / "odd.log", _unpaired() + _loops())
    from_file = report(log, tmp_path / "file.html")
    done = cvdiag("report", "-o", "-", "-", stdin=log.read_bytes())
    assert done.returncode == 0, done.stderr
    from_stdin = Page(done.stdout)
    assert from_stdin.rows == from_file.rows
    assert from_stdin.drawn == from_file.drawn
    assert "stdin" in done.stdout


# --- big logs ---------------------------------------------------------------------------------


def _folded_counts(section_rows: list[str]) -> dict[str, int]:
    out = {}
    for text in section_rows:
        found = re.search(r"… (\d+) more (\S+) until", text)
        assert found, text
        out[found.group(2)] = int(found.group(1))
    return out


def test_a_test_id_with_200_000_events_is_a_small_page_its_runs_folded(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    events, beats, others = 200_000, 5_000, 2_000
    dumps = orjson.dumps
    with log.open("wb") as out:
        out.write(line(envelope("long", "backend.request.ingress", 0, "r", None, {})))
        out.write(line(envelope("long", "backend.llm.call.start", 0, "c", "r", {})))
        for n in range(others - 3):
            out.write(line(envelope("long", "backend.tool.step", n / 10, f"o{n}", "r", {"n": n})))
        beat = envelope("long", "backend.llm.call.heartbeat", 0, "h", "c", {})
        for n in range(beats):
            beat["span_id"], beat["mono_ns"] = f"h{n}", 10**12 + n * 10**9
            beat["ts"] = f"2026-11-22T03:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
            out.write(b"CVDIAG " + dumps(beat) + b"\n")
        event = envelope("long", "backend.sse.event", 0, "e", "r", {"event_type": "delta"})
        for n in range(events):
            event["span_id"], event["mono_ns"] = f"e{n}", 10**12 + n * 10**7
            event["ts"] = f"2026-11-22T03:{n // 6000 % 60:02d}:{n // 100 % 60:02d}.000Z"
            out.write(b"CVDIAG " + dumps(event) + b"\n")
        meta = {"termination_kind": "rst"}
        out.write(line(envelope("long", "backend.sse.aborted", 4e6, "x", "r", meta, outcome="err")))
    parsed = report(log, tmp_path / "long.html")
    size = len(parsed.source.encode())
    assert size <= page.bound(drawn=1, sources=len(str(log)))
    assert size < 2 * 2**20  # real envelopes: far below the bound at the widest
    section = parsed.section_of("long")
    assert _folded_counts(section.folded) == {
        "backend.sse.event": events - HEAD - TAIL,
        "backend.llm.call.heartbeat": beats - HEAD - TAIL,
    }
    assert f"{others - KEEP} more envelope(s) not shown" in parsed.source
    assert parsed.section_of("long").lanes == ["k-request", "k-call"]


def test_a_log_of_6_000_test_ids_past_the_spill_lists_2000_and_draws_50(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More test ids than the page lists, and than the reader keeps in memory: ``SPILL_AT``
    (50,000) shrunk to 2,500, so that 6,000 test ids take the same road to the page as a log of
    100,000 does, in a tenth of the time."""
    from cvdiag.logs import folded
    from cvdiag.report.gather import MAX_DETAILS, MAX_ROWS

    monkeypatch.setattr(folded, "SPILL_AT", 2_500)
    log = tmp_path / "many.log"
    ingress = envelope("", "backend.request.ingress", 0, "r", None, {"path": "/chat"})
    done = envelope("", "backend.response.complete", 1, "c", "r", {}, duration_ms=1)
    with log.open("wb") as out:
        for n in range(6_000):
            ingress["test_id"] = done["test_id"] = f"many-{n:06d}-{'<' * 40}"
            failed = n % 3 != 0
            done["metadata"]["http_status"] = 500 if failed else 200
            done["outcome"] = "err" if failed else "ok"
            out.write(line(ingress) + line(done))
    parsed = report(log, tmp_path / "many.html")
    assert len(parsed.rows) == MAX_ROWS
    assert len(parsed.sections) == MAX_DETAILS
    assert set(parsed.rows.values()) == {"unclassified"}  # failed ones first
    size = len(parsed.source.encode())
    assert size <= page.bound(sources=len(str(log)))
    assert size < 8 * 2**20
    assert "4000 more test id(s) not listed" in parsed.source
    assert "3950 test id(s) listed but not drawn" in parsed.source


# --- logs real servers wrote ------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's log: its example backend served by a real uvicorn server, written by the
    middleware through a ``FileSink``."""
    log = tmp_path_factory.mktemp("demo") / "demo.log"
    assert run_demo(out=io.StringIO(), log=str(log), report=None) == 0
    return log


def test_the_demos_page_has_the_demos_classes(demo_log: Path, tmp_path: Path) -> None:
    timeout = ("--first-token-timeout", f"{DEMO_FIRST_TOKEN_TIMEOUT:g}")
    parsed = report(demo_log, tmp_path / "demo.html", *timeout)
    expected = {scenario.test_id: scenario.expected for scenario in SCENARIOS}
    assert parsed.rows == expected
    drawn = {test_id for test_id, flap_class in expected.items() if flap_class != "healthy"}
    assert set(parsed.drawn) == drawn
    for test_id in expected:
        assert classify(test_id, demo_log, *timeout) == expected[test_id]
    for test_id in drawn:
        assert parsed.section_of(test_id).flap_class == expected[test_id]
    everything = report(demo_log, tmp_path / "all.html", "--all", *timeout)
    assert set(everything.drawn) == set(expected)


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log tests/cli/test_real.py's app writes behind a real uvicorn server: every scenario."""
    from tests.cli.test_real import write_backend_log

    return write_backend_log(tmp_path_factory.mktemp("real") / "backend.log")


def test_a_real_servers_log_gives_classifys_classes(real_log: Path, tmp_path: Path) -> None:
    from tests.cli.test_real import EXPECTED

    parsed = report(real_log, tmp_path / "real.html", "--all")
    assert set(parsed.rows) == set(EXPECTED)
    for test_id in EXPECTED:
        assert parsed.rows[test_id] == classify(test_id, real_log)
        assert parsed.section_of(test_id).flap_class == parsed.rows[test_id]
