"""Starlette + sse-starlette: an agent run streamed to the browser as AG-UI-style events.

The middleware reads the SSE framing as it leaves: the first byte, each event by its JSON
``type`` (``RUN_STARTED``, ``TEXT_MESSAGE_CONTENT`` …, at the debug tier), and how the stream
ended — completed, or aborted because the browser went away mid-answer.

How to run it: README.md beside this file.
"""

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, agent_scope, llm_call
from cvdiag.scopes import current_llm_call

#: Seconds between the fake model's tokens.
TOKEN_DELAY = float(os.environ.get("FAKE_LLM_TOKEN_DELAY", "0.05"))
ANSWER = ["cvdiag", "follows", "this", "stream", "to", "its", "last", "event"]


@llm_call("fake", "fake-chat-1")
async def fake_llm(prompt: str) -> AsyncIterator[str]:
    """Stands in for a provider's streaming API: one token at a time."""
    for token in ANSWER:
        await asyncio.sleep(TOKEN_DELAY)
        yield token
    call = current_llm_call()
    if call is not None:  # None while cvdiag is off
        call.record_response(len(ANSWER))


@agent_scope("sse-agent", model_id="fake-chat-1")
async def run_agent(prompt: str) -> AsyncIterator[dict[str, Any]]:
    yield {"data": json.dumps({"type": "RUN_STARTED"})}
    async for token in fake_llm(prompt):
        yield {"data": json.dumps({"type": "TEXT_MESSAGE_CONTENT", "delta": token})}
    yield {"data": json.dumps({"type": "RUN_FINISHED"})}


async def agent(request: Request) -> EventSourceResponse:
    prompt = request.query_params.get("prompt", "hello")
    # sse-starlette stops the generator when the client disconnects: the middleware records
    # backend.sse.aborted (client_disconnect) and the agent's exit says "cancelled".
    return EventSourceResponse(run_agent(prompt), ping=15)


app = Starlette(routes=[Route("/agent", agent)])
app.add_middleware(CvdiagMiddleware, slug="starlette-sse")

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
