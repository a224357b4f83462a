"""The backend the probe's tests talk to: cvdiag's middleware over routes that answer at once,
stream SSE events, hold their head or their stream past a client's timeout, and call a service
of their own with the test id forwarded. Run in-process (``ASGITransport``) or by uvicorn in a
process of its own (``tests.support.probe_backend:app``)."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware


async def answer(request: Request) -> Response:
    await request.body()
    return JSONResponse({"answer": "hi"})


async def events(request: Request) -> Response:
    """``n`` events ``gap`` seconds apart, then ``stall`` seconds of silence before the end."""
    count = int(request.query_params.get("n", "3"))
    gap = float(request.query_params.get("gap", "0"))
    stall = float(request.query_params.get("stall", "0"))

    async def body():  # type: ignore[no-untyped-def]
        for number in range(count):
            yield f'event: token\ndata: {{"n": {number}}}\n\n'
            await asyncio.sleep(gap)
        await asyncio.sleep(stall)
        yield "event: done\ndata: {}\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


async def late(request: Request) -> Response:
    """The head only after ``s`` seconds (a slow LLM call before the answer)."""
    await asyncio.sleep(float(request.query_params.get("s", "2")))
    return PlainTextResponse("late")


async def calls_out(request: Request) -> Response:
    """The backend's own outbound call, with the test id forwarded: the backend's story, never
    the client's."""
    target = request.query_params["to"]
    test_id = request.headers.get("x-test-id", "")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_service)) as client:
        inner = await client.get(target, headers={"x-test-id": test_id})
    return PlainTextResponse(inner.text)


_service = Starlette(routes=[Route("/inner", answer)])

app = CvdiagMiddleware(
    Starlette(
        routes=[
            Route("/answer", answer, methods=["GET", "POST"]),
            Route("/events", events),
            Route("/late", late),
            Route("/calls-out", calls_out),
        ]
    )
)
