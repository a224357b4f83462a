"""Protocol-complete streams, at every tier, on real servers.

AG-UI apps written with ag-ui-protocol's own encoder, and an OpenAI Responses-shaped stream,
under uvicorn behind ``CvdiagMiddleware``, read by a real httpx client: a run that ends without
``RUN_FINISHED``, one that sends after it, and a Responses stream without ``response.completed``
are ``protocol-incomplete`` in ``cvdiag classify`` and in the report alike; the whole run is
``healthy``. Below the debug tier the terminal's ``first_event_type`` and ``last_event_type``
tell.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware
from cvdiag.pytest_plugin import CvdiagEvents
from tests.support.asgi_apps import call, http_scope, terminals
from tests.support.cli import cvdiag
from tests.support.report import classify, report
from tests.support.servers import serve_uvicorn

ag_ui_core = pytest.importorskip("ag_ui.core")
ag_ui_encoder = pytest.importorskip("ag_ui.encoder")

E = ag_ui_core.EventType


def _run(*, finished: bool, after: bool) -> list[Any]:
    events: list[Any] = [
        ag_ui_core.RunStartedEvent(type=E.RUN_STARTED, thread_id="t", run_id="r"),
        ag_ui_core.TextMessageStartEvent(type=E.TEXT_MESSAGE_START, message_id="m"),
        ag_ui_core.TextMessageContentEvent(type=E.TEXT_MESSAGE_CONTENT, message_id="m", delta="hi"),
        ag_ui_core.TextMessageEndEvent(type=E.TEXT_MESSAGE_END, message_id="m"),
    ]
    if finished:
        events.append(ag_ui_core.RunFinishedEvent(type=E.RUN_FINISHED, thread_id="t", run_id="r"))
    if after:
        events.append(
            ag_ui_core.TextMessageContentEvent(
                type=E.TEXT_MESSAGE_CONTENT, message_id="m", delta="late"
            )
        )
    return events


def _agui(*, finished: bool, after: bool = False) -> Any:
    async def endpoint(request: Request) -> Response:
        encoder = ag_ui_encoder.EventEncoder()

        async def body() -> AsyncIterator[str]:
            for event in _run(finished=finished, after=after):
                yield encoder.encode(event)

        return StreamingResponse(body(), media_type=encoder.get_content_type())

    return endpoint


def _responses(*, completed: bool) -> Any:
    async def endpoint(request: Request) -> Response:
        async def body() -> AsyncIterator[str]:
            names = ["response.created", "response.output_text.delta"]
            names += ["response.completed"] if completed else []
            for name in names:
                yield f"event: {name}\ndata: {json.dumps({'type': name})}\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    return endpoint


APP = Starlette(
    routes=[
        Route("/whole", _agui(finished=True)),
        Route("/unfinished", _agui(finished=False)),
        Route("/after", _agui(finished=True, after=True)),
        Route("/responses-whole", _responses(completed=True)),
        Route("/responses-cut", _responses(completed=False)),
    ]
)
APP.add_middleware(CvdiagMiddleware)
EXPECTED = {
    "whole": "healthy",
    "unfinished": "protocol-incomplete",
    "after": "protocol-incomplete",
    "responses-whole": "healthy",
    "responses-cut": "protocol-incomplete",
}


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serve_uvicorn(APP) as url:
        yield url


@pytest.mark.parametrize("tier", ["default", "verbose", "debug"])
def test_a_stream_that_breaks_its_protocol_is_named_at_every_tier(
    cvdiag_events: CvdiagEvents, tmp_path: Path, base: str, tier: str
) -> None:
    events = cvdiag_events(tier)
    with httpx.Client(timeout=10) as client:
        for name in EXPECTED:
            reply = client.get(f"{base}/{name}", headers={"x-test-id": f"{tier}-{name}"})
            assert reply.status_code == 200
    events.wait_for("backend.response.complete", count=len(EXPECTED), timeout=20)
    log = tmp_path / "backend.log"
    log.write_bytes(b"".join(b"CVDIAG " + line + b"\n" for line in events.lines))
    terminals = {e["test_id"]: e["metadata"] for e in events.of("backend.response.complete")}
    for name in ("whole", "unfinished", "after"):
        assert terminals[f"{tier}-{name}"]["first_event_type"] == "RUN_STARTED"
    assert terminals[f"{tier}-responses-cut"]["first_event_type"] == "response.created"
    assert terminals[f"{tier}-unfinished"]["last_event_type"] == "TEXT_MESSAGE_END"
    assert terminals[f"{tier}-after"]["last_event_type"] == "TEXT_MESSAGE_CONTENT"
    assert terminals[f"{tier}-whole"]["last_event_type"] == "RUN_FINISHED"
    assert terminals[f"{tier}-responses-cut"]["last_event_type"] == "response.output_text.delta"
    got = {name: classify(f"{tier}-{name}", log) for name in EXPECTED}
    assert got == EXPECTED
    page = report(log, tmp_path / "report.html")
    for name, flap_class in EXPECTED.items():
        if flap_class != "healthy":  # the report draws the failures
            assert page.section_of(f"{tier}-{name}").flap_class == flap_class


def test_the_reason_names_the_last_event_and_what_was_missing(
    cvdiag_events: CvdiagEvents, tmp_path: Path, base: str
) -> None:
    events = cvdiag_events("debug")
    with httpx.Client(timeout=10) as client:
        client.get(f"{base}/unfinished", headers={"x-test-id": "why-unfinished"})
        client.get(f"{base}/after", headers={"x-test-id": "why-after"})
    events.wait_for("backend.response.complete", count=2, timeout=20)
    log = tmp_path / "backend.log"
    log.write_bytes(b"".join(b"CVDIAG " + line + b"\n" for line in events.lines))
    unfinished = json.loads(cvdiag("classify", "why-unfinished", str(log), "--json").stdout)
    assert "without RUN_ERROR or RUN_FINISHED" in unfinished["reason"]
    assert "its last event was TEXT_MESSAGE_END" in unfinished["reason"]
    after = json.loads(cvdiag("classify", "why-after", str(log), "--json").stdout)
    assert "sent TEXT_MESSAGE_CONTENT" in after["reason"]
    assert "after its terminal event" in after["reason"]
    assert after["evidence"]["breach"] == "after-terminal"


@pytest.mark.parametrize("tier", ["default", "verbose"])
async def test_an_event_type_holding_a_secret_never_reaches_the_terminal(
    cvdiag_events: CvdiagEvents, tier: str
) -> None:
    """The event types a terminal names come from the app's bytes: scrubbed like any value."""
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8" * 3
    frames = [b'data: {"type": "RUN_STARTED"}\n\n', f"event: {secret}\ndata: x\n\n".encode()]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for frame in frames:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    sink = cvdiag_events(tier)
    await call(CvdiagMiddleware(app), http_scope("/"))
    (terminal,) = terminals(list(sink.envelopes))
    assert terminal["metadata"]["first_event_type"] == "RUN_STARTED"
    assert terminal["metadata"]["last_event_type"]  # named, scrubbed
    assert secret[8:20] not in str(list(sink.envelopes))
