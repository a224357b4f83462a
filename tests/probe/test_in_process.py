"""The probe with the backend in the test's own process (``ASGITransport``), and what it must
never do: record a request that is not the test's, fail a test, or write a secret."""

from __future__ import annotations

import gzip
import importlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cvdiag.core.guard import failures
from cvdiag.probe import ProbeWriter, install, uninstall
from cvdiag.probe.events import EventCounter
from cvdiag.schema.ids import new_uuid7
from cvdiag.sinks.exit_flush import flush_all, live_sinks
from tests.probe.conftest import Probe
from tests.support.probe_backend import app

LIBRARIES = ["httpx", "httpx2"]


def client(library: str, **options: Any) -> Any:
    lib: Any = importlib.import_module(library)
    return lib.AsyncClient(transport=lib.ASGITransport(app=app), base_url="http://app", **options)


@pytest.mark.parametrize("library", LIBRARIES)
async def test_an_in_process_backend(probe: Probe, library: str) -> None:
    test_id = new_uuid7()
    async with client(library, headers={"x-test-id": test_id}) as http:
        assert (await http.post("/answer", json={"message": "hi"})).status_code == 200
        assert (await http.get("/events", params={"n": 2})).status_code == 200
    probe.end("passed")
    sends = [env["metadata"] for env in probe.of("probe.message.send")]
    assert [(send["method"], send["char_count"]) for send in sends] == [
        ("POST", len(b'{"message":"hi"}')),
        ("GET", 0),
    ]
    assert [send["message_index"] for send in sends] == [0, 1]
    heads = [env["metadata"] for env in probe.of("probe.network.response")]
    assert [(head["status"], head["message_index"]) for head in heads] == [(200, 0), (200, 1)]
    assert heads[0]["content_length"] == len(b'{"answer":"hi"}')
    (end,) = probe.of("probe.exit")
    assert end["metadata"]["requests"] == 2
    assert end["metadata"]["sse_event_count"] == 3


@pytest.mark.parametrize("library", LIBRARIES)
async def test_the_backends_own_call_is_not_the_clients(probe: Probe, library: str) -> None:
    """The app calls a service of its own with the test id forwarded, in the client's context
    (cvdiag's middleware off): one request is the test's, the app's is not recorded."""
    async with client(library, headers={"x-test-id": new_uuid7()}) as http:
        answer = await http.get("/calls-out", params={"to": "http://service/inner"})
    assert answer.status_code == 200
    probe.end("passed")
    assert [env["metadata"]["url"] for env in probe.of("probe.message.send")] == ["/calls-out?to"]


async def test_what_is_not_a_tests_request_is_not_recorded(probe: Probe) -> None:
    async with client("httpx") as http:
        await http.get("/answer")  # no test id
    probe.end("passed")
    async with client("httpx", headers={"x-test-id": new_uuid7()}) as http:
        await http.get("/answer")  # no test running
    assert probe.lines() == []


async def test_a_secret_in_the_url_never_reaches_the_log(probe: Probe) -> None:
    secret = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
    async with client("httpx", headers={"x-test-id": new_uuid7()}) as http:
        await http.get(f"/answer/{secret}", params={"api_key": secret, "q": "x"})
    probe.end("passed")
    assert secret.encode() not in probe.path.read_bytes()
    assert secret[:20].encode() not in probe.path.read_bytes()
    (send,) = probe.of("probe.message.send")
    assert send["metadata"]["url"].endswith("?api_key&q")


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe not utf-8 \xc3", b"T" * 100_000, b"id with spaces and Capitals"],
    ids=["non-utf-8", "huge", "spaces"],
)
async def test_a_hostile_test_id_header(probe: Probe, raw: bytes) -> None:
    async with client("httpx", headers={"x-test-id": raw}) as http:
        assert (await http.get("/answer")).status_code == 200
    probe.end("passed")
    lines = probe.lines()  # each one valid v1
    assert [env["boundary"] for env in lines] == [
        "probe.start",
        "probe.message.send",
        "probe.network.response",
        "probe.exit",
    ]
    assert len({env["test_id"] for env in lines}) == 1
    assert all(len(env["test_id"]) <= 128 for env in lines)


async def test_an_unwritable_probe_log_costs_the_test_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = ProbeWriter(tmp_path, sinks=None)  # a folder: no file can be opened there
    install(writer)
    before = failures["sink"]
    try:
        writer.begin_test("t")
        async with client("httpx", headers={"x-test-id": new_uuid7()}) as http:
            assert (await http.get("/answer")).status_code == 200
        writer.end_test("passed")
    finally:
        uninstall()
        writer.close()
    assert failures["sink"] > before
    # The exit flush's line about the lost lines, said now and checked (never at the suite's
    # exit, where a reader takes it for a failure).
    capsys.readouterr()
    flush_all(
        timeout=0, sinks=[s for s in live_sinks if getattr(s, "path", "").startswith(str(tmp_path))]
    )
    assert "envelopes not written (write failed)" in capsys.readouterr().err


def sse(events: list[tuple[str, bytes]], newline: bytes) -> bytes:
    return b"".join(
        b"event: " + name.encode() + newline + b"data: " + data + newline + newline
        for name, data in events
    )


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["token", "message", "RUN_STARTED", "done"]),
        st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    ),
    max_size=12,
)


@given(EVENTS, st.sampled_from([b"\n", b"\r\n"]), st.lists(st.integers(1, 50), max_size=40))
def test_events_read_in_any_chunking_are_the_events_sent(
    events: list[tuple[str, bytes]], newline: bytes, cuts: list[int]
) -> None:
    body = sse(events, newline)
    counter = EventCounter()
    found, at = [], 0
    for cut in [*cuts, len(body)]:
        found += counter.feed(body[at : at + cut])
        at += cut
    found += counter.feed(body[at:])
    assert found == [(name, len(data)) for name, data in events]
    assert counter.count == len(events)


@given(EVENTS, st.integers(1, 64))
def test_a_gzip_body_is_read_as_sent(events: list[tuple[str, bytes]], size: int) -> None:
    body = gzip.compress(sse(events, b"\n"))
    counter = EventCounter("gzip")
    found = []
    for at in range(0, len(body), size):
        found += counter.feed(body[at : at + size])
    assert found == [(name, len(data)) for name, data in events]


def test_an_endless_event_is_counted_in_bounded_memory() -> None:
    counter = EventCounter()
    counter.feed(b"event: big\ndata: ")
    for _ in range(100):
        counter.feed(b"x" * 10_000)
        assert len(counter._held) <= 8192
    assert counter.feed(b"\n\n") == [("big", 1_000_000)]


@pytest.mark.parametrize("length", ["²", "-1", "9" * 40, " 12", ""])
def test_hostile_answers_and_timeouts_still_make_valid_lines(probe: Probe, length: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=[(b"content-length", length.encode())], content=b"")

    with httpx.Client(
        transport=httpx.MockTransport(answer),
        headers={"x-test-id": new_uuid7()},
        timeout=httpx.Timeout(float("inf"), read=float("nan")),
    ) as http:
        http.get("http://app/")
    probe.end("passed")
    (send,) = probe.of("probe.message.send")
    assert send["metadata"]["timeout_ms"] is None
    (head,) = probe.of("probe.network.response")
    assert head["metadata"]["content_length"] is None
