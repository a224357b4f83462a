"""The apps the reliability suite drives, and a uvicorn server process to run them in.

``python -m tests.reliability.apps --tier default`` serves the app on a free loopback port with
cvdiag writing to its real stdout (``--tier off``: the same app without the middleware). It says
``PORT <n>`` on stderr once listening; ``GET /__shutdown`` stops it, after which it flushes and
says ``STATS {json}`` (the emitter's counters) on stderr.

Every route ties what it emits to the request: ``/sse/{i}`` runs ``agent_scope("agent-{i}")``
and ``llm_call(..., "model-{i}")`` and streams events of type ``ev-{i}``, so a load test can
check that each envelope carries *its own* request's test id (``load-{i}``), not a neighbour's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from cvdiag import CvdiagMiddleware, agent_scope, emit, llm_call

EVENTS = 8


async def sse(request: Request) -> Response:
    """An agent turn around one LLM call, then ``n`` SSE events ``delay`` seconds apart.

    ``leave=k``: the client will leave after ``k`` events; the stream waits for it to go (at most
    ``LEAVE_WAIT`` seconds) before sending the rest, which its departure then cuts short.
    """
    i = request.path_params["i"]
    count = int(request.query_params.get("n", EVENTS))
    delay = float(request.query_params.get("delay", "0.002"))
    leave = int(request.query_params.get("leave", -1))

    @agent_scope(f"agent-{i}", model_id=f"model-{i}")
    async def turn() -> AsyncIterator[str]:
        async with llm_call("openai", f"model-{i}", prompt_token_count_estimate=3) as call:
            await asyncio.sleep(delay)
            call.record_response(count)
        for k in range(count):
            yield f'data: {{"type":"ev-{i}","k":{k}}}\n\n'
            if k + 1 == leave:
                await wait_for_disconnect(request)
            await asyncio.sleep(delay)

    return StreamingResponse(turn(), media_type="text/event-stream")


#: Seconds a stream waits for a client that said it would leave.
LEAVE_WAIT = 30.0


async def wait_for_disconnect(request: Request) -> None:
    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    with contextlib.suppress(asyncio.TimeoutError):  # not TimeoutError itself before 3.11
        await asyncio.wait_for(gone(), LEAVE_WAIT)


async def plain(request: Request) -> Response:
    return PlainTextResponse("hello", headers={"server": "unit", "via": "1.1 edge"})


async def echo(request: Request) -> Response:
    """The request as the app saw it: a request answered identically has identical echoes."""
    body = await request.body()
    return JSONResponse(
        {"path": request.url.path, "headers": len(request.headers.raw), "body": len(body)}
    )


async def raises(request: Request) -> Response:
    raise RuntimeError(request.query_params.get("message", "the app failed"))


async def sse_raises(request: Request) -> Response:
    message = request.query_params.get("message", "the stream broke")

    async def events() -> AsyncIterator[bytes]:
        yield b"data: one\n\n"
        raise RuntimeError(message)

    return StreamingResponse(events(), media_type="text/event-stream")


async def agent(request: Request) -> Response:
    """An agent turn and an LLM call named by the query (``name``), failing with ``message``."""
    name = request.query_params.get("name", "agent")
    message = request.query_params.get("message")
    try:
        async with agent_scope(name, model_id=name), llm_call(name, name) as call:
            call.record_response(1)
            if message is not None:
                raise ValueError(message)
    except ValueError:
        return PlainTextResponse("agent failed", status_code=502)
    return PlainTextResponse("agent done")


async def edge(request: Request) -> Response:
    """Answers with the edge headers the query names (``server``, ``via``)."""
    return PlainTextResponse(
        "edge", headers={k: v for k, v in request.query_params.items() if k in ("server", "via")}
    )


async def user_emit(request: Request) -> Response:
    """Emits what the test put in ``request.state`` (hostile metadata), then answers."""
    metadata = request.scope.get("state", {}).get("metadata", {})
    emit("backend.error.caught", metadata=metadata)
    emit("backend.agent.enter", metadata=metadata)
    return PlainTextResponse("emitted")


async def raw_sse(request: Request) -> Response:
    """Sends the chunks the test put in the scope's state, as a text/event-stream."""
    chunks: list[bytes] = request.scope.get("state", {}).get("chunks", [])

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return StreamingResponse(body(), media_type="text/event-stream")


async def ws_echo(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            text = await websocket.receive_text()
            if text == "bye":
                await websocket.close(code=1000)
                return
            await websocket.send_text(orjson.dumps({"type": "echo", "text": text}).decode())
    except WebSocketDisconnect:
        return


ROUTES = [
    Route("/sse/{i}", sse),
    Route("/plain", plain),
    Route("/echo/{rest:path}", echo, methods=["GET", "POST"]),
    Route("/raises", raises),
    Route("/sse-raises", sse_raises),
    Route("/emit", user_emit),
    Route("/raw-sse", raw_sse),
    Route("/agent", agent),
    Route("/edge", edge),
    WebSocketRoute("/ws", ws_echo),
]


def build(*, cvdiag: bool = True, **options: Any) -> Starlette:
    """The app, with ``CvdiagMiddleware`` (following the process-wide emitter) or without."""
    app = Starlette(routes=list(ROUTES))
    if cvdiag:
        app.add_middleware(CvdiagMiddleware, **options)
    return app


#: For ``python -m uvicorn tests.reliability.apps:app`` (cvdiag configured from the environment).
app = build()


# --- a server process --------------------------------------------------------------------------


def _serve(tier: str) -> None:
    import uvicorn

    from cvdiag import Settings, configure, flush, get_emitter

    if tier != "off":
        configure(
            Settings(
                enabled=True,
                tier=tier,  # type: ignore[arg-type]
                debug_max_envelopes=10**9,
                debug_max_seconds=1e9,
                heartbeat_interval=0.05,
            )
        )
    app = build(cvdiag=tier != "off")
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="error",
            access_log=False,
            lifespan="off",
            backlog=4096,
            timeout_keep_alive=30,
        )
    )

    async def shutdown(request: Request) -> Response:
        server.should_exit = True
        return PlainTextResponse("bye")

    app.router.routes.append(Route("/__shutdown", shutdown))

    def announce() -> None:
        while not server.started:
            threading.Event().wait(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        sys.stderr.write(f"PORT {port}\n")
        sys.stderr.flush()

    threading.Thread(target=announce, daemon=True).start()
    server.run()
    flush(60)
    stats: dict[str, Any] = get_emitter().stats() if tier != "off" else {}
    for sink in get_emitter().sinks:
        stats["written"] = stats.get("written", 0) + getattr(sink, "written", 0)
    sys.stderr.write(f"STATS {orjson.dumps(stats).decode()}\n")
    sys.stderr.flush()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tier", default="default", choices=["off", "default", "verbose", "debug"])
    _serve(parser.parse_args().tier)
