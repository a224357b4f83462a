"""Issue 27: what the commands print must not mislead. On logs written by a real instrumented
uvicorn server (httpx clients, the commands run as subprocesses), and a property test of the
replay drawing over random span trees:

- ``replay`` lists rows in time order (a streaming call's response after the first byte its
  tokens made), keeping the tree: each row hangs under the row its indentation says, or names it;
- ``classify`` prints an empty list as ``none``, never as nothing;
- a cancelled LLM call did not answer (``llm_call.answered``);
- ``stats``' total duration counts the aborted requests, and says how many there were;
- ``ls`` marks a class that carries ``classify``'s caveat.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag import (
    CvdiagMiddleware,
    FileSink,
    MemorySink,
    Settings,
    Tier,
    agent_scope,
    configure,
    flush,
    llm_call,
)
from cvdiag.diagnosis import timeline
from cvdiag.logs.reading import Input, Record, records
from tests.support.cli import cvdiag
from tests.support.servers import serve_uvicorn
from tests.support.stories import Story

TOKENS = ["Hello", ",", " world", "!", " How", " are", " you", "?"]


class InternalServerError(Exception):
    """Named as the SDKs name a provider's 5xx: ``vocabulary.error_kind`` says ``failed``."""


def _frame(token: str) -> str:
    return f"event: TEXT_MESSAGE_CONTENT\ndata: {json.dumps({'delta': token})}\n\n"


async def chat(request: Request) -> Response:
    mode = request.query_params.get("mode", "ok")
    if mode == "provider":
        async with (
            agent_scope("chat-agent", model_id="fake-1"),
            llm_call("fake", "fake-1", prompt_token_count_estimate=7),
        ):
            raise InternalServerError("HTTP 500 from the provider")

    async def stream() -> AsyncIterator[str]:
        async with (
            agent_scope("chat-agent", model_id="fake-1"),
            llm_call("fake", "fake-1", prompt_token_count_estimate=7, heartbeat_interval=0.1) as c,
        ):
            if mode == "hang":
                await asyncio.sleep(30)  # the client gives up: the call is cancelled
            # A streaming call: its tokens reach the client while the call is open, so the
            # first byte is written long before the call's response envelope.
            for token in TOKENS:
                yield _frame(token)
                await asyncio.sleep(0.02)
            c.record_response(len(TOKENS))

    return StreamingResponse(stream(), media_type="text/event-stream")


def _app() -> Starlette:
    app = Starlette(routes=[Route("/chat", chat, methods=["POST"])])
    app.add_middleware(CvdiagMiddleware, slug="chat")
    return app


def _drive(base: str) -> None:
    with httpx.Client(base_url=base, timeout=10) as client:
        for test_id, mode in (("truth-stream", "ok"), ("truth-provider", "provider")):
            client.post(f"/chat?mode={mode}", headers={"x-test-id": test_id}, json={})
    timeout = httpx.Timeout(10, read=0.5)
    with httpx.Client(base_url=base, timeout=timeout) as client, pytest.raises(httpx.ReadTimeout):
        client.post("/chat?mode=hang", headers={"x-test-id": "truth-stalled"}, json={})


def _written(tier: Tier, path: Path) -> Path:
    memory = MemorySink()
    configure(Settings(enabled=True, tier=tier), sinks=[FileSink(path), memory])
    try:
        with serve_uvicorn(_app()) as base:
            _drive(base)
            # The server ends the stalled request after its client left: wait for its end.
            deadline = time.monotonic() + 10
            while not any(
                e["test_id"] == "truth-stalled" and e["boundary"] == "backend.agent.exit"
                for e in list(memory.envelopes)
            ):
                assert time.monotonic() < deadline, "the stalled request never ended"
                time.sleep(0.05)
        flush()
    finally:
        configure(Settings(), sinks=[MemorySink()])
    return path


@pytest.fixture(scope="module")
def verbose_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _written(Tier.DEBUG, tmp_path_factory.mktemp("truths") / "debug.log")


@pytest.fixture(scope="module")
def default_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _written(Tier.DEFAULT, tmp_path_factory.mktemp("truths") / "default.log")


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# --- 1. replay in time order ----------------------------------------------------------------

_ROW = re.compile(r"^ *(?P<offset>\d+\.\d) {2}(?P<lead>[│├└─ ]*)(?P<rest>\S.*)$")


def _table(lines: list[str]) -> list[tuple[float, int, str]]:
    """``(offset, depth, text after the label's drawing)`` of each row under the titles."""
    rows = []
    for line in lines[3:]:
        match = _ROW.match(line)
        assert match is not None, line
        rows.append((float(match["offset"]), len(match["lead"]) // 3, match["rest"]))
    return rows


def test_replay_lists_a_streaming_call_in_time_order(verbose_log: Path) -> None:
    text = _ok(cvdiag("replay", "truth-stream", str(verbose_log))).splitlines()
    rows = _table(text)
    offsets = [offset for offset, _, _ in rows]
    assert offsets == sorted(offsets), "\n".join(text)
    names = [rest.split()[0] for _, _, rest in rows]
    assert names.index("backend.sse.first_byte") < names.index("backend.llm.call.response")
    # The tree is kept: the response is still drawn under its call, the nearest row above it
    # one level less deep, with no "(under …)" needed.
    response = names.index("backend.llm.call.response")
    depth = rows[response][1]
    parent = next(r for r in reversed(rows[:response]) if r[1] == depth - 1)
    assert parent[2].startswith("backend.llm.call.start"), "\n".join(text)
    assert "(under " not in rows[response][2]
    events = json.loads(_ok(cvdiag("replay", "truth-stream", str(verbose_log), "--json")))
    json_offsets = [e["offset_ms"] for e in events["events"]]
    assert json_offsets == sorted(json_offsets)


def _story(draw: st.DrawFn) -> Story:
    """A test id of random envelopes: spans from a small pool (so envelopes share spans), each
    with a random parent — none, one not in the log, a later one, itself, a cycle — at random
    offsets, SSE events among them so that runs get folded."""
    story = Story("prop", mono0=draw(st.integers(10**9, 10**13)))
    pool = [f"{i:016x}" for i in range(1, draw(st.integers(1, 6)) + 1)]
    parents = st.one_of(st.none(), st.just("ffffffffffffffff"), st.sampled_from(pool))
    boundaries = st.sampled_from(
        ["backend.sse.event"] * 4
        + ["backend.agent.enter", "backend.llm.call.start", "backend.llm.call.heartbeat"]
    )
    for _ in range(draw(st.integers(1, 40))):
        story.emit(
            draw(boundaries),
            draw(st.floats(0, 5_000, allow_nan=False).map(lambda v: round(v, 3))),
            span_id=draw(st.sampled_from(pool)),
            parent=draw(parents),
            duration_ms=draw(st.one_of(st.none(), st.integers(0, 3_000))),
        )
    return story


def _records(story: Story) -> list[Record]:
    data = ("\n".join(story.lines()) + "\n").encode()
    return sorted(records(Input("log", io.BytesIO(data)), print), key=lambda r: r.key)


@settings(max_examples=300, deadline=None)
@given(st.composite(_story)())
def test_replay_rows_never_go_back_in_time_and_keep_the_tree(story: Story) -> None:
    line = timeline.build("prop", _records(story))
    rows = _table(timeline.render(line))
    offsets = [offset for offset, _, _ in rows]
    assert offsets == sorted(offsets)
    json_offsets = [e["offset_ms"] for e in timeline.to_json(line)["events"]]
    assert json_offsets == sorted(json_offsets)
    # Every envelope is a row or counted in a folded one (folded events stand together: no
    # other row between them), each row is drawn at its depth, and it hangs under the nearest
    # row above one level less deep or says which row it is under.
    parent = {id(c): e for e in line.events for c in e.children}
    events = iter(line.events)
    above: dict[int, timeline.Event] = {}
    for offset, depth, rest in rows:
        if rest.startswith("… "):
            for _ in range(int(rest.split()[1])):
                folded = next(events)
                assert folded.envelope["boundary"] == "backend.sse.event"
                assert folded.depth == depth
            continue
        event = next(events)
        assert (round(event.offset_ms, 1), event.depth) == (offset, depth)
        assert rest.startswith(event.envelope["boundary"])
        up = parent.get(id(event))
        if up is not None:
            named = f"(under {up.envelope['boundary']} at {up.offset_ms:.1f} ms)"
            assert named in rest or above.get(depth - 1) is up
        above[depth] = event
    assert next(events, None) is None


# --- 2 and 3. classify: empty lists, a cancelled call -------------------------------------


def test_classify_prints_an_empty_list_as_none(verbose_log: Path) -> None:
    verdict = json.loads(_ok(cvdiag("classify", "truth-provider", str(verbose_log), "--json")))
    assert verdict["flap_class"] == "provider-error", verdict
    assert verdict["evidence"]["error_events"] == []
    text = _ok(cvdiag("classify", "truth-provider", str(verbose_log)))
    assert "error_events=none" in text
    assert not re.search(r"=(\s|$)", text), text


def test_a_cancelled_call_did_not_answer(verbose_log: Path) -> None:
    verdict = json.loads(_ok(cvdiag("classify", "truth-stalled", str(verbose_log), "--json")))
    call = verdict["evidence"]["llm_call"]
    assert call["error_class"] == "CancelledError", call
    assert call["answered"] is False
    text = _ok(cvdiag("classify", "truth-stalled", str(verbose_log)))
    assert "llm_call.answered=False" in text
    healthy = json.loads(_ok(cvdiag("classify", "truth-stream", str(verbose_log), "--json")))
    assert healthy["flap_class"] == "healthy"


# --- 4. stats: the aborted requests' durations -------------------------------------------


@pytest.mark.parametrize("tier", ["verbose", "default"])
def test_stats_total_duration_counts_the_aborted_requests(
    tier: str, verbose_log: Path, default_log: Path
) -> None:
    log = verbose_log if tier == "verbose" else default_log
    overall = json.loads(_ok(cvdiag("stats", str(log), "--json")))["overall"]
    total = overall["total_duration_ms"]
    assert overall["aborted"]["count"] == 1
    assert total["count"] == overall["requests"] == 3  # every request that ended
    assert total["aborted"] == 1
    assert total["p99"] >= 500  # the stalled request, aborted after the client's 0.5 s
    text = _ok(cvdiag("stats", str(log)))
    assert re.search(r"total duration .*\(n=3, 1 aborted\)", text), text


# --- 5. ls: a class with a caveat -----------------------------------------------------------


def _ls_rows(log: Path) -> Iterator[dict[str, Any]]:
    yield from json.loads(_ok(cvdiag("ls", str(log), "--json")))


def test_ls_marks_a_class_classify_gives_with_a_caveat(default_log: Path) -> None:
    verdict = json.loads(_ok(cvdiag("classify", "truth-stalled", str(default_log), "--json")))
    assert verdict["flap_class"] == "client-abort"
    assert verdict["caveat"] is not None
    assert "stalled-backend" in verdict["caveat"]
    row = next(r for r in _ls_rows(default_log) if r["test_id"] == "truth-stalled")
    assert row["flap_class"] == "client-abort"  # still the class, for filters and scripts
    assert row["caveat"] == verdict["caveat"]
    text = _ok(cvdiag("ls", str(default_log))).splitlines()
    line = next(x for x in text if "truth-stalled" in x)
    assert "client-abort*" in line.split()
    assert text[-1].startswith("* "), text
    assert "cvdiag classify" in text[-1]
    failed = _ok(cvdiag("ls", "--class", "client-abort", str(default_log)))
    assert "truth-stalled" in failed


def test_ls_marks_nothing_when_no_verdict_has_a_caveat(verbose_log: Path) -> None:
    rows = list(_ls_rows(verbose_log))
    assert [r["caveat"] for r in rows] == [None] * len(rows)
    text = _ok(cvdiag("ls", str(verbose_log)))
    assert "*" not in text
