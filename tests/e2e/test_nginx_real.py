"""True causes behind a proxy: real nginx (Debian's) in front of uvicorn.

nginx is started by the test as a process of its own (``tests/support/servers.serve_nginx``),
adding ``Via: 1.1 nginx-proxy`` to every request, as the deployments of the issue did. Its
``via`` is context, never a cause alone: a healthy stream is ``healthy`` (buffering on and off),
a client that leaves is ``client-abort``, each with the proxy named. What nginx *does* is a
cause: ``proxy_read_timeout`` shorter than the app's silence closes the stream, and the reason
says how long the stream had been silent; a 502 nginx answers while the app completed (its
upstream's header too big for ``proxy_buffer_size``), as the client's probe records it, is
``edge-interference``. ``cvdiag classify`` and the report agree on every case.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware
from cvdiag.pytest_plugin import CvdiagEvents
from tests.support.cli import cvdiag
from tests.support.report import report
from tests.support.servers import NGINX_VIA, serve_nginx, serve_uvicorn

EVENT = b"data: %d\n\n"


async def whole(request: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for i in range(5):
            yield EVENT % i

    return StreamingResponse(body(), media_type="text/event-stream")


async def endless(request: Request) -> Response:
    """Streams until the client is gone: the client decides when it ends."""

    async def body() -> AsyncIterator[bytes]:
        i = 0
        while True:
            yield EVENT % i
            i += 1
            await asyncio.sleep(0.02)

    return StreamingResponse(body(), media_type="text/event-stream")


async def silent(request: Request) -> Response:
    """Three events, then silence (a tool, a model thinking) until the connection is closed."""

    async def body() -> AsyncIterator[bytes]:
        for i in range(3):
            yield EVENT % i
        while True:
            await asyncio.sleep(60)
        yield b""  # pragma: no cover - never reached: the silence ends by cancellation

    return StreamingResponse(body(), media_type="text/event-stream")


async def big_header(request: Request) -> Response:
    """A complete answer whose header is larger than nginx's ``proxy_buffer_size``."""
    return JSONResponse({"ok": True}, headers={"x-debug-trace": "t" * 16384})


APP = Starlette(
    routes=[
        Route("/whole", whole),
        Route("/endless", endless),
        Route("/silent", silent),
        Route("/big-header", big_header),
    ]
)
APP.add_middleware(CvdiagMiddleware)


def _log(events: CvdiagEvents, path: Path, *extra: dict[str, Any]) -> Path:
    lines = [b"CVDIAG " + line + b"\n" for line in events.lines]
    lines += [b"CVDIAG " + orjson.dumps(env) + b"\n" for env in extra]
    path.write_bytes(b"".join(lines))
    return path


def _verdict(log: Path, test_id: str) -> dict[str, Any]:
    done = cvdiag("classify", test_id, str(log), "--json")
    assert done.returncode == 0, done.stderr
    verdict: dict[str, Any] = json.loads(done.stdout)
    return verdict


def _agree(log: Path, out: Path, verdicts: dict[str, dict[str, Any]]) -> None:
    """The report draws each failed test id with the class ``classify`` gave it."""
    page = report(log, out, "--all")
    for test_id, verdict in verdicts.items():
        assert page.section_of(test_id).flap_class == verdict["flap_class"]


@pytest.mark.parametrize("buffering", ["on", "off"])
@pytest.mark.parametrize("tier", ["default", "debug"])
def test_a_healthy_stream_and_a_client_leaving_behind_nginx(
    cvdiag_events: CvdiagEvents, tmp_path: Path, buffering: str, tier: str
) -> None:
    events = cvdiag_events(tier)
    with (
        serve_uvicorn(APP) as upstream,
        serve_nginx(upstream, tmp_path, location=f"proxy_buffering {buffering};") as base,
        httpx.Client(timeout=10) as client,
    ):
        reply = client.get(f"{base}/whole", headers={"x-test-id": "whole"})
        assert reply.status_code == 200
        assert reply.text == "".join(f"data: {i}\n\n" for i in range(5))  # every event came
        with client.stream("GET", f"{base}/endless", headers={"x-test-id": "left"}) as stream:
            got = 0
            for line in stream.iter_lines():
                got += line.startswith("data:")
                if got == 3:
                    break  # the client leaves after three events
        events.wait_for("backend.sse.aborted", timeout=20)  # nginx passed its leaving on
    log = _log(events, tmp_path / "backend.log")
    healthy, left = _verdict(log, "whole"), _verdict(log, "left")
    assert healthy["flap_class"] == "healthy", healthy["reason"]
    assert healthy["evidence"]["via"] == NGINX_VIA
    assert left["flap_class"] == "client-abort", left["reason"]
    assert left["evidence"]["via"] == NGINX_VIA
    _agree(log, tmp_path / "report.html", {"whole": healthy, "left": left})


@pytest.mark.parametrize("tier", ["default", "debug"])
def test_nginx_closing_an_idle_stream_is_its_idle_timeout_with_the_silence_measured(
    cvdiag_events: CvdiagEvents, tmp_path: Path, tier: str
) -> None:
    """At the default tier no event is written: the terminal's ``silence_ms`` tells it."""
    events = cvdiag_events(tier)
    with (
        serve_uvicorn(APP) as upstream,
        serve_nginx(
            upstream, tmp_path, location="proxy_buffering off; proxy_read_timeout 2s;"
        ) as base,
        httpx.Client(timeout=30) as client,
    ):
        with client.stream("GET", f"{base}/silent", headers={"x-test-id": "idle"}) as stream:
            try:
                body = b"".join(stream.iter_raw())
            except httpx.HTTPError:  # nginx cut the chunked body short
                body = b""
            assert b"data: 3" not in body
        events.wait_for("backend.sse.aborted", timeout=30)
    log = _log(events, tmp_path / "backend.log")
    verdict = _verdict(log, "idle")
    assert verdict["flap_class"] == "edge-interference", verdict["reason"]
    assert "s without a byte" in verdict["reason"]
    assert "proxy_read_timeout" in verdict["reason"]
    assert verdict["evidence"]["via"] == NGINX_VIA
    # nginx closes no sooner than its timeout: the silence measured is at least that long.
    assert verdict["evidence"]["silence_ms"] >= 1500, verdict["reason"]
    _agree(log, tmp_path / "report.html", {"idle": verdict})


def test_a_502_from_nginx_while_the_app_completed_is_edge_interference(
    cvdiag_events: CvdiagEvents, tmp_path: Path
) -> None:
    events = cvdiag_events("default")
    with (
        serve_uvicorn(APP) as upstream,
        serve_nginx(upstream, tmp_path, location="proxy_buffer_size 4k;") as base,
        httpx.Client(timeout=10) as client,
    ):
        reply = client.get(f"{base}/big-header", headers={"x-test-id": "bad-gateway"})
        events.wait_for("backend.response.complete", timeout=20)
    assert reply.status_code == 502  # nginx's own answer
    (complete,) = events.of("backend.response.complete")
    assert complete["metadata"]["http_status"] == 200  # the app's
    # What the harness's probe writes for the request it made: the status the client got.
    probe = {
        **complete,
        "layer": "probe",
        "boundary": "probe.network.response",
        "span_id": "00000000000000aa",
        "outcome": "err",
        "metadata": {"url": "/big-header", "status": reply.status_code, "duration_ms": 1},
    }
    log = _log(events, tmp_path / "backend.log", probe)
    verdict = _verdict(log, "bad-gateway")
    assert verdict["flap_class"] == "edge-interference", verdict["reason"]
    assert "the client got HTTP 502" in verdict["reason"]
    assert verdict["evidence"]["app_status"] == 200
    without_probe = _verdict(_log(events, tmp_path / "app-only.log"), "bad-gateway")
    assert (
        without_probe["flap_class"] == "healthy"
    )  # the app's side alone: its 200, the proxy named
    _agree(log, tmp_path / "report.html", {"bad-gateway": verdict})
