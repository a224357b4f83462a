"""Hostile input, generated (hypothesis) and from a fixed fuzz corpus: headers of every size,
encoding and number, test ids and slugs of every shape, malformed SSE, metadata no serializer
likes. Never an exception into the host (each request is answered as the bare app answers it),
and every envelope is schema-valid and within its tier's byte cap.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cvdiag import CvdiagMiddleware, MemorySink, Settings, configure
from cvdiag.pipeline.emitter import Emitter
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.vocabulary import BOUNDARY_TIER, BYTE_CAPS, METADATA_KEYS, Tier
from tests.reliability.apps import build
from tests.reliability.drivers import answer, call, http_scope, websocket_call
from tests.reliability.scale import SCALE
from tests.schema_check import assert_valid

pytestmark = pytest.mark.reliability

MEGABYTE = 1024 * 1024
TERMINALS = ("backend.response.complete", "backend.sse.aborted")
SLUG = re.compile(r"[a-z][a-z0-9-]{0,63}")
examples = settings(
    max_examples=SCALE.hypothesis_examples,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        # cvdiag_events is called afresh in every example: its state does not carry over.
        HealthCheck.function_scoped_fixture,
    ],
)

# --- strategies --------------------------------------------------------------------------------

#: Any code point, lone surrogates included (hypothesis leaves them out of text() by default).
any_char = st.characters(exclude_categories=())
any_text = st.text(any_char, max_size=300)
header_names = st.one_of(
    st.sampled_from(
        [b"x-test-id", b"x-aimock-context", b"cf-ray", b"via", b"server", b"content-length",
         b"traceparent", b"x-forwarded-for", b"user-agent"]
    ),
    st.binary(min_size=1, max_size=40),
)  # fmt: skip
#: Short values of any bytes, or long runs (up to 1 MB) of one of them.
header_values = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda unit, size: (unit * size)[:size],
        st.binary(min_size=1, max_size=8),
        st.sampled_from([1024, 16_384, 100_000, MEGABYTE]),
    ),
)
headers = st.builds(
    lambda named, filler: [*named, *[(b"x-filler-%d" % i, b"v") for i in range(filler)]],
    st.lists(st.tuples(header_names, header_values), max_size=12),
    st.sampled_from([0, 0, 10, 5000]),  # thousands of headers, sometimes
)
tiers = st.sampled_from(["default", "verbose", "debug"])
paths = st.one_of(
    st.sampled_from(["/plain", "/echo/x", "/raises", "/sse-raises", "/sse/3"]),
    st.builds(lambda tail: "/echo/" + tail, any_text),
    st.builds(lambda n: "/echo/" + "p" * n, st.sampled_from([5000, MEGABYTE])),
)


#: Settings for capturing: the debug tier's budget out of the way of generated input.
UNBOUNDED: dict[str, Any] = {"debug_max_envelopes": 10**9, "debug_max_seconds": 1e9}


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    configure(Settings(), sinks=[MemorySink()])


def checked(sink: MemorySink, tier: str) -> list[Mapping[str, Any]]:
    """Every envelope schema-valid and within the tier's cap; the slug always a valid slug."""
    cap = BYTE_CAPS[Tier[tier.upper()]]
    envelopes = list(sink.envelopes)
    for envelope, line in zip(envelopes, list(sink.lines), strict=True):
        assert_valid(envelope)
        assert len(line) <= cap
        assert SLUG.fullmatch(envelope["slug"])
    return envelopes


def one_terminal(envelopes: Sequence[Mapping[str, Any]]) -> None:
    names = [e["boundary"] for e in envelopes]
    ends = [n for n in names if n in TERMINALS]
    assert len(ends) == 1 or (not ends and "backend.error.caught" in names), names


# --- requests ------------------------------------------------------------------------------------


@examples
@given(hdrs=headers, path=paths, tier=tiers)
def test_any_headers_and_path(
    hdrs: list[tuple[bytes, bytes]], path: str, tier: str, cvdiag_events: CvdiagEvents
) -> None:
    bare = asyncio.run(_bare(path, hdrs))
    sink = cvdiag_events(tier, **UNBOUNDED)
    wrapped = asyncio.run(_wrapped(path, hdrs))
    assert wrapped == bare
    envelopes = checked(sink, tier)
    one_terminal(envelopes)
    assert len({e["test_id"] for e in envelopes}) == 1


async def _bare(path: str, hdrs: Sequence[tuple[bytes, bytes]]) -> tuple[Any, ...]:
    query = b"n=3&delay=0" if path.startswith("/sse/") else b""
    return answer(*await call(build(cvdiag=False), http_scope(path, hdrs, query=query)))


async def _wrapped(
    path: str, hdrs: Sequence[tuple[bytes, bytes]], **options: Any
) -> tuple[Any, ...]:
    query = b"n=3&delay=0" if path.startswith("/sse/") else b""
    return answer(*await call(build(**options), http_scope(path, hdrs, query=query)))


ids = st.one_of(any_text, st.binary(max_size=300).map(lambda b: b.decode("latin-1")))


@examples
@given(test_id=st.binary(max_size=300), slug=st.binary(max_size=300), option=ids)
def test_test_ids_and_slugs_of_every_shape(
    test_id: bytes, slug: bytes, option: str, cvdiag_events: CvdiagEvents
) -> None:
    hdrs = [(b"x-test-id", test_id), (b"x-aimock-context", slug)]
    bare = asyncio.run(_bare("/plain", hdrs))
    sink = cvdiag_events("verbose", **UNBOUNDED)
    assert asyncio.run(_wrapped("/plain", hdrs)) == bare
    assert asyncio.run(_wrapped("/plain", hdrs, slug=option)) == bare
    envelopes = checked(sink, "verbose")
    assert len(envelopes) == 4


FUZZ_HEADERS: dict[str, list[tuple[bytes, bytes]]] = {
    "1 MB of every edge header": [(k, b"\xff" * MEGABYTE) for k in (b"cf-ray", b"via", b"server")],
    "1 MB test id of credential": [(b"x-test-id", b"sk-proj-" + b"A" * MEGABYTE)],
    "5000 headers": [(b"h%d" % i, b"v" * 100) for i in range(5000)],
    "5000 test ids": [(b"x-test-id", b"id-%d" % i) for i in range(5000)],
    "NUL and escapes": [(b"x-test-id", b"\x00\x1b[31m\r\n"), (b"x-aimock-context", b"\x00")],
    "overlong UTF-8": [(b"x-test-id", b"\xc0\xaf\xe0\x80\xaf"), (b"via", b"\xed\xa0\x80")],
    "empty name and value": [(b"", b""), (b"x-test-id", b"")],
    "uppercase names": [(b"X-Test-Id", b"Upper"), (b"CF-RAY", b"abc")],
    "content-length of 10**30": [(b"content-length", b"1" + b"0" * 30)],
    "unicode digits content-length": [(b"content-length", "٣".encode())],
}


@pytest.mark.parametrize("case", list(FUZZ_HEADERS))
@pytest.mark.parametrize("tier", ["default", "debug"])
@pytest.mark.parametrize("path", ["/plain", "/sse/5", "/raises"])
def test_header_fuzz_corpus(case: str, tier: str, path: str, cvdiag_events: CvdiagEvents) -> None:
    hdrs = FUZZ_HEADERS[case]
    bare = asyncio.run(_bare(path, hdrs))
    sink = cvdiag_events(tier, **UNBOUNDED)
    assert asyncio.run(_wrapped(path, hdrs)) == bare
    one_terminal(checked(sink, tier))


# --- malformed SSE -------------------------------------------------------------------------------

SSE_CORPUS: dict[str, list[bytes]] = {
    "no trailing blank line": [b"data: one\n\n", b"data: two"],
    "one 1 MB event": [b"data: " + b"x" * MEGABYTE + b"\n\n"],
    "one 1 MB event in 1000 chunks": [
        b'data: {"type": "' + b"T" * 1000,
        *[b"y" * 1049] * 1000,
        b'"}\n\n',
    ],
    "1 MB event type": [b"event: " + b"e" * MEGABYTE + b"\ndata: x\n\n"],
    "binary": [bytes(range(256)) * 4, b"\n\n", b"\xff\xfe\x00\n\n"],
    "NUL and BOM": [b"\xef\xbb\xbfdata: \x00\x00\n\n"],
    "CR only": [b"data: a\rdata: b\r\r", b"data: c\r", b"\r"],
    "CRLF split": [b"data: a\r", b"\n\r", b"\n"],
    "no data lines": [b": ping\n\n" * 1000],
    "2,000 tiny events": [b"data:x\n\n" * 2_000],
    "JSON type of every oddity": [
        b'data: {"type": "\\ud800"}\n\n',
        b'data: {"type": 12}\n\n',
        b'data: {"type": "' + b"\xff" * 200 + b'"}\n\n',
        b'data: {"type": "sk-proj-AAAAAAAAAAAAAAAAAAAA"}\n\n',
        b"data: " + b"[" * 100_000 + b"\n\n",
    ],
    "empty chunks": [b"", b"data: a\n", b"", b"\n", b""],
}


@pytest.mark.parametrize("case", list(SSE_CORPUS))
@pytest.mark.parametrize("tier", ["default", "debug"])
def test_malformed_sse_corpus(case: str, tier: str, cvdiag_events: CvdiagEvents) -> None:
    chunks = SSE_CORPUS[case]
    _sse_served_as_bare(chunks, tier, cvdiag_events)


@examples
@given(chunks=st.lists(st.binary(max_size=300), max_size=20), tier=tiers)
def test_malformed_sse_generated(
    chunks: list[bytes], tier: str, cvdiag_events: CvdiagEvents
) -> None:
    _sse_served_as_bare(chunks, tier, cvdiag_events)


def _sse_served_as_bare(chunks: list[bytes], tier: str, cvdiag_events: CvdiagEvents) -> None:
    state = {"chunks": chunks}

    async def run(app: Any) -> tuple[Any, ...]:
        return answer(*await call(app, http_scope("/raw-sse", state=state)))

    bare = asyncio.run(run(build(cvdiag=False)))
    sink = cvdiag_events(tier, **UNBOUNDED)
    assert asyncio.run(run(build())) == bare
    envelopes = checked(sink, tier)
    one_terminal(envelopes)
    complete = [e for e in envelopes if e["boundary"] == "backend.response.complete"]
    assert complete[0]["metadata"]["content_length"] == sum(map(len, chunks))
    if tier == "debug" and len([c for c in chunks if c]) > 1:
        events = [e for e in envelopes if e["boundary"] == "backend.sse.event"]
        assert complete[0]["metadata"]["sse_event_count"] == len(events)


# --- WebSocket -----------------------------------------------------------------------------------


@examples
@given(texts=st.lists(st.text(max_size=300), max_size=8), code=st.integers(0, 5000), tier=tiers)
def test_websocket_messages_and_close_codes(
    texts: list[str], code: int, tier: str, cvdiag_events: CvdiagEvents
) -> None:
    # Text frames are UTF-8 on the wire: no lone surrogates here (the app could not echo them).
    texts = [t for t in texts if t != "bye"]
    bare = asyncio.run(websocket_call(build(cvdiag=False), "/ws", texts, code))
    sink = cvdiag_events(tier, **UNBOUNDED)
    assert asyncio.run(websocket_call(build(), "/ws", texts, code)) == bare
    one_terminal(checked(sink, tier))


# --- metadata no serializer likes ----------------------------------------------------------------

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # unbounded: huge ints
    st.floats(),  # NaN and infinities included
    any_text,
    st.binary(max_size=100),
)
nested = st.recursive(
    json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=70),
        st.dictionaries(st.one_of(any_text, st.integers(), st.none()), children, max_size=70),
        st.tuples(children, children),
        st.frozensets(st.integers(), max_size=5),
    ),
    max_leaves=200,
)
boundaries = st.sampled_from(sorted(BOUNDARY_TIER))


def cyclic() -> dict[str, Any]:
    loop: dict[str, Any] = {"list": []}
    loop["self"] = loop
    loop["list"].append(loop["list"])
    return loop


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


@examples
@given(boundary=boundaries, values=st.lists(nested, min_size=1, max_size=6), tier=tiers)
def test_any_metadata(boundary: str, values: list[Any], tier: str) -> None:
    keys = [*sorted(METADATA_KEYS.get(boundary, ())), "not_a_key"]
    metadata = {keys[i % len(keys)]: value for i, value in enumerate(values)}
    metadata[keys[0]] = [metadata.get(keys[0]), cyclic(), deep(5000), math.nan, 2**4000]
    sink = MemorySink(maxlen=None)
    emitter = Emitter(
        Settings(enabled=True, tier=tier, debug_max_envelopes=10**9),  # type: ignore[arg-type]
        sinks=[sink],
    )
    emitter.emit(boundary, metadata=metadata, duration_ms=math.inf)
    emitter.emit(boundary, metadata=metadata, outcome="not-an-outcome", duration_ms=-math.inf)
    allowed = BOUNDARY_TIER[boundary] <= Tier[tier.upper()]
    assert emitter.emitted == len(sink.envelopes) == (2 if allowed else 0)  # nothing lost
    checked(sink, tier)


def test_a_middleware_with_a_hostile_slug_option(cvdiag_events: CvdiagEvents) -> None:
    for slug in ("", "\x00", "9" * 1000, "Ünïcödé", "sk-proj-" + "A" * 40, "\ud800"):
        sink = cvdiag_events("verbose", **UNBOUNDED)
        app = CvdiagMiddleware(build(cvdiag=False), slug=slug)
        assert asyncio.run(_answer(app)) == asyncio.run(_bare("/plain", ()))
        for envelope in checked(sink, "verbose"):
            assert SLUG.fullmatch(envelope["slug"])


async def _answer(app: Any) -> tuple[Any, ...]:
    return answer(*await call(app, http_scope("/plain")))


@pytest.mark.parametrize("duration", [10**400, object(), "soon"], ids=["huge-int", "object", "str"])
def test_an_odd_duration_loses_nothing(duration: Any) -> None:
    sink = MemorySink()
    emitter = Emitter(Settings(enabled=True), sinks=[sink])
    emitter.emit("backend.agent.exit", duration_ms=duration)
    assert len(sink.envelopes) == 1
