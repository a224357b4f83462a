"""The backend of tests/e2e/test_client_layer_pytest.py, run by uvicorn in a process of its own:
cvdiag's middleware over an agent that asks an OpenAI-compatible provider (the fake provider in
a process of its own, at ``OPENAI_BASE_URL``) through the instrumented httpx client.

``POST /ask`` answers JSON: its LLM call goes on after its client has left, as a JSON route's
does (a slow call answers later). ``GET /stream`` streams the provider's words as SSE events as
they arrive. The message carries the fake provider's directive (``[fake:stall=3]``,
``[fake:500]``); the provider's own timeout is ``LLM_TIMEOUT`` seconds.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

import httpx
import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, agent_scope, instrument_httpx

MODEL = "fake-model"
client = openai.AsyncOpenAI(
    base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8001/v1"),
    api_key="test",
    max_retries=0,  # one call per request: the story is the call's, not the SDK's retries
    http_client=instrument_httpx(
        httpx.AsyncClient(timeout=float(os.environ.get("LLM_TIMEOUT", "30")))
    ),
)


async def ask(request: Request) -> Response:
    message = (await request.json())["message"]
    async with agent_scope("ask-agent", model_id=MODEL):
        answer = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": message}]
        )
    return JSONResponse({"answer": answer.choices[0].message.content})


async def stream(request: Request) -> Response:
    message = request.query_params.get("message", "hi")

    async def events() -> AsyncIterator[str]:
        async with agent_scope("stream-agent", model_id=MODEL):
            chunks = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": message}], stream=True
            )
            async for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield f"data: {json.dumps({'delta': chunk.choices[0].delta.content})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


app = CvdiagMiddleware(
    Starlette(routes=[Route("/ask", ask, methods=["POST"]), Route("/stream", stream)])
)
