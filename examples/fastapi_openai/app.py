"""FastAPI + the OpenAI SDK: one agent turn that streams the model's answer as SSE.

cvdiag sees the request (``CvdiagMiddleware``), the agent turn (``agent_scope``) and, through
the instrumented HTTP client the SDK runs on (``instrument_httpx``), every OpenAI call: model,
token counts, latency, heartbeats while the model thinks. The caller's ``x-test-id`` is
forwarded to the provider, so a mock LLM can join its records with the backend's.

How to run it: README.md beside this file.
"""

import json
import os
from collections.abc import AsyncIterator

import httpx2
import openai
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from cvdiag import CvdiagMiddleware, agent_scope, instrument_httpx

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")

# Any OpenAI-compatible server works: OPENAI_BASE_URL points the example at it (the tests use a
# local fake provider). The API key comes from OPENAI_API_KEY.
client = openai.AsyncOpenAI(
    base_url=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
    http_client=instrument_httpx(httpx2.AsyncClient(timeout=60)),
)

app = FastAPI(title="cvdiag example: FastAPI + OpenAI")
app.add_middleware(CvdiagMiddleware, slug="fastapi-openai")


class Chat(BaseModel):
    message: str


@agent_scope("chat-agent", model_id=MODEL)
async def answer(message: str) -> AsyncIterator[str]:
    """One agent turn. Decorating the generator makes the scope span the whole stream."""
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": message}],
        stream=True,
        stream_options={"include_usage": True},  # the last chunk carries the token count
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            yield f"data: {json.dumps({'delta': chunk.choices[0].delta.content})}\n\n"
    yield "data: [DONE]\n\n"


@app.post("/chat")
async def chat(body: Chat) -> StreamingResponse:
    return StreamingResponse(answer(body.message), media_type="text/event-stream")


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
