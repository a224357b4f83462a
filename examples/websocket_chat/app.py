"""A WebSocket chat: every message from the client is one agent turn, answered token by token.

One connection is one request for cvdiag: one ingress (method ``WEBSOCKET``), an agent turn per
message, an event per message the server sends, and one terminal when the conversation ends —
``backend.response.complete`` (101) for a normal close, ``backend.sse.aborted`` for a drop.

How to run it: README.md beside this file.
"""

import asyncio
import os

from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from cvdiag import CvdiagMiddleware, agent_scope, llm_call

#: Seconds the fake model thinks before it answers.
THINK_SECONDS = float(os.environ.get("FAKE_LLM_SECONDS", "0.05"))


async def fake_llm(prompt: str) -> list[str]:
    """Stands in for your provider client."""
    estimate = len(prompt) // 4
    async with llm_call("fake", "fake-chat-1", prompt_token_count_estimate=estimate) as call:
        await asyncio.sleep(THINK_SECONDS)
        tokens = f"You said: {prompt}".split()
        call.record_response(len(tokens))
        return tokens


async def chat(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            prompt = await websocket.receive_text()
            async with agent_scope("ws-agent", model_id="fake-chat-1"):
                for token in await fake_llm(prompt):
                    await websocket.send_json({"type": "TEXT_MESSAGE_CONTENT", "delta": token})
                await websocket.send_json({"type": "TEXT_MESSAGE_END"})
    except WebSocketDisconnect:
        pass  # the client left; the middleware records how (a normal close, or a drop)


app = Starlette(routes=[WebSocketRoute("/ws", chat)])
app.add_middleware(CvdiagMiddleware, slug="websocket-chat")

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
