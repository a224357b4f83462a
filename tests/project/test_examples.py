"""Every example in examples/ runs on a real uvicorn server on 127.0.0.1, is driven by a real
client, and emits the envelopes its README promises (read through the ``cvdiag_events``
fixture). The OpenAI example talks to the local fake provider, never to the network.
"""

from __future__ import annotations

import json
import runpy
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from cvdiag.diagnosis.classify import classify, gather
from cvdiag.logs.reading import Record, ts_key
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.schema_check import assert_valid
from tests.support.servers import serve_uvicorn

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Envelope = Mapping[str, Any]


def load(name: str, monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """Import ``examples/<name>/app.py`` afresh (not as ``__main__``: it starts no server), with
    ``env`` set first, since the examples read their settings at import; returns its namespace
    (its ``app`` and the globals its functions read)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return runpy.run_path(str(EXAMPLES / name / "app.py"), run_name=f"example_{name}")


def story(events: CvdiagEvents, test_id: str, timeout: float = 10.0) -> list[Envelope]:
    """The request's envelopes, once its terminal (complete or aborted) has been emitted; each
    one valid against the schema."""
    terminals = {"backend.response.complete", "backend.sse.aborted"}
    deadline = time.monotonic() + timeout
    while not terminals & {e["boundary"] for e in events.for_test_id(test_id)}:
        if time.monotonic() > deadline:
            pytest.fail(f"no terminal for {test_id}: {events.boundaries()}")
        time.sleep(0.01)
    mine = events.for_test_id(test_id)
    for env in mine:
        assert_valid(env)
    return mine


def only(envelopes: Sequence[Envelope], boundary: str) -> Envelope:
    (found,) = [e for e in envelopes if e["boundary"] == boundary]
    return found


def of(envelopes: Sequence[Envelope], boundary: str) -> list[Envelope]:
    return [e for e in envelopes if e["boundary"] == boundary]


def flap_class(envelopes: Sequence[Envelope], test_id: str) -> str:
    """What ``cvdiag classify`` says about these envelopes (docs/troubleshooting.md)."""
    records = [
        Record("memory", n, b"", dict(env), (ts_key(str(env["ts"])) or "", int(env["mono_ns"])))
        for n, env in enumerate(envelopes, 1)
    ]
    return classify(gather(test_id, records)).flap_class


def sse_data(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


# --- FastAPI + the OpenAI SDK ------------------------------------------------------------------


@pytest.mark.cvdiag(tier="verbose")
def test_fastapi_openai_streams_and_joins_the_provider(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = FakeProvider(reply="joined on one test id")
    test_id = new_uuid7()
    with serve_fake_provider(provider) as provider_url:
        app = load(
            "fastapi_openai",
            monkeypatch,
            OPENAI_BASE_URL=f"{provider_url}/v1",
            OPENAI_API_KEY="sk-test-not-a-key",
        )["app"]
        with serve_uvicorn(app) as url:
            reply = httpx.post(
                f"{url}/chat", json={"message": "hi"}, headers={"x-test-id": test_id}, timeout=10
            )
        envelopes = story(cvdiag_events, test_id)

    assert reply.status_code == 200
    data = sse_data(reply.text)
    assert data[-1] == "[DONE]"
    assert "".join(json.loads(d)["delta"] for d in data[:-1]) == "joined on one test id "
    # The provider saw the caller's test id and the service's slug, forwarded by the client.
    (seen,) = provider.requests
    assert seen.test_id == test_id
    assert seen.slug == "fastapi-openai"
    assert seen.stream
    assert seen.model == "gpt-4o-mini"

    cvdiag_events.assert_sequence(
        [
            "backend.request.ingress",
            "backend.agent.enter",
            "backend.llm.call.start",
            "backend.sse.first_byte",
            "backend.llm.call.response",
            "backend.agent.exit",
            "backend.response.complete",
        ],
        test_id=test_id,
    )
    ingress = only(envelopes, "backend.request.ingress")
    enter = only(envelopes, "backend.agent.enter")
    start = only(envelopes, "backend.llm.call.start")
    response = only(envelopes, "backend.llm.call.response")
    assert enter["parent_span_id"] == ingress["span_id"]
    assert start["parent_span_id"] == enter["span_id"]
    assert response["parent_span_id"] == start["span_id"]
    assert enter["metadata"] == {"agent_name": "chat-agent", "model_id": "gpt-4o-mini"}
    assert start["metadata"]["provider"] == "openai-compatible"
    assert start["metadata"]["model"] == "gpt-4o-mini"
    assert response["outcome"] == "ok"
    assert response["metadata"]["response_token_count"] == provider.completion_tokens
    complete = only(envelopes, "backend.response.complete")
    assert complete["metadata"]["sse_event_count"] == provider.completion_tokens + 1
    assert {e["slug"] for e in envelopes} == {"fastapi-openai"}
    assert flap_class(envelopes, test_id) == "healthy"


@pytest.mark.cvdiag(tier="verbose")
def test_fastapi_openai_provider_failure_is_a_backend_error(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = FakeProvider(fail_status=400)  # not retried by the SDK
    test_id = new_uuid7()
    with serve_fake_provider(provider) as provider_url:
        app = load(
            "fastapi_openai",
            monkeypatch,
            OPENAI_BASE_URL=f"{provider_url}/v1",
            OPENAI_API_KEY="sk-test-not-a-key",
        )["app"]
        # The stream had started (200) when the SDK raised: the server cuts it short.
        with serve_uvicorn(app) as url, pytest.raises(httpx.RemoteProtocolError):
            httpx.post(
                f"{url}/chat", json={"message": "hi"}, headers={"x-test-id": test_id}, timeout=10
            )
        envelopes = story(cvdiag_events, test_id)

    assert [seen.test_id for seen in provider.requests] == [test_id]
    response = only(envelopes, "backend.llm.call.response")
    assert response["outcome"] == "err"
    assert response["metadata"]["error_class"] == "HTTP400"
    # Reported once, by the agent scope it left first (not again by the middleware).
    error = only(envelopes, "backend.error.caught")
    assert error["metadata"]["exception_type"] == "BadRequestError"
    assert error["parent_span_id"] == only(envelopes, "backend.agent.enter")["span_id"]
    assert only(envelopes, "backend.agent.exit")["metadata"]["terminal_outcome"] == "err"
    aborted = only(envelopes, "backend.sse.aborted")
    assert aborted["metadata"]["termination_kind"] == "chunk_error"
    assert flap_class(envelopes, test_id) == "backend-error"


# --- Starlette + sse-starlette -----------------------------------------------------------------


def test_starlette_sse_names_every_event(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load("starlette_sse", monkeypatch, FAKE_LLM_TOKEN_DELAY="0.005")["app"]
    test_id = new_uuid7()
    with serve_uvicorn(app) as url:
        reply = httpx.get(f"{url}/agent", params={"prompt": "hi"}, headers={"x-test-id": test_id})
        envelopes = story(cvdiag_events, test_id)

    types = [json.loads(d)["type"] for d in sse_data(reply.text)]
    words = len(types) - 2
    assert types == ["RUN_STARTED", *["TEXT_MESSAGE_CONTENT"] * words, "RUN_FINISHED"]
    events = of(envelopes, "backend.sse.event")
    assert [e["metadata"]["event_type"] for e in events] == types
    assert [e["metadata"]["sequence_num"] for e in events] == list(range(len(types)))
    only(envelopes, "backend.sse.first_byte")
    start = only(envelopes, "backend.llm.call.start")
    assert start["parent_span_id"] == only(envelopes, "backend.agent.enter")["span_id"]
    response = only(envelopes, "backend.llm.call.response")
    assert response["metadata"]["response_token_count"] == words
    complete = only(envelopes, "backend.response.complete")
    assert complete["metadata"]["sse_event_count"] == len(types)
    assert flap_class(envelopes, test_id) == "healthy"


def test_starlette_sse_client_abort(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load("starlette_sse", monkeypatch, FAKE_LLM_TOKEN_DELAY="0.1")["app"]
    test_id = new_uuid7()
    with serve_uvicorn(app) as url:
        with httpx.stream(
            "GET", f"{url}/agent", headers={"x-test-id": test_id}, timeout=10
        ) as reply:
            seen = 0
            for line in reply.iter_lines():
                seen += line.startswith("data:")
                if seen == 3:
                    break  # leaving the block hangs up mid-answer
        cvdiag_events.wait_for("backend.agent.exit")
        envelopes = story(cvdiag_events, test_id)

    aborted = only(envelopes, "backend.sse.aborted")
    assert aborted["metadata"]["termination_kind"] == "rst"
    assert aborted["metadata"]["termination_cause"] == "client_disconnect"
    assert aborted["metadata"]["bytes_before_abort"] > 0
    assert not of(envelopes, "backend.response.complete")
    assert not of(envelopes, "backend.error.caught")  # a hang-up is not the app's error
    assert only(envelopes, "backend.agent.exit")["metadata"]["terminal_outcome"] == "cancelled"
    assert only(envelopes, "backend.llm.call.response")["outcome"] == "err"
    assert flap_class(envelopes, test_id) == "client-abort"


# --- a WebSocket chat --------------------------------------------------------------------------


@pytest.mark.cvdiag(tier="debug")
def test_websocket_chat_two_turns(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load("websocket_chat", monkeypatch, FAKE_LLM_SECONDS="0.01")["app"]
    test_id = new_uuid7()
    answers = []
    with serve_uvicorn(app) as url:
        ws_url = url.replace("http://", "ws://") + "/ws"
        with connect(ws_url, additional_headers={"x-test-id": test_id}) as ws:
            for prompt in ("hello", "and again"):
                ws.send(prompt)
                words = []
                while (event := json.loads(ws.recv(timeout=10)))["type"] != "TEXT_MESSAGE_END":
                    words.append(event["delta"])
                answers.append(" ".join(words))
        envelopes = story(cvdiag_events, test_id)

    assert answers == ["You said: hello", "You said: and again"]
    ingress = only(envelopes, "backend.request.ingress")
    assert ingress["metadata"]["method"] == "WEBSOCKET"
    enters = of(envelopes, "backend.agent.enter")
    assert len(enters) == 2
    assert {e["parent_span_id"] for e in enters} == {ingress["span_id"]}
    assert [
        e["metadata"]["response_token_count"] for e in of(envelopes, "backend.llm.call.response")
    ] == [3, 4]
    types = [e["metadata"]["event_type"] for e in of(envelopes, "backend.sse.event")]
    turn = ["TEXT_MESSAGE_CONTENT"] * 3, ["TEXT_MESSAGE_CONTENT"] * 4
    assert types == [*turn[0], "TEXT_MESSAGE_END", *turn[1], "TEXT_MESSAGE_END"]
    complete = only(envelopes, "backend.response.complete")
    assert complete["metadata"]["http_status"] == 101  # the client closed normally (1000)
    assert complete["metadata"]["sse_event_count"] == 9
    assert flap_class(envelopes, test_id) == "healthy"


# --- a sync framework in worker threads --------------------------------------------------------


@pytest.mark.cvdiag(tier="verbose", heartbeat_interval=0.05)
@pytest.mark.parametrize("path", ["/research", "/research/stream"])
def test_sync_worker_keeps_the_request_context(
    cvdiag_events: CvdiagEvents, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    module = load("sync_worker", monkeypatch)
    test_id = new_uuid7()

    def think(seconds: float) -> None:
        """The example's blocking SDK call, blocked until the call has beaten twice. How many
        beats a fixed wait sees is the machine's load, not cvdiag's doing: CI once saw one beat
        in a 0.3 s call, and ten runs beside another suite once none in a 1 s call."""
        deadline = time.monotonic() + 60  # not a threshold: a scheduler that never beats
        while len(of(cvdiag_events.for_test_id(test_id), "backend.llm.call.heartbeat")) < 2:
            assert time.monotonic() < deadline, "the blocked call never beat twice"
            time.sleep(0.01)

    monkeypatch.setitem(module, "time", SimpleNamespace(sleep=think))
    with serve_uvicorn(module["app"]) as url:
        reply = httpx.get(f"{url}{path}", params={"q": "flaky"}, headers={"x-test-id": test_id})
        envelopes = story(cvdiag_events, test_id)

    answer = "Findings on flaky: nothing to worry about."
    if path == "/research":
        assert reply.json() == {"answer": answer}
    else:
        assert " ".join(json.loads(d)["delta"] for d in sse_data(reply.text)) == answer
    # Everything the worker thread emitted carries the request's test id and hangs under it.
    ingress = only(envelopes, "backend.request.ingress")
    enter = only(envelopes, "backend.agent.enter")
    start = only(envelopes, "backend.llm.call.start")
    assert enter["parent_span_id"] == ingress["span_id"]
    assert start["parent_span_id"] == enter["span_id"]
    beats = of(envelopes, "backend.llm.call.heartbeat")
    assert len(beats) >= 2  # while the blocked call waited
    assert {b["parent_span_id"] for b in beats} == {start["span_id"]}
    assert only(envelopes, "backend.llm.call.response")["metadata"]["response_token_count"] == 7
    assert flap_class(envelopes, test_id) == "healthy"
