"""App logs carry the request's test id, trace id and span id: ``LogContextFilter`` for the
standard library, ``add_log_context`` for structlog, on a FastAPI app served by uvicorn."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from fastapi import BackgroundTasks, FastAPI
from structlog.testing import CapturingLogger

import cvdiag
from cvdiag import CvdiagMiddleware, LogContextFilter, add_log_context, agent_scope
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from tests.support.asgi_apps import serve, wait_for
from tests.support.requests import of, one

FORMAT = "%(levelname)s test_id=%(test_id)s trace_id=%(trace_id)s span_id=%(span_id)s %(message)s"


class ListHandler(logging.Handler):
    """Keeps each record and its formatted line."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.records.append(record)


@pytest.fixture
def handler() -> Iterator[ListHandler]:
    """The documented setup: the filter on a handler of the root logger; the app logs on a
    child logger ("app.chat"), whose records a root *logger* filter would never see."""
    handler = ListHandler()
    handler.addFilter(LogContextFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    level, root.level = root.level, logging.INFO
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def logging_app(events: list[dict[str, Any]]) -> FastAPI:
    log = logging.getLogger("app.chat")
    slog = structlog.wrap_logger(
        CapturingLogger(),
        processors=[add_log_context, lambda _l, _m, event: events.append(event) or event],
    )

    def say(where: str) -> None:
        log.info("from %s", where)
        slog.info(where)

    async def background() -> None:
        await asyncio.sleep(0)
        say("background")

    app = FastAPI()

    @app.get("/async")
    async def async_endpoint(tasks: BackgroundTasks) -> dict[str, bool]:
        say("async")
        await asyncio.get_running_loop().create_task(asyncio.to_thread(say, "thread"))
        tasks.add_task(background)
        return {"ok": True}

    @app.get("/sync")
    def sync_endpoint() -> dict[str, bool]:
        say("sync")
        return {"ok": True}

    @app.get("/agent")
    async def agent_endpoint() -> dict[str, bool]:
        async with agent_scope("planner"):
            say("agent")
        return {"ok": True}

    app.add_middleware(CvdiagMiddleware)
    return app


def test_every_record_carries_its_requests_ids(
    cvdiag_events: CvdiagEvents, handler: ListHandler
) -> None:
    sink = cvdiag_events("verbose")
    events: list[dict[str, Any]] = []
    sent = new_uuid7()
    with serve("uvicorn", logging_app(events)) as url, cvdiag_client() as http:
        minted = http.get(f"{url}/async").headers["x-test-id"]  # no id sent: cvdiag mints one
        assert http.get(f"{url}/sync", headers={"x-test-id": sent}).status_code == 200
        wait_for(lambda: len(of(sink, "backend.response.complete")) == 2)
        wait_for(lambda: len(events) == 4)

    ingress = {env["test_id"]: env for env in of(sink, "backend.request.ingress")}
    assert set(ingress) == {minted, sent}
    expected = {
        "async": minted,
        "thread": minted,
        "background": minted,
        "sync": sent,
    }
    records = [r for r in handler.records if r.name == "app.chat"]
    assert sorted(r.getMessage() for r in records) == sorted(f"from {w}" for w in expected)
    for record in records:
        where = record.getMessage().removeprefix("from ")
        env = ingress[expected[where]]
        assert (record.test_id, record.trace_id) == (env["test_id"], env["trace_id"]), where  # type: ignore[attr-defined]
        assert record.span_id == env["span_id"], where  # type: ignore[attr-defined]
    assert sorted(e["event"] for e in events) == sorted(expected)
    for event in events:
        env = ingress[expected[event["event"]]]
        assert (event["test_id"], event["trace_id"], event["span_id"]) == (
            env["test_id"],
            env["trace_id"],
            env["span_id"],
        )
    # The formatter's line says the same.
    line = next(line for line in handler.lines if line.endswith("from sync"))
    assert f"test_id={sent} trace_id={ingress[sent]['trace_id']}" in line


def test_inside_a_scope_the_span_is_the_scopes(
    cvdiag_events: CvdiagEvents, handler: ListHandler
) -> None:
    sink = cvdiag_events("verbose")
    events: list[dict[str, Any]] = []
    with serve("uvicorn", logging_app(events)) as url, cvdiag_client() as http:
        test_id = http.get(f"{url}/agent").headers["x-test-id"]
        wait_for(lambda: len(of(sink, "backend.response.complete")) == 1)
    enter = one(sink, "backend.agent.enter")
    (record,) = [r for r in handler.records if r.name == "app.chat"]
    (event,) = events
    for got in (record.__dict__, event):
        assert (got["test_id"], got["trace_id"]) == (test_id, enter["trace_id"])
        assert got["span_id"] == enter["span_id"]  # the agent's span, not the ingress span


def test_when_cvdiag_is_off_the_fields_are_none_and_nothing_is_added(
    handler: ListHandler,
) -> None:
    events: list[dict[str, Any]] = []
    with serve("uvicorn", logging_app(events)) as url, cvdiag_client() as http:
        response = http.get(f"{url}/sync")
        assert "x-test-id" not in response.headers  # still a pass-through
    (record,) = [r for r in handler.records if r.name == "app.chat"]
    assert (record.test_id, record.trace_id, record.span_id) == (None, None, None)  # type: ignore[attr-defined]
    assert handler.lines[-1].startswith("INFO test_id=None trace_id=None span_id=None")
    assert events == [{"event": "sync"}]


def test_outside_a_request_a_format_never_raises_and_explicit_values_win() -> None:
    handler = ListHandler()
    handler.addFilter(LogContextFilter())
    log = logging.getLogger("tests.log_context.outside")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("plain")
        log.warning("mine", extra={"test_id": "given"})
    finally:
        log.removeHandler(handler)
        log.propagate = True
    assert handler.lines == [
        "WARNING test_id=None trace_id=None span_id=None plain",
        "WARNING test_id=given trace_id=None span_id=None mine",
    ]
    assert add_log_context(None, "info", {"event": "x", "test_id": "t"}) == {
        "event": "x",
        "test_id": "t",
    }


def test_a_scope_outside_a_request_gives_its_own_ids(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose")
    with agent_scope("batch"):
        event = add_log_context(None, "info", {"event": "x"})
    enter = one(sink, "backend.agent.enter")
    assert (event["test_id"], event["trace_id"], event["span_id"]) == (
        enter["test_id"],
        enter["trace_id"],
        enter["span_id"],
    )


def test_a_logger_filter_misses_child_records_which_is_why_the_docs_say_handler() -> None:
    """The reason the documented setup puts the filter on a handler, held by the stdlib."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign, assignment]
    parent = logging.getLogger("tests.log_context.parent")
    parent.addFilter(LogContextFilter())
    parent.addHandler(handler)
    parent.propagate = False
    try:
        parent.warning("from the parent")
        logging.getLogger("tests.log_context.parent.child").warning("from a child")
    finally:
        parent.removeHandler(handler)
        parent.filters.clear()
        parent.propagate = True
    assert ["test_id" in r.__dict__ for r in records] == [True, False]


def test_structlog_is_not_imported_by_cvdiag() -> None:
    code = (
        "import sys, cvdiag; cvdiag.add_log_context(None, 'info', {}); cvdiag.LogContextFilter()\n"
        "assert 'structlog' not in sys.modules, 'structlog imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_names() -> None:
    assert {"LogContextFilter", "add_log_context"} <= set(cvdiag.__all__)
    assert issubclass(cvdiag.LogContextFilter, logging.Filter)


def cvdiag_client() -> Any:
    import httpx

    return httpx.Client(timeout=10)
