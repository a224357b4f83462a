"""Log volume: bytes of ``CVDIAG {json}`` lines one request writes, at each tier.

Three requests, each served by a real uvicorn (the demo's ``serve``: a thread, a free loopback
port) with ``CvdiagMiddleware`` on the process-wide emitter, the way an app runs it:

- ``json``: a short JSON request (``POST /json``, a 16-byte body, a 15-byte JSON answer);
- ``sse``: a 20-event SSE stream (``GET /sse``, about 50 bytes an event), no agent;
- ``agent``: the demo's agent turn (``POST /chat``: ``agent_scope`` around one ``llm_call``, its
  7 tokens streamed as SSE), the shape of a chat backend's request.

No ``x-test-id`` is sent, so cvdiag mints a 36-character UUIDv7 as it does in production; each
request's lines are found by the test id the response echoes. A line is counted as stdout
carries it: ``CVDIAG `` + the JSON + a newline. Figures are the median over ``--n`` requests
(the bytes vary by a few with durations' digits). Heartbeats are not in them: a verbose-tier LLM
call adds one line (about 600 bytes) per ``CVDIAG_HEARTBEAT_INTERVAL`` (10 s) it is outstanding.

Run: ``python benchmarks/log_volume.py [--n 5] [--json]``; the table goes to stdout (as JSON with
``--json``). It takes a few seconds: nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cvdiag import MemorySink, Settings, configure, flush
from cvdiag.cli.demo import build_app, serve
from cvdiag.schema.vocabulary import Tier

TIERS: Final = (Tier.DEFAULT, Tier.VERBOSE, Tier.DEBUG)
_TERMINALS: Final = frozenset({"backend.response.complete", "backend.sse.aborted"})


async def _json(request: Request) -> Response:
    await request.body()
    return JSONResponse({"answer": 42})


async def _sse(request: Request) -> Response:
    async def events() -> AsyncIterator[str]:
        for number in range(20):
            data = json.dumps({"type": "TEXT_MESSAGE_CONTENT", "delta": f"token {number:02d}"})
            yield f"event: TEXT_MESSAGE_CONTENT\ndata: {data}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _app() -> Any:
    """The demo's app (its ``/chat`` is the agent turn) with the two plain routes put first;
    the middleware is built at the first request, so the routes added here are behind it."""
    app = build_app()
    app.router.routes[:0] = [Route("/json", _json, methods=["POST"]), Route("/sse", _sse)]
    return app


REQUESTS: Final[dict[str, Callable[[httpx.Client], httpx.Response]]] = {
    "json": lambda client: client.post("/json", json={"message": "hi"}),
    "sse": lambda client: client.get("/sse"),
    "agent": lambda client: client.post("/chat?mode=ok", json={"message": "hi"}),
}


def _lines_of(memory: MemorySink, test_id: str) -> list[bytes]:
    """The request's lines once its terminal (and an agent's exit, if it entered) is written."""
    deadline = time.monotonic() + 5
    while True:
        flush()
        pairs = list(
            zip(list(memory.envelopes), list(memory.lines), strict=False)
        )  # lines may be one ahead
        mine = [(e, line) for e, line in pairs if e["test_id"] == test_id]
        seen = {e["boundary"] for e, _ in mine}
        agent_done = "backend.agent.enter" not in seen or "backend.agent.exit" in seen
        if (seen & _TERMINALS and agent_done) or time.monotonic() > deadline:
            return [line for _, line in mine]
        time.sleep(0.01)


def measure(n: int) -> dict[str, dict[str, dict[str, float]]]:
    """``{request: {tier: {"bytes": median bytes, "lines": median lines}}}``."""
    result: dict[str, dict[str, dict[str, float]]] = {name: {} for name in REQUESTS}
    app = _app()
    with serve(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        for tier in TIERS:
            memory = MemorySink()
            # Code-given settings are trusted: the debug tier without an environment label.
            configure(Settings(enabled=True, tier=tier), sinks=[memory])
            try:
                for name, send in REQUESTS.items():
                    sizes, counts = [], []
                    for _ in range(n):
                        response = send(client)
                        response.raise_for_status()
                        lines = _lines_of(memory, response.headers["x-test-id"])
                        sizes.append(sum(len(b"CVDIAG ") + len(line) + 1 for line in lines))
                        counts.append(len(lines))
                    result[name][tier.label] = {
                        "bytes": statistics.median(sizes),
                        "lines": statistics.median(counts),
                    }
            finally:
                configure(Settings(), sinks=[MemorySink()])
    return result


def render(result: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    titles = {
        "json": "short JSON request",
        "sse": "20-event SSE stream",
        "agent": "agent turn, one LLM call (7 SSE events)",
    }
    head = f"{'request':<42}" + "".join(f"{tier.label:>18}" for tier in TIERS)
    rows = [head, "-" * len(head)]
    for name, by_tier in result.items():
        cells = ""
        for tier in TIERS:
            figures = by_tier[tier.label]
            cells += f"{figures['bytes']:>11,.0f} B / {figures['lines']:<3g}"
        rows.append(f"{titles[name]:<42}{cells}")
    rows.append("(bytes of CVDIAG lines per request / lines per request; median)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=5, help="requests of each kind per tier")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = measure(args.n)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(render(result)) + "\n")


if __name__ == "__main__":
    main()
