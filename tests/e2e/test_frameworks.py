"""The recipes of docs/frameworks.md, run as written: pydantic-ai (AG-UI), LangGraph through
ag-ui-langgraph and langchain-openai, the OpenAI Agents SDK; each served by uvicorn against the
local fake provider, with several concurrent requests.

The frameworks are the ``frameworks`` extra. Without them these tests are skipped and
tests/conftest.py says which in one line of the terminal summary.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import httpx
import pytest

from cvdiag import MemorySink
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.schema_check import assert_valid
from tests.support.servers import serve_uvicorn

PAGE = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
#: Each recipe and the distributions it needs (names as installed).
RECIPES: dict[str, tuple[str, ...]] = {
    "pydantic-ai": ("pydantic-ai-slim",),
    "langgraph": ("ag-ui-langgraph", "langchain-openai", "langgraph"),
    "openai-agents": ("openai-agents",),
    # The LangGraph server's three files (tests/e2e/test_langgraph_server.py runs them).
    **dict.fromkeys(
        ("langgraph-server-json", "langgraph-server-webapp", "langgraph-server-graph"),
        ("langgraph-api", "langgraph-cli", "langgraph-runtime-inmem", "langchain-openai"),
    ),
    # The job queues' two halves (tests/e2e/test_job_queues.py runs them).
    "celery-tasks": ("celery", "redis", "httpx"),
    "celery-web": ("celery", "redis", "fastapi"),
    "arq-jobs": ("arq", "httpx"),
    "arq-web": ("arq", "fastapi"),
    "rq-jobs": ("rq", "httpx"),
    "rq-web": ("rq", "fastapi"),
    "dramatiq-actors": ("dramatiq", "redis", "httpx"),
    "dramatiq-web": ("dramatiq", "redis", "fastapi"),
}
TERMINALS = ("backend.response.complete", "backend.sse.aborted")
CONCURRENT = 3


def missing(recipe: str) -> list[str]:
    """The distributions ``recipe`` needs that are not installed."""
    absent = []
    for name in RECIPES[recipe]:
        try:
            version(name)
        except PackageNotFoundError:
            absent.append(name)
    return absent


def recipe_code(name: str, language: str = "python") -> str:
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(
        rf"<!-- recipe: {re.escape(name)} -->\n```{language}\n(.*?)^```", text, re.M | re.S
    )
    assert found is not None, f"docs/frameworks.md has no recipe {name!r}"
    return found.group(1)


def needs(recipe: str) -> pytest.MarkDecorator:
    absent = missing(recipe)
    return pytest.mark.skipif(bool(absent), reason=f"{', '.join(absent)} not installed")


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """The fake provider, named by the variables every recipe reads; nothing leaves the host."""
    fake = FakeProvider(reply="Hello from the fake provider")
    with serve_fake_provider(fake) as base_url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{base_url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-frameworks")
        monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
        yield fake


def load(name: str, tmp_path: Path) -> dict[str, Any]:
    """Run the recipe's block as the docs show it, as a module file of its own."""
    code = recipe_code(name)
    path = tmp_path / f"recipe_{name.replace('-', '_')}.py"
    path.write_text(code, encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": path.stem, "__file__": str(path)}
    exec(compile(code, str(path), "exec"), namespace)
    return namespace


def agui_body(text: str) -> dict[str, Any]:
    return {
        "threadId": new_uuid7(),
        "runId": new_uuid7(),
        "state": {},
        "messages": [{"id": new_uuid7(), "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def post_all(url: str, body: Callable[[], dict[str, Any]]) -> list[str]:
    """``CONCURRENT`` requests at once, each with its own test id; their test ids."""

    def one(test_id: str) -> str:
        with httpx.Client(timeout=30) as http:
            response = http.post(
                url, json=body(), headers={"x-test-id": test_id, "accept": "text/event-stream"}
            )
            assert response.status_code == 200, response.text[:500]
            assert "RUN_ERROR" not in response.text, response.text[:500]
        return test_id

    ids = [new_uuid7() for _ in range(CONCURRENT)]
    with ThreadPoolExecutor(CONCURRENT) as pool:
        return list(pool.map(one, ids))


def wait_terminals(sink: MemorySink, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while sum(env["boundary"] in TERMINALS for env in list(sink.envelopes)) < count:
        assert time.monotonic() < deadline, "terminals missing"
        time.sleep(0.01)
    time.sleep(0.05)  # a second terminal, were there one, would arrive right behind
    return list(sink.envelopes)


def check_story(
    envelopes: list[dict[str, Any]], test_ids: list[str], fake: FakeProvider, calls: int = 1
) -> None:
    """Each request: one terminal (complete, 200); one agent turn, ended ok before it; its LLM
    calls under that turn; the provider saw exactly those calls, each with the request's id."""
    for env in envelopes:
        assert_valid(env)
    for test_id in test_ids:
        mine = [env for env in envelopes if env["test_id"] == test_id]
        story = [env["boundary"] for env in mine]
        terminals = [env for env in mine if env["boundary"] in TERMINALS]
        assert [t["boundary"] for t in terminals] == ["backend.response.complete"], story
        assert terminals[0]["metadata"]["http_status"] == 200
        (enter,) = [env for env in mine if env["boundary"] == "backend.agent.enter"]
        (exit_,) = [env for env in mine if env["boundary"] == "backend.agent.exit"]
        assert exit_["metadata"]["terminal_outcome"] == "ok"
        assert story.index("backend.agent.exit") < story.index("backend.response.complete")
        starts = [env for env in mine if env["boundary"] == "backend.llm.call.start"]
        responses = [env for env in mine if env["boundary"] == "backend.llm.call.response"]
        assert len(starts) == len(responses) == calls, story
        assert all(start["parent_span_id"] == enter["span_id"] for start in starts), story
        assert all(r["outcome"] == "ok" for r in responses)
        assert story.index("backend.llm.call.response") < story.index("backend.agent.exit")
        assert sum(seen.test_id == test_id for seen in fake.requests) == calls
    assert len(fake.requests) == calls * len(test_ids)  # no call went around the clients


@needs("pydantic-ai")
def test_pydantic_ai_agui(
    cvdiag_events: CvdiagEvents, provider: FakeProvider, tmp_path: Path
) -> None:
    sink = cvdiag_events("verbose")
    app = load("pydantic-ai", tmp_path)["app"]
    with serve_uvicorn(app) as url:
        ids = post_all(f"{url}/agui", lambda: agui_body("hi"))
        envelopes = wait_terminals(sink, len(ids))
    check_story(envelopes, ids, provider)


@needs("langgraph")
@pytest.mark.filterwarnings("ignore:.*get_config_jsonschema:DeprecationWarning")
def test_langgraph_agui(
    cvdiag_events: CvdiagEvents, provider: FakeProvider, tmp_path: Path
) -> None:
    """The recipe's route, and a second one whose graph's node is sync: ``llm.invoke`` goes
    through ``http_client``, the other client the recipe instruments."""
    from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
    from fastapi import Depends
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph

    sink = cvdiag_events("verbose")
    recipe = load("langgraph", tmp_path)
    app, llm = recipe["app"], recipe["llm"]

    def chat_sync(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(MessagesState).add_node("chat", chat_sync).add_edge(START, "chat")
    sync_agent = LangGraphAgent(name="sync", graph=graph.compile(checkpointer=InMemorySaver()))
    turn = Depends(recipe["agent_turn"], scope="function")
    add_langgraph_fastapi_endpoint(app, sync_agent, "/agui-sync", dependencies=[turn])
    with serve_uvicorn(app) as url:
        ids = post_all(f"{url}/agui", lambda: agui_body("hi"))
        sync_ids = post_all(f"{url}/agui-sync", lambda: agui_body("hi"))
        envelopes = wait_terminals(sink, len(ids) + len(sync_ids))
    check_story(envelopes, ids + sync_ids, provider)
    paths = {seen.path for seen in provider.requests}
    assert paths == {"/v1/chat/completions"}


@needs("openai-agents")
def test_openai_agents_sdk(
    cvdiag_events: CvdiagEvents, provider: FakeProvider, tmp_path: Path
) -> None:
    sink = cvdiag_events("verbose")
    app = load("openai-agents", tmp_path)["app"]
    with serve_uvicorn(app) as url:
        ids = post_all(f"{url}/chat", lambda: {"message": "hi"})
        envelopes = wait_terminals(sink, len(ids))
    check_story(envelopes, ids, provider)
    assert {seen.path for seen in provider.requests} == {"/v1/responses"}


def test_every_recipe_on_the_page_has_its_test() -> None:
    names = re.findall(r"<!-- recipe: ([\w-]+) -->", PAGE.read_text(encoding="utf-8"))
    assert sorted(names) == sorted(RECIPES)
