"""A sync agent framework inside an async app: worker threads, and the request's context with them.

Sync frameworks block, so they run in worker threads while the event loop keeps serving:

- ``GET /research`` is a plain ``def`` endpoint. Starlette (and FastAPI) run it in their
  threadpool, which carries the request's context: nothing to do.
- ``GET /research/stream`` hands the agent to a ``ThreadPoolExecutor`` of its own and streams
  its tokens as SSE through a queue. An executor does not carry context variables into its
  threads, so the job is submitted through ``contextvars.copy_context().run``; without it the
  agent's envelopes would get a test id of their own instead of the request's.

Heartbeats come from cvdiag's own thread, so a call blocked in a worker thread still reports
that it is waiting.

How to run it: README.md beside this file.
"""

import asyncio
import contextvars
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, agent_scope, llm_call

#: Seconds the fake model blocks before it answers.
THINK_SECONDS = float(os.environ.get("FAKE_LLM_SECONDS", "0.5"))
pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent")


class ResearchAgent:
    """Stands in for a sync agent framework: blocking calls and callbacks, no asyncio."""

    @agent_scope("researcher", model_id="fake-chat-1")
    def run(self, question: str, on_token: Callable[[str], None] = print) -> str:
        estimate = len(question) // 4
        with llm_call("fake", "fake-chat-1", prompt_token_count_estimate=estimate) as call:
            time.sleep(THINK_SECONDS)  # a blocking SDK call
            tokens = f"Findings on {question}: nothing to worry about.".split()
            call.record_response(len(tokens))
        for token in tokens:
            on_token(token)
        return " ".join(tokens)


agent = ResearchAgent()


def research(request: Request) -> JSONResponse:
    question = request.query_params.get("q", "cvdiag")
    return JSONResponse({"answer": agent.run(question, on_token=lambda token: None)})


async def research_stream(request: Request) -> StreamingResponse:
    question = request.query_params.get("q", "cvdiag")
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def on_token(token: str) -> None:  # called in the worker thread
        loop.call_soon_threadsafe(queue.put_nowait, token)

    def job() -> str:
        try:
            return agent.run(question, on_token)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    # The request's context (test id, span) goes to the worker thread with the job.
    done = loop.run_in_executor(pool, contextvars.copy_context().run, job)

    async def events() -> AsyncIterator[str]:
        while (token := await queue.get()) is not None:
            yield f"data: {json.dumps({'delta': token})}\n\n"
        await done  # re-raises the agent's exception, if it failed

    return StreamingResponse(events(), media_type="text/event-stream")


app = Starlette(
    routes=[Route("/research", research), Route("/research/stream", research_stream)],
)
app.add_middleware(CvdiagMiddleware, slug="sync-worker")

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
