"""The examples of docs/agents-and-llm-calls.md run as written, and do what the page says."""

from __future__ import annotations

import re
import runpy
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from cvdiag import MemorySink
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from examples.fake_provider import FakeProvider
from tests.support.servers import serve_uvicorn

Envelope = Mapping[str, Any]

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents-and-llm-calls.md"
EXAMPLE = re.compile(r"<!-- example: ([a-z-]+) -->\n```python\n(.*?)```", re.S)


def examples() -> dict[str, str]:
    return dict(EXAMPLE.findall(DOC.read_text(encoding="utf-8")))


def load(name: str, tmp_path: Path) -> dict[str, Any]:
    """Run an example as a module (not as ``__main__``, so it starts no server of its own)."""
    path = tmp_path / f"{name.replace('-', '_')}.py"
    path.write_text(examples()[name], encoding="utf-8")
    return runpy.run_path(str(path), run_name="cvdiag_docs_example")


def story(sink: MemorySink, test_id: str) -> dict[str, list[Envelope]]:
    """The request's envelopes by boundary, once its response is complete."""
    deadline = time.monotonic() + 10
    while True:
        by: dict[str, list[Envelope]] = {}
        for env in list(sink.envelopes):
            if env["test_id"] == test_id:
                by.setdefault(env["boundary"], []).append(env)
        if "backend.response.complete" in by:
            return by
        if time.monotonic() > deadline:
            pytest.fail(f"no backend.response.complete for {test_id}")
        time.sleep(0.01)


def assert_tree(by: dict[str, list[Envelope]], agent: str) -> None:
    (ingress,) = by["backend.request.ingress"]
    (enter,) = by["backend.agent.enter"]
    (start,) = by["backend.llm.call.start"]
    (response,) = by["backend.llm.call.response"]
    assert enter["metadata"]["agent_name"] == agent
    assert enter["parent_span_id"] == ingress["span_id"]
    assert start["parent_span_id"] == enter["span_id"]
    assert response["parent_span_id"] == start["span_id"]
    assert response["outcome"] == "ok"
    assert by["backend.agent.exit"][0]["metadata"]["terminal_outcome"] == "ok"


def test_the_page_has_its_three_examples() -> None:
    assert set(examples()) == {"async-handler", "sync-in-a-thread", "openai-sdk"}


def test_the_async_handler_example(cvdiag_events: CvdiagEvents, tmp_path: Path) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.05)
    app = load("async-handler", tmp_path)["app"]
    test_id = new_uuid7()
    with serve_uvicorn(app) as url:
        reply = httpx.post(f"{url}/chat", json={"prompt": "hi"}, headers={"x-test-id": test_id})
    assert reply.json() == {"answer": "echo: hi"}
    by = story(sink, test_id)
    assert_tree(by, "support-agent")
    assert by["backend.llm.call.response"][0]["metadata"]["response_token_count"] == 3
    assert len(by["backend.llm.call.heartbeat"]) >= 2  # the 0.2 s call, beating every 0.05 s


def test_the_sync_in_a_thread_example(cvdiag_events: CvdiagEvents, tmp_path: Path) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.05)
    app = load("sync-in-a-thread", tmp_path)["app"]
    test_id = new_uuid7()
    with serve_uvicorn(app) as url:
        reply = httpx.get(f"{url}/research", params={"q": "why"}, headers={"x-test-id": test_id})
    assert reply.json() == {"answer": "answer to 'why'"}
    by = story(sink, test_id)
    assert_tree(by, "researcher")
    (start,) = by["backend.llm.call.start"]
    beats = by["backend.llm.call.heartbeat"]
    assert len(beats) >= 3  # the 0.3 s blocking call
    assert {env["parent_span_id"] for env in beats} == {start["span_id"]}


def test_the_openai_sdk_example(
    cvdiag_events: CvdiagEvents, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = cvdiag_events("verbose")
    provider = FakeProvider()
    with serve_uvicorn(provider.app) as provider_url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{provider_url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        app = load("openai-sdk", tmp_path)["app"]
        test_id = new_uuid7()
        with serve_uvicorn(app) as url:
            reply = httpx.get(f"{url}/chat", params={"q": "hi"}, headers={"x-test-id": test_id})
    assert reply.text.count("data:") == provider.completion_tokens
    by = story(sink, test_id)
    assert_tree(by, "chat-agent")
    (response,) = by["backend.llm.call.response"]
    assert response["metadata"]["model"] == "gpt-4o-mini"
    assert response["metadata"]["response_token_count"] == provider.completion_tokens
    assert [seen.test_id for seen in provider.requests] == [test_id]
