"""Secrets: every credential shape of the corpus, placed everywhere a request or the code
around it can put text, reaches no sink — not stdout, not a file, not logging, not
OpenTelemetry (span names, attributes, events), and not cvdiag's own stderr reports.

The scrubber's worst case on 10 MB of adversarial input is a figure (benchmarks/reliability.py),
not an assertion here.
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan

from cvdiag import (
    FileSink,
    LoggingSink,
    MemorySink,
    Settings,
    StdoutSink,
    Tier,
    configure,
    scrub,
)
from cvdiag.otel.span_events import SpanEventSink
from cvdiag.scrubbing.passes import redact
from tests.reliability.apps import build
from tests.reliability.drivers import answer, call, http_scope, websocket_call
from tests.reliability.scale import SCALE
from tests.reliability.secret_corpus import SHAPES, leaks
from tests.schema_check import assert_valid
from tests.support.otel import sdk

pytestmark = pytest.mark.reliability

#: Each credential with some text around it, as it would sit in a message.
PLACED = {name: f"failed with {text} (retrying)" for name, (text, _) in SHAPES.items()}


def test_the_corpus_is_large_and_every_shape_is_redacted() -> None:
    assert len(SHAPES) >= 40
    providers = {name.split("-")[0] for name in SHAPES}
    assert len(providers) >= 30
    for name, text in PLACED.items():
        # A token counts at a token boundary (punctuation, space, an escape), never inside a word.
        for wrapped in (text, f'{{"v": "{text}"}}', f"x={text}", f"<{text}>", f"'{text}'"):
            assert leaks(scrub(wrapped)) == [], (name, scrub(wrapped))


def percent_encoded(text: str, times: int) -> str:
    for _ in range(times):
        text = quote(text, safe="")
    return text


@pytest.mark.parametrize("times", [1, 2], ids=["encoded", "encoded-twice"])
def test_percent_encoded_shapes_are_redacted(times: int) -> None:
    # A credential inside a URL-encoded redirect parameter of an error message's URL, or in a
    # path a client encoded twice.
    for name, (text, _) in SHAPES.items():
        hidden = f"GET /cb?next={percent_encoded(text, times)}&x=1 failed"
        out = scrub(hidden)
        assert leaks(out) == [], (name, out)
        assert scrub(out) == out


@settings(max_examples=SCALE.hypothesis_examples, deadline=None)
@given(
    st.text(max_size=100),
    st.sampled_from(sorted(SHAPES)),
    st.integers(0, 2),
    st.text(max_size=100),
)
# Found by this test in CI: the key name before an encoded ``DD_API_KEY%3D<hex>`` made the first
# pass redact the name alone, and the decoded value then had no key before it.
@example(before="APIKEY", name="datadog-api-key", times=1, after="")
# Found by this test beside another suite: a blank after a header line's value ("Cookie: x=… ")
# was judged a placeholder, and the whole line was kept.
@example(before="", name="cookie-session", times=0, after="\x0c")
def test_percent_decoding_keeps_the_scrubbers_promises(
    before: str, name: str, times: int, after: str
) -> None:
    text = f"{before} {percent_encoded(SHAPES[name][0], times)} {after}"
    out = scrub(text)
    assert leaks(out) == []
    assert scrub(out) == out  # idempotent
    assert redact(text) == redact(text, prefilter=False)  # the prefilter hides nothing


# --- every placement, every sink -----------------------------------------------------------------


def requests_for(name: str, text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, request) pairs that put ``text`` somewhere a request can."""
    q = urlencode

    def req(
        path: str, query: str = "", headers: tuple[tuple[bytes, bytes], ...] = (), **kw: Any
    ) -> dict[str, Any]:
        return {"path": path, "query": query.encode(), "headers": headers, **kw}

    yield "exception message", req("/raises", q({"message": text}))
    yield "mid-stream exception", req("/sse-raises", q({"message": text}))
    yield "agent and model names", req("/agent", q({"name": text}))
    yield "agent failure", req("/agent", q({"name": "ok", "message": text}))
    yield "request path", req("/echo/" + text)
    yield "url-quoted path", req("/echo/" + quote(text, safe=""))
    raw = text.encode("latin-1", "replace")
    yield "x-test-id", req("/plain", headers=((b"x-test-id", raw),))
    yield "request edge headers", req("/plain", headers=((b"via", raw), (b"server", raw)))
    yield "response edge headers", req("/edge", q({"server": text, "via": text}))
    nested = {"message_scrubbed": {"deep": [{"deeper": (text, {text: text})}]}, "agent_name": text}
    yield "nested metadata", req("/emit", state={"metadata": nested})
    payloads = [
        b'data: {"type": "' + raw.replace(b'"', b"'") + b'"}\n\n',
        b"event: " + raw.replace(b"\n", b" ") + b"\ndata: x\n\n",
        b"data: " + raw + b"\n\n",
    ]
    yield "SSE payloads", req("/raw-sse", state={"chunks": payloads})


class Sinks:
    """stdout (redirected), a file, a logger and the OpenTelemetry bridge, all at once."""

    monkeypatch: pytest.MonkeyPatch

    def __init__(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        self.stdout = io.StringIO()
        self.stderr = io.StringIO()
        self.path = tmp_path / "cvdiag.log"
        self.file = FileSink(self.path)
        self.stdout_sink = StdoutSink()
        self.memory = MemorySink(maxlen=None)
        self.caplog = caplog
        self.exporter, _ = sdk()

    def redirect(self) -> None:
        self.monkeypatch.setattr(sys, "stdout", self.stdout)
        self.monkeypatch.setattr(sys, "stderr", self.stderr)

    def sinks(self) -> list[Any]:
        return [self.stdout_sink, self.file, LoggingSink("cvdiag.secrets"), self.memory]

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def everything(self) -> dict[str, str]:
        """Every sink's output as text."""
        self.file.flush()
        self.stdout_sink.flush()
        events, spans = [], []
        for span in self.spans():
            spans.append(span.name)
            spans.append(repr(dict(span.attributes or {})))
            for event in span.events:
                events.append(event.name)
                events.append(repr(dict(event.attributes or {})))
        return {
            "stdout": self.stdout.getvalue(),
            "file": self.path.read_text() if self.path.exists() else "",
            "logging": "\n".join(r.getMessage() for r in self.caplog.records),
            "stderr": self.stderr.getvalue(),
            "otel span events": "\n".join(events),
            "otel span names and attributes": "\n".join(spans),
        }


@pytest.fixture
def sinks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Sinks]:
    """All sinks on. The test itself points ``sys.stdout`` and ``sys.stderr`` at ``.stdout`` and
    ``.stderr`` (``redirect``): pytest re-installs its own capture between fixture setup and the
    test body."""
    caplog.set_level(logging.INFO, logger="cvdiag.secrets")
    all_sinks = Sinks(tmp_path, caplog)
    all_sinks.monkeypatch = monkeypatch
    all_sinks.exporter.clear()
    emitter = configure(
        Settings(enabled=True, tier=Tier.DEBUG, otel=True, debug_max_envelopes=10**9),
        sinks=all_sinks.sinks(),
    )
    assert any(isinstance(s, SpanEventSink) for s in emitter.sinks)
    yield all_sinks
    configure(Settings(), sinks=[MemorySink()])
    all_sinks.file.close()
    all_sinks.stdout_sink.close()


async def _run_all(app: Any, only: str | None = None) -> int:
    count = 0
    for name, text in PLACED.items():
        for label, request in requests_for(name, text):
            if only is not None and label != only:
                continue
            scope = http_scope(
                request["path"],
                request["headers"],
                query=request["query"],
                state=request.get("state"),
            )
            await call(app, scope)
            count += 1
    # A WebSocket whose messages carry every credential.
    await websocket_call(app, "/ws", list(PLACED.values()), 1000)
    return count


def test_no_secret_reaches_any_sink(sinks: Sinks) -> None:
    sinks.redirect()
    count = asyncio.run(_run_all(build()))
    assert count >= 11 * len(SHAPES)
    outputs = sinks.everything()
    # Known gap, tested on its own below (xfail): the bridge's own span names and attributes.
    del outputs["otel span names and attributes"]
    assert len(sinks.memory.envelopes) > count  # the requests were really recorded …
    assert outputs["stdout"].count("\n") == len(sinks.memory.envelopes)
    assert sinks.spans()  # … and traced
    for envelope in sinks.memory.envelopes:
        assert_valid(envelope)
    found = {sink: leaks(text) for sink, text in outputs.items()}
    assert found == {sink: [] for sink in outputs}


def test_no_secret_in_the_slug_header(sinks: Sinks) -> None:
    sinks.redirect()

    async def run() -> None:
        app = build()
        for text, _ in SHAPES.values():
            header = text.encode("latin-1", "replace")
            await call(app, http_scope("/plain", ((b"x-aimock-context", header),)))

    asyncio.run(run())
    assert leaks("\n".join(e["slug"] for e in sinks.memory.envelopes)) == []


def test_no_secret_in_opentelemetry_span_names_or_attributes(sinks: Sinks) -> None:
    sinks.redirect()

    async def run() -> None:
        app = build()
        for text in PLACED.values():
            await call(app, http_scope("/echo/" + text))
            await call(app, http_scope("/agent", query=urlencode({"name": text}).encode()))

    asyncio.run(run())
    assert leaks(sinks.everything()["otel span names and attributes"]) == []


def test_requests_carrying_secrets_are_answered_as_without_cvdiag(sinks: Sinks) -> None:
    """Scrubbing changes what is recorded, never what the app sees or answers."""
    sinks.redirect()

    async def answers(app: Any) -> list[tuple[Any, ...]]:
        out = []
        for name, text in list(PLACED.items())[:10]:
            for _, request in requests_for(name, text):
                scope = http_scope(
                    request["path"],
                    request["headers"],
                    query=request["query"],
                    state=request.get("state"),
                )
                out.append(answer(*await call(app, scope)))
        return out

    wrapped = asyncio.run(answers(build()))
    configure(Settings(), sinks=[MemorySink()])
    assert wrapped == asyncio.run(answers(build(cvdiag=False)))
