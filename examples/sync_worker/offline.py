"""``python -m examples sync_worker``: both endpoints, then a browser that gives up while the
agent's worker thread is still blocked in its LLM call."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from examples.offline import Client, Example, Visit


def research(path: str, *, patience: float = 30) -> Callable[[Client, str], str]:
    def drive(client: Client, test_id: str) -> str:
        try:
            response = client.http.get(
                path,
                params={"q": "flaky tests"},
                headers={"x-test-id": test_id},
                timeout=httpx.Timeout(30, read=patience),
            )
        except httpx.ReadTimeout:
            return f"nothing for {patience:g} s: gave up"
        return f"HTTP {response.status_code}, {len(response.content)} bytes"

    return drive


EXAMPLE = Example(
    name="sync_worker",
    summary="a sync agent in worker threads: the request's context, heartbeats from a blocked call",
    env={
        "CVDIAG_BACKEND_EMITTER": "1",
        "CVDIAG_VERBOSE": "1",
        "CVDIAG_HEARTBEAT_INTERVAL": "0.2",
    },
    visits=[
        Visit(
            "sync-1-threadpool",
            "GET /research: Starlette's threadpool",
            research("/research"),
            "healthy",
        ),
        Visit(
            "sync-2-executor",
            "GET /research/stream: an executor of its own, streamed as SSE",
            research("/research/stream"),
            "healthy",
        ),
        Visit(
            "sync-3-gave-up",
            "the browser gives up after 0.3 s while the model thinks (0.5 s)",
            research("/research/stream", patience=0.3),
            "stalled-backend",
        ),
    ],
)
