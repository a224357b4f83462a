"""The backend of the Playwright recipe's test (tests/probe/test_playwright.py): cvdiag's
middleware over a small chat app with a JSON route, a slow LLM call, a route that fails, SSE
streams and three pages that read them (one renders, one fails to, one is left early). No
favicon: Chromium's own request for it is answered 404."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, StreamingResponse

from cvdiag import CvdiagMiddleware, agent_scope, llm_call

api = FastAPI()
WORDS = ["one", "two", "three", "four", "five", "six"]


@api.get("/api/chat")
async def chat(message: str) -> dict[str, str]:
    async with agent_scope("chat-agent"):
        return {"answer": message.upper()}


@api.post("/api/slow")
async def slow(body: dict[str, str], seconds: float = 4) -> dict[str, str]:
    async with agent_scope("slow-agent"), llm_call("openai-compatible", "slow-model") as call:
        await asyncio.sleep(seconds)  # longer than the client's 2 s timeout
        call.record_response(response_token_count=3)
    return {"answer": body.get("message", "").upper()}


@api.get("/api/fail")
async def fail() -> dict[str, str]:
    async with agent_scope("failing-agent"):
        raise RuntimeError("the agent's tool failed")  # the backend's own error: HTTP 500


@api.get("/api/stream")
async def stream(count: int = 6, gap: float = 0.1) -> StreamingResponse:
    async def events() -> AsyncIterator[str]:
        async with agent_scope("stream-agent"):
            for index in range(count):
                await asyncio.sleep(gap)
                yield f"data: {json.dumps({'token': WORDS[index % len(WORDS)]})}\n\n"
            yield "event: done\ndata: {}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>chat</title></head>
<body><div id="answer"></div><div id="status"></div><script>%s</script></body></html>"""

# EventSource, each token appended; closed on the stream's last event (else it reconnects).
STREAM = """
const answer = document.getElementById("answer");
const source = new EventSource("/api/stream?count=%d&gap=%s");
source.onmessage = (event) => {
  const word = JSON.parse(event.data).token;
  answer.textContent = answer.textContent ? answer.textContent + " " + word : word;
};
source.addEventListener("done", () => {
  source.close();
  document.getElementById("status").textContent = "stream ended";
});
"""

# fetch's stream read to its end, then a rendering bug: nothing shown, an error logged, and an
# uncaught error (the key in its message must reach no envelope). The status the test waits for
# is set last, by a timer after the throwing one: on a loaded machine the test's wait for the
# answer could otherwise end before the uncaught error was thrown, and the page's record lack it.
BROKEN = """
(async () => {
  const response = await fetch("/api/stream?count=3&gap=0.05");
  const reader = response.body.getReader();
  while (!(await reader.read()).done) {}
  const key = "sk-proj-" + "Fake0Xmpl1Dummy2".repeat(3);  // a fake key, made here
  console.error("render failed: cannot read 'token' for key " + key);
  setTimeout(() => { throw new TypeError("answer.render is not a function"); });
  setTimeout(() => { document.getElementById("status").textContent = "stream ended"; });
})();
"""


@api.get("/page/stream")
async def page_stream() -> HTMLResponse:
    return HTMLResponse(PAGE % (STREAM % (6, "0.1")))


@api.get("/page/broken")
async def page_broken() -> HTMLResponse:
    return HTMLResponse(PAGE % BROKEN)


@api.get("/page/long")
async def page_long() -> HTMLResponse:
    return HTMLResponse(PAGE % (STREAM % (40, "0.25")))


app = CvdiagMiddleware(api)
