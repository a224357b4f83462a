"""The HTTP state machine, driven in-process through raw ASGI calls."""

from __future__ import annotations

import asyncio
import json
import re
import time
from types import MappingProxyType
from typing import Any

import pytest
from starlette.requests import ClientDisconnect

from cvdiag import (
    CvdiagMiddleware,
    MemorySink,
    Settings,
    configure,
    current_context,
    get_emitter,
)
from cvdiag.core.context import RequestContext
from cvdiag.core.guard import failures
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.vocabulary import DENIED_HEADERS, EDGE_HEADER_KEYS, Tier
from tests.support.asgi_apps import (
    FAKE_KEY,
    boundaries,
    call,
    check_all,
    http_scope,
    make_app,
    only,
    terminals,
    without_echo,
)
from tests.support.compiled import patches_internals

UUID7 = "0190d6a0-5c2e-7c3a-9f1e-2b3c4d5e6f70"


def sse_messages(*chunks: bytes, status: int = 200, ctype: bytes = b"text/event-stream") -> Any:
    """A raw ASGI app sending ``chunks`` as a stream and then the empty final body."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", ctype)]}
        )
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


# --- what each tier sees -------------------------------------------------------------------------


async def test_debug_tier_tells_the_whole_sse_story(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("debug")
    app = make_app()
    sent = await call(
        app, http_scope("/chat/sse", [(b"x-test-id", UUID7.encode())], query_string=b"n=3")
    )
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    envelopes = check_all(sink)
    assert boundaries(envelopes) == [
        "backend.request.ingress",
        "backend.sse.first_byte",
        *["backend.sse.event"] * 3,
        "backend.response.complete",
    ]
    ingress = envelopes[0]
    assert ingress["metadata"] == {"method": "GET", "path": "/chat/sse", "content_length": None}
    assert ingress["parent_span_id"] is None
    assert ingress["demo"] == "chat"
    assert ingress["slug"] == "unknown"
    for envelope in envelopes:
        assert envelope["test_id"] == UUID7
        assert envelope["trace_id"] == ingress["trace_id"]
    for envelope in envelopes[1:]:
        assert envelope["parent_span_id"] == ingress["span_id"]
    events = [e["metadata"] for e in envelopes if e["boundary"] == "backend.sse.event"]
    assert [e["sequence_num"] for e in events] == [0, 1, 2]
    assert {e["event_type"] for e in events} == {"TEXT_MESSAGE_CONTENT"}
    assert events[0]["payload_size_bytes"] == len(
        b'{"type":"TEXT_MESSAGE_CONTENT","delta":"token 0"}'
    )
    complete = envelopes[-1]
    body = b"".join(m.get("body", b"") for m in sent)
    assert complete["metadata"]["http_status"] == 200
    assert complete["metadata"]["content_length"] == len(body)
    assert complete["metadata"]["sse_event_count"] == 3
    assert complete["outcome"] == "ok"
    assert complete["duration_ms"] is not None


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        ("default", ["backend.response.complete"]),
        (
            "verbose",
            ["backend.request.ingress", "backend.sse.first_byte", "backend.response.complete"],
        ),
    ],
)
async def test_lower_tiers_still_count_events(
    cvdiag_events: CvdiagEvents, tier: str, expected: list[str]
) -> None:
    sink = cvdiag_events(tier)
    await call(make_app(), http_scope("/chat/sse", query_string=b"n=5"))
    envelopes = check_all(sink, tier)
    assert boundaries(envelopes) == expected
    assert envelopes[-1]["metadata"]["sse_event_count"] == 5


async def test_non_streaming_response_gets_ingress_and_complete_only(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("debug")
    await call(make_app(), http_scope("/plain"))
    envelopes = check_all(sink)
    assert boundaries(envelopes) == ["backend.request.ingress", "backend.response.complete"]
    complete = envelopes[-1]
    assert complete["metadata"] == {
        "http_status": 200,
        "content_length": 5,
        "total_duration_ms": complete["metadata"]["total_duration_ms"],
        "sse_event_count": 0,
    }
    assert complete["edge_headers"]["server"] == "unit"
    assert complete["edge_headers"]["cf-cache-status"] == "HIT"


async def test_a_stream_that_is_not_sse_counts_chunks(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("debug")
    await call(make_app(), http_scope("/chunks"))
    envelopes = check_all(sink)
    events = [e["metadata"] for e in envelopes if e["boundary"] == "backend.sse.event"]
    assert events == [
        {"event_type": "chunk", "payload_size_bytes": 3, "sequence_num": 0},
        {"event_type": "chunk", "payload_size_bytes": 3, "sequence_num": 1},
        {"event_type": "chunk", "payload_size_bytes": 5, "sequence_num": 2},
    ]
    assert only(envelopes, "backend.response.complete")["metadata"]["sse_event_count"] == 3


@pytest.mark.parametrize("tier", ["default", "verbose"])
async def test_a_stream_that_is_not_sse_counts_chunks_below_debug(
    cvdiag_events: CvdiagEvents, tier: str
) -> None:
    sink = cvdiag_events(tier)
    await call(make_app(), http_scope("/chunks"))
    complete = only(list(sink.envelopes), "backend.response.complete")["metadata"]
    assert (complete["sse_event_count"], complete["content_length"]) == (3, 11)


@pytest.mark.parametrize("tier", ["default", "debug"])
async def test_body_messages_that_are_other_mappings_are_counted_as_dicts_are(
    cvdiag_events: CvdiagEvents, tier: str
) -> None:
    # Servers pass dicts, and the hot path reads those alone; a middleware between may pass
    # another mapping, which is seen chunk by chunk instead: the same count, passed on as is.
    events = [b'data: {"type":"A"}\n\n', b'data: {"type":"B"}\n\n', b"data: c\n\n"]
    chunks = [
        MappingProxyType({"type": "http.response.body", "body": events[0], "more_body": True}),
        {"type": "http.response.body", "body": events[1], "more_body": True},
        MappingProxyType({"type": "http.response.body", "body": events[2], "more_body": True}),
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for chunk in chunks:
            await send(chunk)

    sink = cvdiag_events(tier)
    sent = await call(CvdiagMiddleware(app), http_scope("/"))
    assert all(a is b for a, b in zip(sent[1:], chunks, strict=True))
    complete = only(list(sink.envelopes), "backend.response.complete")["metadata"]
    assert (complete["sse_event_count"], complete["content_length"]) == (3, len(b"".join(events)))


async def test_events_are_counted_per_event_not_per_chunk(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("debug")
    app = CvdiagMiddleware(
        sse_messages(
            b"event: a\r\ndata: 1\r", b"\n\r\ndata: 2\n\ndata: 3\n", b"\n: ping\n\n", b"data: tail"
        )
    )
    await call(app, http_scope("/"))
    envelopes = check_all(sink)
    events = [e["metadata"] for e in envelopes if e["boundary"] == "backend.sse.event"]
    assert [(e["event_type"], e["sequence_num"]) for e in events] == [
        ("a", 0),
        ("message", 1),
        ("message", 2),
    ]
    assert only(envelopes, "backend.response.complete")["metadata"]["sse_event_count"] == 3


@pytest.mark.parametrize("tier", ["default", "debug"])
async def test_event_count_survives_batching_big_chunks_and_mutable_bodies(
    cvdiag_events: CvdiagEvents, tier: str
) -> None:
    events = [b"data: %d\n\n" % i for i in range(70)]
    events[10] = b"data: " + b"x" * 5000 + b"\n\n"  # larger than a held chunk
    events[40] = b"event: e\r\ndata: crlf\r\n\r\n"
    stream = b"".join(events) + b": ping\n\n"
    cuts = [stream[i : i + 37] for i in range(0, len(stream), 37)]  # events split everywhere
    bodies: list[Any] = [
        bytearray(c) if i % 3 == 0 else memoryview(c) if i % 3 == 1 else c
        for i, c in enumerate(cuts)
    ]
    sink = cvdiag_events(tier)
    await call(CvdiagMiddleware(sse_messages(*bodies)), http_scope("/"))
    complete = only(list(sink.envelopes), "backend.response.complete")["metadata"]
    assert complete["sse_event_count"] == 70
    assert complete["content_length"] == len(stream)


async def test_final_body_message_may_carry_the_last_event(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"data: 2\n\n"})

    await call(CvdiagMiddleware(app), http_scope("/"))
    assert (
        only(list(sink.envelopes), "backend.response.complete")["metadata"]["sse_event_count"] == 2
    )


async def test_error_status_is_an_err_outcome(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    await call(CvdiagMiddleware(sse_messages(b"data: x\n\n", status=503)), http_scope("/"))
    complete = only(list(sink.envelopes), "backend.response.complete")
    assert (complete["outcome"], complete["metadata"]["http_status"]) == ("err", 503)


# --- exactly one terminal ----------------------------------------------------------------------


async def test_error_before_the_response_is_reported_then_completes_500(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("debug")
    with pytest.raises(ValueError, match="upstream refused") as raised:
        await call(make_app(), http_scope("/chat/raises"))
    envelopes = check_all(sink)
    assert boundaries(envelopes) == [
        "backend.request.ingress",
        "backend.error.caught",
        "backend.response.complete",
    ]
    complete = envelopes[-1]
    assert complete["outcome"] == "err"
    assert complete["metadata"]["http_status"] == 500  # what the server answers
    error = envelopes[-2]
    assert error["outcome"] == "err"
    assert error["metadata"]["exception_type"] == "ValueError"
    assert "[REDACTED]" in error["metadata"]["message_scrubbed"]
    assert FAKE_KEY not in str(envelopes)
    assert any(
        f["file"].endswith("tests/support/asgi_apps.py") for f in error["metadata"]["stack_brief"]
    )
    assert FAKE_KEY in str(raised.value)  # the app's exception is re-raised unchanged


async def test_wrapping_the_whole_app_tells_the_error_then_the_500(
    cvdiag_events: CvdiagEvents,
) -> None:
    """ServerErrorMiddleware answers 500 through cvdiag, then re-raises: the story tells the
    error, then the terminal (a 5xx's is written at the app's exit)."""
    sink = cvdiag_events("default")
    app = _bare()
    with pytest.raises(ValueError, match="upstream refused"):
        await call(CvdiagMiddleware(app), http_scope("/chat/raises"))
    envelopes = check_all(sink, "default")
    assert boundaries(envelopes) == ["backend.error.caught", "backend.response.complete"]
    assert (envelopes[1]["outcome"], envelopes[1]["metadata"]["http_status"]) == ("err", 500)
    assert len(terminals(envelopes)) == 1


async def test_error_mid_stream_is_error_caught_then_chunk_error(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("debug")
    with pytest.raises(RuntimeError, match="stream broke"):
        await call(make_app(), http_scope("/chat/sse-raises"))
    envelopes = check_all(sink)
    assert boundaries(envelopes)[-2:] == ["backend.error.caught", "backend.sse.aborted"]
    aborted = envelopes[-1]
    assert aborted["metadata"]["termination_kind"] == "chunk_error"
    assert aborted["metadata"]["bytes_before_abort"] == 2 * len(
        b'data: {"type":"TEXT_MESSAGE_CONTENT","delta":"token 0"}\n\n'
    )
    assert len(terminals(envelopes)) == 1
    assert FAKE_KEY not in str(envelopes)


@pytest.mark.parametrize("tier", ["default", "verbose", "debug"])
async def test_an_abort_accounts_for_every_chunk_sent_before_it(
    cvdiag_events: CvdiagEvents, tier: str
) -> None:
    # Below the debug tier mid-stream chunks are only held and counted in batches: a terminal
    # must still see every byte that went out before it.
    events = [b"data: %d\n\n" % i for i in range(5)]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        raise RuntimeError("stream broke")

    sink = cvdiag_events(tier)
    with pytest.raises(RuntimeError):
        await call(CvdiagMiddleware(app), http_scope("/"))
    terminal = only(list(sink.envelopes), "backend.sse.aborted")
    aborted = terminal["metadata"]
    # The stream was never silent longer than it lasted (nothing here waits between chunks).
    assert 0 <= aborted.pop("silence_ms") <= terminal["duration_ms"]
    assert aborted == {
        "termination_kind": "chunk_error",
        "bytes_before_abort": len(b"".join(events)),
        "termination_cause": "app_error",
    }


async def test_error_after_the_response_is_reported_without_a_second_terminal(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        raise LookupError("background task failed")

    with pytest.raises(LookupError):
        await call(CvdiagMiddleware(app), http_scope("/"))
    assert boundaries(list(sink.envelopes)) == ["backend.response.complete", "backend.error.caught"]


async def test_client_disconnect_on_receive_is_an_abort_not_an_error(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("debug")
    incoming: list[dict[str, Any]] = [
        {"type": "http.request", "body": b"", "more_body": False},
        {"type": "http.disconnect"},
    ]
    # Starlette (ASGI 2.3) listens for the disconnect and cancels the stream mid-way.
    await call(make_app(), http_scope("/chat/sse", query_string=b"n=1000&delay=0.001"), incoming)
    envelopes = check_all(sink)
    assert "backend.error.caught" not in boundaries(envelopes)
    (aborted,) = terminals(envelopes)
    assert aborted["boundary"] == "backend.sse.aborted"
    assert aborted["metadata"]["termination_kind"] == "rst"
    assert aborted["metadata"]["termination_cause"] == "client_disconnect"


async def test_oserror_from_send_is_a_client_disconnect(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("debug")
    app = make_app()
    sent = 0

    async def send(message: Any) -> None:
        nonlocal sent
        if message["type"] == "http.response.body" and sent >= 2:
            raise OSError("connection reset by peer")
        sent += message["type"] == "http.response.body"

    async def receive() -> Any:
        await asyncio.Event().wait()

    # ASGI 2.4: Starlette turns the OSError into ClientDisconnect and lets it escape.
    scope = http_scope(
        "/chat/sse", query_string=b"n=10", asgi={"version": "3.0", "spec_version": "2.4"}
    )
    with pytest.raises(ClientDisconnect):
        await app(scope, receive, send)
    envelopes = check_all(sink)
    assert "backend.error.caught" not in boundaries(envelopes)
    (aborted,) = terminals(envelopes)
    assert aborted["metadata"]["termination_kind"] == "rst"
    assert aborted["metadata"]["termination_cause"] == "send_failed"
    assert aborted["metadata"]["bytes_before_abort"] > 0
    assert only(envelopes, "backend.sse.first_byte")


async def test_cancellation_is_an_abort_not_an_error(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    started = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        started.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(call(CvdiagMiddleware(app), http_scope("/")))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (aborted,) = terminals(list(sink.envelopes))
    assert 0 <= aborted["metadata"].pop("silence_ms") <= aborted["duration_ms"]
    assert aborted["metadata"] == {
        "termination_kind": "fin_premature",
        "bytes_before_abort": 1,
        "termination_cause": "cancelled",
    }
    assert "backend.error.caught" not in boundaries(list(sink.envelopes))


@pytest.mark.parametrize(
    ("messages", "kind"),
    [
        ([{"type": "http.response.start", "status": 200, "headers": []}], "incomplete"),
        ([], "no_response"),
    ],
)
async def test_app_returning_without_finishing(
    cvdiag_events: CvdiagEvents, messages: list[Any], kind: str
) -> None:
    sink = cvdiag_events("default")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        for message in messages:
            await send(message)

    await call(CvdiagMiddleware(app), http_scope("/"))
    (aborted,) = terminals(list(sink.envelopes))
    assert aborted["metadata"]["termination_kind"] == "fin_premature"
    assert aborted["metadata"]["termination_cause"] == kind


async def test_disconnect_after_the_body_is_not_an_abort(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})
        assert (await receive())["type"] == "http.disconnect"  # uvicorn says so once complete

    await call(CvdiagMiddleware(app), http_scope("/"), [{"type": "http.disconnect"}])
    assert boundaries(list(sink.envelopes)) == ["backend.response.complete"]


# --- context, ids, slug, demo, headers -----------------------------------------------------------


async def test_context_is_set_for_the_app_and_reset_after(cvdiag_events: CvdiagEvents) -> None:
    cvdiag_events("default")
    seen: list[RequestContext | None] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(current_context())
        seen.append(await asyncio.create_task(_current()))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    headers = [(b"x-test-id", b"Run-7 \x01"), (b"x-aimock-context", b"Agentic Chat!")]
    await call(CvdiagMiddleware(app), http_scope("/chat/x/y", headers))
    assert seen[0] is not None
    assert seen[0] == seen[1]
    assert (seen[0].test_id, seen[0].slug, seen[0].demo) == ("run-7", "agentic-chat", "chat")
    assert seen[0].span_id is not None
    assert current_context() is None


async def _current() -> RequestContext | None:
    return current_context()


@pytest.mark.parametrize(
    ("option", "headers", "expected"),
    [
        ("svc", [(b"x-aimock-context", b"other")], "svc"),
        (None, [(b"x-aimock-context", b"!!!"), (b"x-slug", b"second-choice")], "second-choice"),
        (None, [(b"x-aimock-context", b"42")], "unknown"),
        ("Agentic Chat", [], "agentic-chat"),  # the option is sanitized like a header
        ("!!!", [(b"x-aimock-context", b"from-header")], "from-header"),  # unusable: ignored
    ],
)
async def test_slug_resolution(
    cvdiag_events: CvdiagEvents, option: str | None, headers: Any, expected: str
) -> None:
    sink = cvdiag_events("default")
    app = CvdiagMiddleware(sse_messages(), slug=option, slug_headers=("x-aimock-context", "X-Slug"))
    await call(app, http_scope("/", headers))
    assert sink.envelopes[-1]["slug"] == expected


@pytest.mark.parametrize(
    ("path", "demo"),
    [("/", "default"), ("/agentic-chat", "agentic-chat"), ("/a/b/c", "a"), ("", "default")],
)
async def test_demo_is_the_first_path_segment(
    cvdiag_events: CvdiagEvents, path: str, demo: str
) -> None:
    sink = cvdiag_events("default")
    await call(CvdiagMiddleware(sse_messages()), http_scope(path))
    assert sink.envelopes[-1]["demo"] == demo


async def test_test_id_headers_in_order_and_minted_fallback(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    app = CvdiagMiddleware(sse_messages(), test_id_headers=("x-first", "x-test-id"))
    await call(app, http_scope("/", [(b"x-test-id", b"second"), (b"x-first", b"first")]))
    await call(app, http_scope("/", [(b"x-test-id", UUID7.upper().encode())]))
    await call(app, http_scope("/"))
    envelopes = check_all(sink, "default")
    ids = [e["test_id"] for e in envelopes]
    assert ids[:2] == ["first", UUID7]
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", ids[2]
    )
    # A request no test sent is its own test: one UUIDv7 minted, its trace id and its test id;
    # a sent id leaves the trace its own.
    assert envelopes[2]["trace_id"] == ids[2]
    assert envelopes[0]["trace_id"] != "first"
    assert envelopes[1]["trace_id"] != UUID7


async def test_each_request_gets_its_own_trace_and_span(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose")
    app = make_app()
    await call(app, http_scope("/plain"))
    await call(app, http_scope("/plain"))
    first, second = (e for e in sink.envelopes if e["boundary"] == "backend.request.ingress")
    assert first["trace_id"] != second["trace_id"]
    assert first["span_id"] != second["span_id"]
    assert first["test_id"] != second["test_id"]


async def test_edge_headers_are_allow_listed_scrubbed_and_cut(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose")
    headers = [
        (b"cf-ray", b"8f1e2d3c4b5a6978-AMS"),
        (b"via", b"1.1 proxy token=" + FAKE_KEY.encode()),
        (b"x-railway-request-id", b"r" * 5000),
        (b"authorization", b"Bearer " + FAKE_KEY.encode()),
        *[(name.encode(), b"203.0.113.9-" + name.encode()) for name in DENIED_HEADERS],
    ]
    await call(make_app(), http_scope("/plain", headers))
    envelopes = check_all(sink, "verbose")
    edge = only(envelopes, "backend.request.ingress")["edge_headers"]
    assert set(edge) == set(EDGE_HEADER_KEYS)
    assert edge["cf-ray"] == "8f1e2d3c4b5a6978-AMS"
    assert edge["via"] == "1.1 proxy token=[REDACTED]"
    assert edge["x-railway-request-id"] == "r" * 256
    assert edge["server"] is None
    lines = b"".join(sink.lines)
    assert b"203.0.113.9" not in lines
    assert FAKE_KEY.encode() not in lines


# --- switches -----------------------------------------------------------------------------------


async def test_disabled_is_a_pass_through(cvdiag_events: CvdiagEvents) -> None:
    configure(Settings(enabled=False), sinks=[sink := MemorySink()])
    bare = await call(_bare(), http_scope("/chat/sse"))
    wrapped = await call(make_app(), http_scope("/chat/sse"))
    assert wrapped == bare
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.extend((receive, send, current_context()))

    async def receive() -> Any:
        return {}

    async def send(message: Any) -> None:
        pass

    await CvdiagMiddleware(app)(http_scope("/"), receive, send)
    assert seen == [receive, send, None]  # the app gets the server's own callables
    assert not sink.envelopes


def _bare() -> Any:
    app = make_app()
    app.user_middleware.clear()
    return app


async def test_configure_after_construction_takes_effect(cvdiag_events: CvdiagEvents) -> None:
    app = make_app()
    configure(Settings(enabled=False), sinks=[MemorySink()])
    await call(app, http_scope("/plain"))
    sink = cvdiag_events("default")  # as the pytest plugin does, after the app exists
    await call(app, http_scope("/plain"))
    assert boundaries(list(sink.envelopes)) == ["backend.response.complete"]


async def test_own_settings_write_to_stdout(
    cvdiag_events: CvdiagEvents, capsys: pytest.CaptureFixture[str]
) -> None:
    process_wide = cvdiag_events("debug")
    middleware = CvdiagMiddleware(
        sse_messages(b"data: 1\n\n"), settings=Settings(enabled=True, tier=Tier.VERBOSE)
    )
    await call(middleware, http_scope("/"))
    assert middleware._emitter is not None
    middleware._emitter.flush()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("CVDIAG {")]
    assert [re.search(r'"boundary":"([^"]+)"', line).group(1) for line in lines] == [  # type: ignore[union-attr]
        "backend.request.ingress",
        "backend.sse.first_byte",
        "backend.response.complete",
    ]
    assert not process_wide.envelopes


async def test_lifespan_and_unknown_scopes_pass_through_untouched(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("debug")
    seen: list[Any] = []
    sent: list[Any] = []
    messages = [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["type"], receive, current_context()))
        for message in messages:
            await send(message)

    async def receive() -> Any:
        return {"type": "lifespan.startup"}

    async def send(message: Any) -> None:
        sent.append(message)

    middleware = CvdiagMiddleware(app)
    await middleware({"type": "lifespan"}, receive, send)
    await middleware({"type": "custom.protocol"}, receive, send)
    assert seen == [("lifespan", receive, None), ("custom.protocol", receive, None)]
    assert sent == messages * 2  # every message reaches the server unchanged, in order
    assert all(a is b for a, b in zip(sent, messages * 2, strict=True))
    assert not sink.envelopes


async def test_lifespan_shutdown_writes_what_is_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the server hears shutdown is complete, queued envelopes are written."""
    import io
    import sys
    import time

    from cvdiag import StdoutSink

    class SlowStdout(io.StringIO):
        def write(self, s: str) -> int:
            time.sleep(0.2)  # a slow log pipe: without a flush, nothing is written in time
            return super().write(s)

    stdout = SlowStdout()
    monkeypatch.setattr(sys, "stdout", stdout)
    configure(Settings(enabled=True), sinks=[StdoutSink()])
    written_at_completion: list[int] = []
    try:
        for _ in range(50):
            get_emitter().emit("backend.error.caught")

        async def app(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "lifespan.shutdown.complete"})

        async def send(message: Any) -> None:
            written_at_completion.append(stdout.getvalue().count("CVDIAG {"))

        async def receive() -> Any:
            return {"type": "lifespan.shutdown"}

        await CvdiagMiddleware(app)({"type": "lifespan"}, receive, send)
    finally:
        configure(Settings(), sinks=[MemorySink()])
    assert written_at_completion == [50]


async def test_a_call_outstanding_at_shutdown_ends_saying_so(cvdiag_events: CvdiagEvents) -> None:
    from cvdiag import llm_call

    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    waiting = asyncio.Event()

    async def hung_call() -> None:
        async with llm_call("fake", "fake-1"):
            waiting.set()
            await asyncio.Event().wait()  # a provider that never answers

    task = asyncio.ensure_future(hung_call())
    await waiting.wait()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "lifespan.shutdown.complete"})

    async def send(message: Any) -> None:
        pass

    async def receive() -> Any:
        return {"type": "lifespan.shutdown"}

    await CvdiagMiddleware(app)({"type": "lifespan"}, receive, send)
    (answer,) = [e for e in sink.envelopes if e["boundary"] == "backend.llm.call.response"]
    assert (answer["outcome"], answer["metadata"]["error_class"]) == ("err", "Shutdown")
    await asyncio.sleep(0.1)
    assert list(sink.envelopes)[-1] is answer  # no heartbeat after it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len([e for e in sink.envelopes if e["boundary"] == "backend.llm.call.response"]) == 1


def test_a_call_outstanding_at_exit_or_sigterm_ends_saying_so(cvdiag_events: CvdiagEvents) -> None:
    from cvdiag import llm_call
    from cvdiag.sinks import flush_all

    sink = cvdiag_events("verbose")
    with llm_call("fake", "fake-1"):
        flush_all(timeout=1.0)  # what atexit and the SIGTERM handler run
        (answer,) = [e for e in sink.envelopes if e["boundary"] == "backend.llm.call.response"]
    assert answer["metadata"]["error_class"] == "Shutdown"
    assert len([e for e in sink.envelopes if e["boundary"] == "backend.llm.call.response"]) == 1


async def test_pathsend_counts_the_files_size(cvdiag_events: CvdiagEvents, tmp_path: Any) -> None:
    sink = cvdiag_events("default")
    served = tmp_path / "report.bin"
    served.write_bytes(b"x" * 123_456)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.pathsend", "path": str(served)})

    await call(CvdiagMiddleware(app), http_scope("/"))
    (terminal,) = terminals(list(sink.envelopes))
    assert terminal["boundary"] == "backend.response.complete"
    assert terminal["metadata"]["content_length"] == 123_456


async def test_a_declared_length_fully_sent_is_complete_though_the_client_left_first(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")
    incoming: list[dict[str, Any]] = [{"type": "http.request", "body": b""}]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"10")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"0123456789", "more_body": True})
        await receive()  # the request body
        await receive()  # the client, with every promised byte, hangs up
        await send({"type": "http.response.body", "body": b""})

    incoming.append({"type": "http.disconnect"})
    await call(CvdiagMiddleware(app), http_scope("/"), incoming)
    (terminal,) = terminals(list(sink.envelopes))
    assert terminal["boundary"] == "backend.response.complete"
    assert terminal["metadata"]["content_length"] == 10


async def test_exclude_paths_exact_and_regex(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("debug")
    app = make_app(exclude_paths=("/health", re.compile(r"/chat/sse.*")))
    await call(app, http_scope("/health"))
    await call(app, http_scope("/chat/sse"))
    await call(app, http_scope("/health/deep"))  # exact means exact
    await call(app, http_scope("/plain"))
    paths = [
        e["metadata"]["path"] for e in sink.envelopes if e["boundary"] == "backend.request.ingress"
    ]
    assert paths == ["/health/deep", "/plain"]


# --- cvdiag's own failures never reach the host --------------------------------------------


@patches_internals
async def test_a_failure_inside_cvdiag_is_counted_and_the_request_proceeds(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = cvdiag_events("default")

    class Broken:
        def feed(self, chunk: bytes) -> int:
            raise RuntimeError("parser bug")

    monkeypatch.setattr("cvdiag.asgi.http_response.SSECounter", Broken)
    before = failures["middleware"]
    bare = await call(_bare(), http_scope("/chat/sse"))
    wrapped = await call(make_app(), http_scope("/chat/sse"))
    assert without_echo(wrapped) == bare
    assert failures["middleware"] == before + 1
    assert not terminals(list(sink.envelopes))  # cvdiag stepped aside for this request


@patches_internals
async def test_a_failure_while_starting_is_counted_and_the_request_proceeds(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    cvdiag_events("default")

    def broken() -> str:
        raise RuntimeError("id source down")

    monkeypatch.setattr("cvdiag.asgi.middleware.new_span_id", broken)
    before = failures["middleware"]
    sent = await call(make_app(), http_scope("/plain"))
    assert sent[0]["status"] == 200
    assert failures["middleware"] == before + 1


async def test_an_exception_reported_by_a_scope_is_not_reported_again(
    cvdiag_events: CvdiagEvents,
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    from cvdiag import agent_scope

    sink = cvdiag_events("debug")

    async def failing(request: Any) -> Any:
        async with agent_scope("planner"):
            raise RuntimeError("tool failed")

    app = Starlette(routes=[Route("/fail", failing)])
    app.add_middleware(CvdiagMiddleware)
    with pytest.raises(RuntimeError, match="tool failed"):
        await call(app, http_scope("/fail"))
    envelopes = check_all(sink)
    errors = [e for e in envelopes if e["boundary"] == "backend.error.caught"]
    assert len(errors) == 1  # the scope's: it names the failing agent's span as its parent
    (enter,) = [e for e in envelopes if e["boundary"] == "backend.agent.enter"]
    assert errors[0]["parent_span_id"] == enter["span_id"]
    assert boundaries(envelopes)[-3:] == [
        "backend.error.caught",
        "backend.agent.exit",
        "backend.response.complete",
    ]
    assert terminals(envelopes)[0]["metadata"]["http_status"] == 500


async def test_a_middleware_with_its_own_settings_serves_scopes_inside_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    import sys

    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from cvdiag import agent_scope, emit, flush

    stdout = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    configure(Settings(), sinks=[MemorySink()])  # the process-wide emitter is off

    async def handler(request: Any) -> Any:
        async with agent_scope("planner"):
            emit("backend.error.caught", outcome="err")
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", handler)])
    app.add_middleware(CvdiagMiddleware, settings=Settings(enabled=True, tier="verbose"))
    await call(app, http_scope("/"))
    emit("backend.error.caught")  # outside the request: the process-wide emitter, off
    own = app.middleware_stack.app  # type: ignore[union-attr]
    while not isinstance(own, CvdiagMiddleware):
        own = own.app
    own._emitter.flush()  # type: ignore[union-attr]
    flush()
    lines = [line for line in stdout.getvalue().splitlines() if line.startswith("CVDIAG {")]
    names = [json.loads(line[7:])["boundary"] for line in lines]
    assert names == [
        "backend.request.ingress",
        "backend.agent.enter",
        "backend.error.caught",
        "backend.agent.exit",
        "backend.response.complete",
    ]


@pytest.mark.parametrize(
    ("first", "keepalive"),
    [
        (b": ping\n\n", True),
        (b": ping - 2026-11-25 20:00:00\r\n\r\n", True),  # sse-starlette's shape
        (b"\n\n", True),  # blank lines carry no event either
        (b": ping\n\ndata: hello\n\n", False),  # a comment, then an event in the same chunk
        (b"data: hello\n\n", False),
        (b"event: RUN_STARTED\ndata: {}\n\n", False),
    ],
)
@pytest.mark.parametrize("tier", ["verbose", "debug"])
async def test_a_first_chunk_of_comments_only_is_marked_keepalive(
    cvdiag_events: CvdiagEvents, tier: str, first: bytes, keepalive: bool
) -> None:
    sink = cvdiag_events(tier)
    await call(CvdiagMiddleware(sse_messages(first, b"data: x\n\n")), http_scope("/chat"))
    (first_byte,) = [e for e in check_all(sink, tier) if e["boundary"] == "backend.sse.first_byte"]
    assert first_byte["metadata"].get("keepalive", False) is keepalive
    assert ("keepalive" in first_byte["metadata"]) is keepalive  # present only when true


async def _passes(seconds: float) -> float:
    """Wait until ``seconds`` have gone by (a condition on the clock, whatever the load)."""
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        await asyncio.sleep(0.005)
    return start


@pytest.mark.parametrize("tier", ["default", "verbose", "debug"])
async def test_an_aborted_terminal_says_how_long_the_stream_had_been_silent(
    cvdiag_events: CvdiagEvents, tier: str
) -> None:
    """``silence_ms`` counts from the last chunk the app sent, not from its head: a stream that
    waited after its head, sent its chunks, then fell silent until its client left. At the
    default tier its chunks are only held (the hot path), and the silence is still the last one's.
    """
    quiet_before, quiet_after = 0.06, 0.08
    sink = cvdiag_events(tier)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await _passes(quiet_before)  # the model thinking: silence, but not the last one
        for i in range(3):
            await send(
                {"type": "http.response.body", "body": b"data: %d\n\n" % i, "more_body": True}
            )
        while (await receive())["type"] != "http.disconnect":
            pass

    async def receive() -> dict[str, Any]:
        if not asked:
            asked.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await _passes(quiet_after)  # the client leaves after this much silence
        return {"type": "http.disconnect"}

    asked: list[bool] = []

    async def send(message: Any) -> None:
        pass

    await CvdiagMiddleware(app)(http_scope("/"), receive, send)
    (aborted,) = terminals(list(sink.envelopes))
    assert aborted["metadata"]["termination_cause"] == "client_disconnect"
    silence, duration = aborted["metadata"]["silence_ms"], aborted["duration_ms"]
    assert silence >= quiet_after * 1000 - 1  # whole milliseconds, rounded
    assert silence <= duration - quiet_before * 1000 + 1  # not since the head went
