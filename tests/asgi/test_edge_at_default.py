"""A proxy is visible at the default tier: the request's edge headers (``via``, ``cf-ray``, the
rest of the allow-list) ride on the terminal beside the response's, where no ingress is written.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cvdiag import CvdiagMiddleware
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.vocabulary import DENIED_HEADERS, EDGE_HEADER_KEYS
from tests.support.asgi_apps import (
    boundaries,
    call,
    check_all,
    http_scope,
    make_app,
    only,
    terminals,
)

UUID7 = "0190d6a0-5c2e-7c3a-9f1e-2b3c4d5e6f70"
#: Through Railway's edge and a caching proxy; the client's address and country with them.
THROUGH_A_PROXY = [
    (b"x-test-id", UUID7.encode()),
    (b"via", b"1.1 varnish"),
    (b"cf-ray", b"8f00000000000000-LHR"),
    (b"x-railway-request-id", b"rq-42"),
    *((name.encode(), b"203.0.113.9") for name in DENIED_HEADERS),
]


def present(envelope: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in envelope["edge_headers"].items() if v is not None}


@pytest.mark.parametrize("tier", ["default", "verbose", "debug"])
async def test_the_terminal_carries_the_requests_edge_headers_at_every_tier(
    cvdiag_events: CvdiagEvents, tier: str
) -> None:
    sink = cvdiag_events(tier)
    await call(make_app(), http_scope("/chunks", THROUGH_A_PROXY))
    envelopes = check_all(sink, tier)
    (terminal,) = terminals(envelopes)
    assert terminal["boundary"] == "backend.response.complete"
    assert present(terminal) == {
        "via": "1.1 varnish",
        "cf-ray": "8f00000000000000-LHR",
        "x-railway-request-id": "rq-42",
    }
    assert list(terminal["edge_headers"]) == list(EDGE_HEADER_KEYS)  # all nine, in order
    assert "203.0.113.9" not in str(envelopes)  # client IPs and places: never
    if tier != "default":  # the ingress keeps the request's, as it always has
        assert present(only(envelopes, "backend.request.ingress")) == present(terminal)
    else:
        assert "backend.request.ingress" not in boundaries(envelopes)


async def test_the_responses_own_edge_header_wins_and_the_requests_fill_the_rest(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")
    headers = [*THROUGH_A_PROXY, (b"server", b"from-the-request")]
    await call(make_app(), http_scope("/plain", headers))  # answers server: unit, cache HIT
    (terminal,) = terminals(check_all(sink, "default"))
    assert present(terminal) == {
        "server": "unit",  # the response's
        "cf-cache-status": "HIT",
        "via": "1.1 varnish",  # the request's: the response has none
        "cf-ray": "8f00000000000000-LHR",
        "x-railway-request-id": "rq-42",
    }


async def test_an_abort_before_the_response_carries_the_requests_edge_headers(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise asyncio.CancelledError  # the server cancelled it before any answer

    with pytest.raises(asyncio.CancelledError):
        await call(CvdiagMiddleware(app), http_scope("/", THROUGH_A_PROXY))
    (terminal,) = terminals(check_all(sink, "default"))
    assert terminal["boundary"] == "backend.sse.aborted"
    assert present(terminal)["via"] == "1.1 varnish"
    assert present(terminal)["cf-ray"] == "8f00000000000000-LHR"


async def test_a_websockets_terminal_carries_the_requests_edge_headers(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")
    scope = {**http_scope("/ws/chat", THROUGH_A_PROXY), "type": "websocket", "scheme": "ws"}
    incoming = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": "bye"},
    ]
    await call(make_app(), scope, incoming)
    (terminal,) = terminals(check_all(sink, "default"))
    assert terminal["boundary"] == "backend.response.complete"
    assert present(terminal)["via"] == "1.1 varnish"


async def test_a_request_without_edge_headers_has_none_on_its_terminal(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")
    await call(make_app(), http_scope("/chunks", [(b"x-test-id", UUID7.encode())]))
    (terminal,) = terminals(check_all(sink, "default"))
    assert present(terminal) == {}
