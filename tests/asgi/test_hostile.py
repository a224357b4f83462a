"""Hostile input: each request is served exactly as without cvdiag, and envelopes stay bounded."""

from __future__ import annotations

import re
import socket

import pytest

from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.vocabulary import EDGE_VALUE_MAX
from tests.support.asgi_apps import (
    FAKE_KEY,
    boundaries,
    call,
    check_all,
    http_scope,
    make_app,
    serve,
    terminals,
    wait_for,
    without_echo,
)

MEGABYTE = 1024 * 1024
TEST_ID = re.compile(r"[a-z0-9._-]{1,128}")

HOSTILE: dict[str, list[tuple[bytes, bytes]]] = {
    "1 MB header values": [
        (b"x-test-id", b"a" * MEGABYTE),
        (b"x-aimock-context", b"s" * MEGABYTE),
        (b"cf-ray", b"r" * MEGABYTE),
        (b"via", b"Bearer " + FAKE_KEY.encode() + b" " + b"v" * MEGABYTE),
        (b"user-agent", b"u" * MEGABYTE),
    ],
    "non-UTF-8 header bytes": [
        (b"x-test-id", b"\xff\xfe\xc3\x28run\x80"),
        (b"x-aimock-context", b"\xc3\x28demo\xa0\xa1"),
        (b"cf-ray", b"\xe2\x28\xa1-AMS"),
        (b"server", b"\xf0\x28\x8c\xbc"),
    ],
    "control characters in x-test-id": [
        (b"x-test-id", b"id\x00\x07\x1b[2J\r\n\tend\x7f"),
        (b"x-aimock-context", b"\x00\x00"),
    ],
    "malformed content-length": [(b"content-length", b"12abc")],
    "negative content-length": [(b"content-length", b"-1")],
    "1 MB content-length": [(b"content-length", b"9" * MEGABYTE)],
    "duplicated test ids": [(b"x-test-id", b"first"), (b"x-test-id", b"second")],
}


@pytest.mark.parametrize("tier", ["default", "verbose", "debug"])
@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.parametrize("path", ["/plain", "/chat/sse"])
async def test_served_as_without_cvdiag_and_bounded(
    cvdiag_events: CvdiagEvents, case: str, tier: str, path: str
) -> None:
    headers = HOSTILE[case]
    bare_app = make_app()
    bare_app.user_middleware.clear()
    bare = await call(bare_app, http_scope(path, headers))
    sink = cvdiag_events(tier)
    wrapped = await call(make_app(), http_scope(path, headers))
    assert without_echo(wrapped) == bare
    envelopes = check_all(sink, tier)  # schema-valid and within the tier's byte cap
    assert len(terminals(envelopes)) == 1
    for envelope in envelopes:
        assert TEST_ID.fullmatch(envelope["test_id"])
        assert all(v is None or len(v) <= EDGE_VALUE_MAX for v in envelope["edge_headers"].values())
    assert FAKE_KEY.encode() not in b"".join(sink.lines)
    if case == "duplicated test ids":
        assert {e["test_id"] for e in envelopes} == {"first"}
    if case == "control characters in x-test-id":
        assert {e["test_id"] for e in envelopes} == {"id2jend"}
    if tier != "default" and "content-length" in case:
        ingress = next(e for e in envelopes if e["boundary"] == "backend.request.ingress")
        assert ingress["metadata"]["content_length"] is None


async def test_one_megabyte_path_is_bounded(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("debug")
    path = "/" + "p" * MEGABYTE
    bare_app = make_app()
    bare_app.user_middleware.clear()
    wrapped = await call(make_app(), http_scope(path))
    assert without_echo(wrapped) == await call(bare_app, http_scope(path))
    envelopes = check_all(sink)
    assert boundaries(envelopes) == ["backend.request.ingress", "backend.response.complete"]
    assert all(len(e["demo"]) <= 256 for e in envelopes)


# --- the same requests over a raw socket: the server answers identically with and without -------


def raw_exchange(url: str, request: bytes) -> tuple[str, bytes]:
    """Send raw bytes; return the status line and body, or ("rejected", b"") when the server
    refused the request before answering (it may close while we still send a 1 MB header)."""
    host, port = url.removeprefix("http://").split(":")
    data = b""
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server gave up on the request first; read what it said, if anything
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    if not status.endswith("200 OK"):
        return ("rejected", b"")  # 400, 431 or a reset: the server's answer, not the app's
    return (status, body)


RAW: dict[str, bytes] = {
    "non-UTF-8 header bytes": b"x-test-id: \xff\xfe\xc3\x28run\r\ncf-ray: \xe2\x28\xa1\r\n",
    "control characters in x-test-id": b"x-test-id: id\x01\x07\x1b[2J\x7fend\r\n",
    "malformed content-length": b"content-length: 12abc\r\n",
    "1 MB header value": b"x-test-id: " + b"a" * MEGABYTE + b"\r\n",
}


@pytest.mark.parametrize("case", list(RAW))
def test_raw_requests_over_uvicorn(cvdiag_events: CvdiagEvents, case: str) -> None:
    request = (
        b"GET /plain HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n" + RAW[case] + b"\r\n"
    )
    bare_app = make_app()
    bare_app.user_middleware.clear()
    with serve("uvicorn", bare_app) as url:
        bare = raw_exchange(url, request)
    sink = cvdiag_events("debug")
    with serve("uvicorn", make_app()) as url:
        wrapped = raw_exchange(url, request)
        if bare[0] != "rejected":  # the request reached the app: its story was told
            wait_for(lambda: len(terminals(list(sink.envelopes))) == 1)
    assert wrapped == bare
    if bare[0] == "rejected":
        assert not sink.envelopes  # refused by the server itself: no app, no cvdiag
    for envelope in check_all(sink):
        assert TEST_ID.fullmatch(envelope["test_id"])
