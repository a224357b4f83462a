"""Stories end in order: an error the app raises behind its 500 is told before the terminal.

Starlette's ``ServerErrorMiddleware`` is the outermost layer of a Starlette or FastAPI app: with
cvdiag wrapping the whole app (``CvdiagMiddleware(app)``, as a server or a platform wraps it),
the handler answers 500 through cvdiag and then re-raises the exception. Real servers, real
clients.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, emit
from cvdiag.pytest_plugin import CvdiagEvents
from tests.support.asgi_apps import (
    boundaries,
    check_all,
    serve,
    terminals,
    wait_terminal,
)

servers = pytest.mark.parametrize("server", ["uvicorn", "hypercorn"])


async def fails(request: Request) -> Response:
    raise RuntimeError("the model client broke")


async def unavailable(request: Request) -> Response:
    def later() -> None:
        emit("backend.agent.exit", metadata={"terminal_outcome": "ok"})

    return PlainTextResponse("try later", status_code=503, background=BackgroundTask(later))


def whole_app() -> Any:
    routes = [Route("/fails", fails), Route("/unavailable", unavailable)]
    return CvdiagMiddleware(Starlette(routes=routes))


@servers
@pytest.mark.parametrize("tier", ["default", "verbose"])
def test_the_error_behind_a_500_comes_before_the_terminal(
    cvdiag_events: CvdiagEvents, server: str, tier: str
) -> None:
    sink = cvdiag_events(tier)
    with serve(server, whole_app()) as url, httpx.Client(timeout=10) as http:
        assert http.get(f"{url}/fails").status_code == 500
        wait_terminal(sink)
    envelopes = check_all(sink, tier)
    told = [b for b in boundaries(envelopes) if b != "backend.request.ingress"]
    assert told == ["backend.error.caught", "backend.response.complete"]
    (terminal,) = terminals(envelopes)
    assert terminal["metadata"]["http_status"] == 500
    assert terminal["outcome"] == "err"


@servers
def test_a_5xx_the_app_returns_is_complete_once_it_exits(
    cvdiag_events: CvdiagEvents, server: str
) -> None:
    """No error behind it: the one terminal, written at the app's exit (after its background
    task, which a 5xx's story tells first)."""
    sink = cvdiag_events("default")
    with serve(server, whole_app()) as url, httpx.Client(timeout=10) as http:
        assert http.get(f"{url}/unavailable").status_code == 503
        wait_terminal(sink)
    envelopes = check_all(sink, "default")
    assert boundaries(envelopes) == ["backend.agent.exit", "backend.response.complete"]
    assert envelopes[-1]["metadata"]["http_status"] == 503
