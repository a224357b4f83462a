"""The request context reaches sync endpoints, sync dependencies, the threadpool, tasks and
BackgroundTasks of a FastAPI app served by uvicorn."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated

import pytest
from fastapi import BackgroundTasks, Depends, FastAPI
from starlette.concurrency import run_in_threadpool

from cvdiag import CvdiagMiddleware, RequestContext, current_context
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from tests.support.asgi_apps import CLIENTS, check_all, only, serve, wait_for

#: What each place saw: its context and the thread it ran on. Reset by ``context_app``.
SEEN: dict[str, tuple[RequestContext | None, str]] = {}


def record(where: str) -> None:
    SEEN[where] = (current_context(), threading.current_thread().name)


def sync_dependency() -> str:
    record("sync dependency")
    return "dep"


def background_sync() -> None:
    record("background sync")


async def background_async() -> None:
    record("background async")


async def record_in_task() -> None:
    record("asyncio task")


def sync_endpoint(
    tasks: BackgroundTasks, dep: Annotated[str, Depends(sync_dependency)]
) -> dict[str, str]:
    record("sync endpoint")
    tasks.add_task(background_sync)
    tasks.add_task(background_async)
    return {"dep": dep}


async def async_endpoint() -> dict[str, bool]:
    await run_in_threadpool(record, "run_in_threadpool")
    await asyncio.get_running_loop().create_task(record_in_task())
    return {"ok": True}


def context_app() -> tuple[FastAPI, dict[str, tuple[RequestContext | None, str]]]:
    SEEN.clear()
    app = FastAPI()
    app.get("/chat/sync")(sync_endpoint)
    app.get("/chat/async")(async_endpoint)
    app.add_middleware(CvdiagMiddleware, slug="context-demo")
    return app, SEEN


@pytest.mark.parametrize("client", ["httpx", "httpx2"])
def test_context_reaches_sync_code_and_background_tasks(
    cvdiag_events: CvdiagEvents, client: str
) -> None:
    sink = cvdiag_events("verbose")
    app, seen = context_app()
    test_id = new_uuid7()
    lib = CLIENTS[client]
    with serve("uvicorn", app) as url, lib.Client(timeout=10) as http:
        assert http.get(f"{url}/chat/sync", headers={"x-test-id": test_id}).json() == {"dep": "dep"}
        assert http.get(f"{url}/chat/async", headers={"x-test-id": test_id}).status_code == 200
        wait_for(lambda: len(seen) == 6)
    envelopes = check_all(sink, "verbose")
    sync_ingress, async_ingress = (
        e for e in envelopes if e["boundary"] == "backend.request.ingress"
    )
    expected = {
        "sync dependency": sync_ingress,
        "sync endpoint": sync_ingress,
        "background sync": sync_ingress,
        "background async": sync_ingress,
        "run_in_threadpool": async_ingress,
        "asyncio task": async_ingress,
    }
    for where, ingress in expected.items():
        context, _ = seen[where]
        assert context is not None, where
        assert context.test_id == test_id, where
        assert context.trace_id == ingress["trace_id"], where
        assert context.span_id == ingress["span_id"], where
        assert (context.slug, context.demo) == ("context-demo", "chat"), where
    # the sync code really ran in worker threads, where only contextvars could carry the context
    assert seen["sync endpoint"][1] != seen["background async"][1]
    assert seen["run_in_threadpool"][1] != seen["asyncio task"][1]
    assert only(envelopes[:3], "backend.response.complete")["metadata"]["http_status"] == 200
