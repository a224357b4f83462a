"""``agent_scope(..., until="response")``: a turn that lasts as long as the request's streamed
response, on a real uvicorn server (and hypercorn, which streams in another way)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, MemorySink, agent_scope, current_context, llm_call
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from tests.support.asgi_apps import check_all, serve, wait_terminal
from tests.support.requests import of, one

SECRET = "sk-test-until-response-1234567890"


async def tokens(request: Request) -> AsyncIterator[bytes]:
    """The agent's work runs while the body streams, as in the AG-UI adapters."""
    mode = request.query_params.get("mode", "ok")
    async with llm_call("openai", "gpt-test"):
        await asyncio.sleep(0)
    for i in range(int(request.query_params.get("n", "3"))):
        if mode == "raise" and i == 1:
            raise RuntimeError(f"the stream broke, key {SECRET}")
        yield f"data: token {i}\n\n".encode()
        if mode == "slow":
            await asyncio.sleep(0.05)


async def held(request: Request) -> Response:
    async with agent_scope("chat", model_id="gpt-test", until="response"):
        return StreamingResponse(tokens(request), media_type="text/event-stream")


async def plain(request: Request) -> Response:
    async with agent_scope("chat", model_id="gpt-test"):
        return StreamingResponse(tokens(request), media_type="text/event-stream")


@agent_scope("chat", until="response")
async def decorated(request: Request) -> Response:
    return StreamingResponse(tokens(request), media_type="text/event-stream")


async def raises_in_block(request: Request) -> Response:
    async with agent_scope("chat", until="response"):
        raise ValueError("refused before any byte")


SEEN: list[Any] = []


async def with_background(request: Request) -> Response:
    async def after() -> None:
        SEEN.append(current_context())

    async with agent_scope("chat", until="response"):
        return StreamingResponse(
            tokens(request), media_type="text/event-stream", background=BackgroundTask(after)
        )


class Passing(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: Any) -> Response:
        return await call_next(request)  # type: ignore[no-any-return]


def app(*, base_http: bool = False) -> Starlette:
    routes = [
        Route("/held", held),
        Route("/plain", plain),
        Route("/decorated", decorated),
        Route("/raises", raises_in_block),
        Route("/background", with_background),
    ]
    middleware = [Middleware(CvdiagMiddleware)]
    if base_http:
        middleware.append(Middleware(Passing))
    return Starlette(routes=routes, middleware=middleware)


def story(sink: MemorySink) -> list[str]:
    return [env["boundary"] for env in sink.envelopes]


@pytest.mark.parametrize("server", ["uvicorn", "hypercorn"])
@pytest.mark.parametrize("path", ["/held", "/decorated"])
def test_the_turn_ends_with_the_response_and_holds_its_llm_call(
    cvdiag_events: CvdiagEvents, server: str, path: str
) -> None:
    sink = cvdiag_events("verbose")
    with serve(server, app()) as url, httpx.Client(timeout=10) as http:
        assert http.get(f"{url}{path}").status_code == 200
        wait_terminal(sink)
    check_all(sink, "verbose")
    enter, start = one(sink, "backend.agent.enter"), one(sink, "backend.llm.call.start")
    assert start["parent_span_id"] == enter["span_id"]  # the call inside the body is the agent's
    order = story(sink)
    assert order[-2:] == ["backend.agent.exit", "backend.response.complete"]
    assert order.index("backend.sse.first_byte") < order.index("backend.agent.exit")
    assert order.index("backend.llm.call.response") < order.index("backend.agent.exit")
    assert one(sink, "backend.agent.exit")["metadata"]["terminal_outcome"] == "ok"


def test_the_plain_form_exits_before_the_first_byte(cvdiag_events: CvdiagEvents) -> None:
    """What the keyword is for: without it the call streams outside the agent."""
    sink = cvdiag_events("verbose")
    with serve("uvicorn", app()) as url, httpx.Client(timeout=10) as http:
        http.get(f"{url}/plain")
        wait_terminal(sink)
    enter, start = one(sink, "backend.agent.enter"), one(sink, "backend.llm.call.start")
    assert start["parent_span_id"] != enter["span_id"]
    assert story(sink).index("backend.agent.exit") < story(sink).index("backend.llm.call.start")


def test_a_stream_that_fails_ends_the_turn_err_before_the_terminal(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("verbose")
    with serve("uvicorn", app()) as url, httpx.Client(timeout=10) as http:
        with pytest.raises(httpx.HTTPError):
            http.get(f"{url}/held?mode=raise").read()
        wait_terminal(sink)
    check_all(sink, "verbose")
    exit_ = one(sink, "backend.agent.exit")
    assert exit_["metadata"]["terminal_outcome"] == "err"
    caught = one(sink, "backend.error.caught")  # once: the agent's, not the request's too
    assert caught["parent_span_id"] == one(sink, "backend.agent.enter")["span_id"]
    assert SECRET not in str(list(sink.envelopes))
    assert story(sink)[-1] == "backend.sse.aborted"
    assert story(sink).index("backend.agent.exit") < story(sink).index("backend.sse.aborted")


def test_a_client_that_leaves_ends_the_turn_once_cancelled(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose")
    with serve("uvicorn", app()) as url, httpx.Client(timeout=10) as http:
        with http.stream("GET", f"{url}/held?mode=slow&n=200") as response:
            for _ in response.iter_bytes():
                break  # hang up mid-stream
        wait_terminal(sink)
    exits = of(sink, "backend.agent.exit")
    assert len(exits) == 1
    assert exits[0]["metadata"]["terminal_outcome"] == "cancelled"
    assert not of(sink, "backend.error.caught")
    assert story(sink).index("backend.agent.exit") < story(sink).index("backend.sse.aborted")


def test_a_block_that_raises_exits_at_once(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose")
    with serve("uvicorn", app()) as url, httpx.Client(timeout=10) as http:
        assert http.get(f"{url}/raises").status_code == 500
        wait_terminal(sink)
    assert one(sink, "backend.agent.exit")["metadata"]["terminal_outcome"] == "err"
    assert len(of(sink, "backend.error.caught")) == 1


def test_behind_a_base_http_middleware(cvdiag_events: CvdiagEvents) -> None:
    """The handler runs in a task of the BaseHTTPMiddleware: still one exit, before the end."""
    sink = cvdiag_events("verbose")
    with serve("uvicorn", app(base_http=True)) as url, httpx.Client(timeout=10) as http:
        assert http.get(f"{url}/held").status_code == 200
        wait_terminal(sink)
    check_all(sink, "verbose")
    assert (
        one(sink, "backend.llm.call.start")["parent_span_id"]
        == (one(sink, "backend.agent.enter")["span_id"])
    )
    assert story(sink)[-2:] == ["backend.agent.exit", "backend.response.complete"]


def test_background_work_after_the_response_keeps_the_requests_ids(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("verbose")
    SEEN.clear()
    with serve("uvicorn", app()) as url, httpx.Client(timeout=10) as http:
        test_id = http.get(f"{url}/background").headers["x-test-id"]
        wait_terminal(sink)
    (ctx,) = SEEN
    enter = one(sink, "backend.agent.enter")
    assert ctx is not None
    assert (ctx.test_id, ctx.trace_id) == (test_id, enter["trace_id"])
    assert story(sink)[-2:] == ["backend.agent.exit", "backend.response.complete"]


async def test_outside_a_request_it_is_a_plain_scope(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose")
    async with agent_scope("batch", until="response"):
        assert current_context() is not None
    assert current_context() is None
    assert one(sink, "backend.agent.exit")["metadata"]["terminal_outcome"] == "ok"


def test_off_it_costs_nothing() -> None:  # cvdiag off: the process-wide default
    with serve("uvicorn", app()) as url, httpx.Client(timeout=10) as http:
        response = http.get(f"{url}/held", headers={"x-test-id": new_uuid7()})
    assert response.status_code == 200
    assert "x-test-id" not in response.headers


def test_until_is_checked() -> None:
    with pytest.raises(ValueError, match="until"):
        agent_scope("x", until="later")  # type: ignore[arg-type]
    assert "until='response'" in repr(agent_scope("x", until="response"))
