"""What the showcase face does beyond the integrations' own tests: ``dispatch`` with a plain
response and with an app that raises, the flag off, and an emitter configured by hand."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from cvdiag import MemorySink, Settings, configure
from cvdiag.schema.vocabulary import EDGE_HEADER_KEYS
from cvdiag.showcase import CvdiagBackendMiddleware, LlmCallScope, _RequestCtx, emit_agent_enter
from cvdiag.showcase.bootstrap import current_tier, emit_cvdiag, setup

TEST_ID = "0190a9c0-1a2b-7c3d-8e4f-5a6b7c8d9e0f"
EDGE_HEADER_KEYS_SET = set(EDGE_HEADER_KEYS)


def request() -> Request:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/chat",
        "headers": [(b"x-test-id", TEST_ID.encode()), (b"x-aimock-context", b"demo-app")],
        "query_string": b"",
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    return Request(scope, receive)


def written(out: str) -> list[dict[str, Any]]:
    return [json.loads(line[7:]) for line in out.splitlines() if line.startswith("CVDIAG {")]


@pytest.fixture(autouse=True)
def verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVDIAG_BACKEND_EMITTER", "1")
    setup({"CVDIAG_VERBOSE": "1"})


def test_dispatch_of_a_plain_response(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[Any] = []

    async def call_next(req: Request) -> Response:
        seen.append(req.state.cvdiag)
        return JSONResponse({"ok": True})

    mw = CvdiagBackendMiddleware(app=lambda *a: None)
    response = asyncio.run(mw.dispatch(request(), call_next))
    assert response.status_code == 200
    assert (seen[0].test_id, seen[0].slug, seen[0].demo) == (TEST_ID, "demo-app", "chat")
    lines = written(capsys.readouterr().out)
    assert [e["boundary"] for e in lines] == [
        "backend.request.ingress",
        "backend.response.complete",
    ]
    assert lines[-1]["metadata"]["http_status"] == 200


def test_dispatch_of_an_app_that_raises(capsys: pytest.CaptureFixture[str]) -> None:
    async def call_next(req: Request) -> Response:
        raise ValueError("bad key sk-test-12345")

    mw = CvdiagBackendMiddleware(app=lambda *a: None)
    with pytest.raises(ValueError, match="sk-test-12345"):  # the app's error, unchanged
        asyncio.run(mw.dispatch(request(), call_next))
    out = capsys.readouterr().out
    assert [e["boundary"] for e in written(out)] == [
        "backend.request.ingress",
        "backend.error.caught",
        "backend.response.complete",
    ]
    assert "sk-test-12345" not in out


def test_dispatch_with_the_flag_off_is_call_next(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CVDIAG_BACKEND_EMITTER")
    answer = JSONResponse({"ok": True})

    async def call_next(req: Request) -> Response:
        assert getattr(req.state, "cvdiag", None) is None
        return answer

    mw = CvdiagBackendMiddleware(app=lambda *a: None)
    assert asyncio.run(mw.dispatch(request(), call_next)) is answer
    assert capsys.readouterr().out == ""


def test_an_emitter_configured_by_hand_is_used_until_the_tier_changes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert current_tier() == "verbose"  # the face has built its emitter
    memory = MemorySink()
    configure(Settings(enabled=True, tier="debug"), sinks=[memory])
    ctx = _RequestCtx(test_id=TEST_ID, slug="demo-app")
    emit_agent_enter(ctx, agent_name="a", model_id="m")
    assert [e["boundary"] for e in memory.envelopes] == ["backend.agent.enter"]
    assert capsys.readouterr().out == ""
    setup({"CVDIAG_VERBOSE": "0"})  # the tier changes: the face's own emitter again
    emit_agent_enter(ctx, agent_name="a", model_id="m")
    assert [e["boundary"] for e in written(capsys.readouterr().out)] == ["backend.agent.enter"]
    assert len(memory.envelopes) == 1


def test_a_hand_built_context_mints_a_uuid7_for_anything_else() -> None:
    ctx = _RequestCtx(test_id="d4-run-7", slug="!!!", demo="")
    assert ctx.test_id != "d4-run-7"
    assert ctx.test_id[14] == "7"  # a UUIDv7
    assert ctx.slug == "unknown"
    assert ctx.demo == "default"


def test_emit_cvdiag_keeps_the_closed_bag_and_scrubs_it(capsys: pytest.CaptureFixture[str]) -> None:
    emit_cvdiag(
        {
            "boundary": "backend.request.ingress",
            "test_id": "not-a-uuid",
            "edge_headers": {"via": "1.1 proxy sk-test-12345", "x-forwarded-for": "10.0.0.1"},
            "metadata": {"method": "GET", "path": "/p?token=abc12345678"},
        }
    )
    emit_cvdiag(None)  # type: ignore[arg-type]  # what a host may pass: nothing, and no raise
    out = capsys.readouterr().out
    (line,) = written(out)
    assert set(line["edge_headers"]) == EDGE_HEADER_KEYS_SET
    assert line["edge_headers"]["via"] == "1.1 proxy [REDACTED]"
    assert line["test_id"][14] == "7"  # minted: not a UUIDv7
    assert line["test_id"] == line["trace_id"]
    assert "sk-test-12345" not in out
    assert "abc12345678" not in out
    assert "10.0.0.1" not in out


def test_bad_options_to_an_llm_call_never_raise(capsys: pytest.CaptureFixture[str]) -> None:
    async def call() -> None:
        ctx = _RequestCtx(test_id=TEST_ID, slug="demo-app")
        async with LlmCallScope(ctx, provider="openai", model="m", interval_s=0):
            pass

    asyncio.run(call())
    boundaries = [e["boundary"] for e in written(capsys.readouterr().out)]
    assert boundaries == ["backend.llm.call.start", "backend.llm.call.response"]


def test_dispatch_closed_before_its_first_chunk_still_ends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def endless() -> Any:
        while True:
            yield b"data: x\n\n"

    async def call_next(req: Request) -> Response:
        return StreamingResponse(endless(), media_type="text/event-stream")

    async def run() -> None:
        mw = CvdiagBackendMiddleware(app=lambda *a: None)
        response = await mw.dispatch(request(), call_next)
        await response.body_iterator.aclose()  # type: ignore[attr-defined]

    asyncio.run(run())
    lines = written(capsys.readouterr().out)
    assert [e["boundary"] for e in lines] == ["backend.request.ingress", "backend.sse.aborted"]
    assert lines[-1]["metadata"]["termination_kind"] == "rst"


def test_a_task_put_in_place_of_the_heartbeat_is_stopped_at_exit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Code written for the showcase's copy cancels ``_hb_task`` or puts its own task there.
    stopped: list[str] = []

    async def run() -> None:
        scope = LlmCallScope(_RequestCtx(test_id=TEST_ID, slug="demo-app"), provider="o", model="m")
        await scope.__aenter__()
        scope._hb_task.cancel()  # nothing to cancel: cvdiag's thread beats the call

        async def beating() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                stopped.append("cancelled")
                raise

        scope._hb_task = asyncio.ensure_future(beating())
        await asyncio.sleep(0)
        await scope.__aexit__(None, None, None)

    asyncio.run(run())
    assert stopped == ["cancelled"]
    boundaries = [e["boundary"] for e in written(capsys.readouterr().out)]
    assert boundaries == ["backend.llm.call.start", "backend.llm.call.response"]


@pytest.mark.skipif(not hasattr(asyncio.Task, "cancelling"), reason="Task.cancelling: 3.11+")
def test_the_callers_cancellation_while_that_task_stops_propagates() -> None:
    reached: list[str] = []

    async def run() -> None:
        scope = LlmCallScope(_RequestCtx(test_id=TEST_ID, slug="demo-app"), provider="o", model="m")
        await scope.__aenter__()
        release = asyncio.Event()

        async def slow_to_stop() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                await asyncio.shield(release.wait())

        scope._hb_task = asyncio.ensure_future(slow_to_stop())
        exiting = asyncio.Event()

        async def caller() -> None:
            exiting.set()
            await scope.__aexit__(None, None, None)
            reached.append("after exit")

        task = asyncio.ensure_future(caller())
        await exiting.wait()
        await asyncio.sleep(0)  # the caller now waits for the task to stop
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        release.set()

    asyncio.run(run())
    assert reached == []
