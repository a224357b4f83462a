"""The LangGraph server recipe of docs/frameworks.md, run as a user runs it: ``langgraph dev``.

``langgraph.json``, ``webapp.py`` and ``graph.py`` are written from the page as they are; a second
graph of two steps (a draft, then a polish inside an ``agent_scope``) is added beside the page's.
The server is a real ``langgraph dev`` process (in-memory runtime, blockbuster on unless asked
off) against the local fake provider, with stdout a pipe or a regular file. Each scenario sends
its own test id: a healthy streamed run, ``/runs/wait``, a model that hangs while its client
gives up, a client that leaves mid-stream while the run goes on, a run on a thread that runs
after the request that created it, and a request that sent no test id. Every LLM call, heartbeat and
agent scope of the run must carry that id (and the provider receive it), name the run, hang
under the request's ingress, and a call that outlived its request say by how much; a log line
the graph's own code writes in a node, through ``LogContextFilter``, carries the id too. Last, in
process, what the server's worker relies on: a LangChain runnable's config adopted.

The server needs the ``frameworks`` extra (langgraph-cli[inmem]); without it these tests are
skipped and tests/conftest.py says so in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from cvdiag import Emitter, MemorySink, Settings, current_context, instrument_httpx, llm_call
from cvdiag.pipeline import emitter as emitters
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import new_uuid7
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.e2e.test_frameworks import needs, recipe_code
from tests.schema_check import assert_valid
from tests.support.cli import cvdiag
from tests.support.requests import in_request
from tests.support.servers import free_port

pytestmark = needs("langgraph-server-json")

#: A second graph beside the page's: two model calls, the second inside an agent scope, so a
#: client can leave between them.
STEPS = """
import logging
import sys

import httpx2
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph

from cvdiag import LogContextFilter, agent_scope, instrument_httpx

# The app's own log line in a node's body, through the documented filter: it joins the story.
handler = logging.StreamHandler(sys.stderr)
handler.addFilter(LogContextFilter())
handler.setFormatter(
    logging.Formatter("node-log %(test_id)s %(trace_id)s %(span_id)s %(message)s")
)
log = logging.getLogger("steps.draft")
log.addHandler(handler)
log.setLevel(logging.INFO)
log.propagate = False

llm = ChatOpenAI(
    model="gpt-4o-mini",
    http_async_client=instrument_httpx(httpx2.AsyncClient(timeout=600)),
    http_client=instrument_httpx(httpx2.Client(timeout=600)),
)


async def draft(state: MessagesState):
    log.info("drafting")
    return {"messages": [await llm.ainvoke(state["messages"])]}


async def polish(state: MessagesState):
    async with agent_scope("polish", model_id="gpt-4o-mini"):
        return {"messages": [await llm.ainvoke(state["messages"])]}


graph = (
    StateGraph(MessagesState)
    .add_node("draft", draft)
    .add_node("polish", polish)
    .add_edge(START, "draft")
    .add_edge("draft", "polish")
    .compile()
)
"""
#: How long the server may take to start, and a story to be written: a guard against a hang,
#: never a measure (a busy machine only makes a test slower).
PATIENCE = 120.0
RUN_BOUNDARIES = ("backend.llm.", "backend.agent.")


def _input(text: str = "hi") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


class Server:
    """A ``langgraph dev`` process, what it wrote, and the test ids sent to it."""

    def __init__(self, root: Path, *, stdout: str, blocking_detector: bool, base: str) -> None:
        self.root = root
        self.log = root / "stdout.log"
        self.errors = root / "stderr.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.sent: set[str] = set()
        command = [
            str(Path(sys.executable).with_name("langgraph")),
            "dev",
            "--no-browser",
            "--no-reload",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *([] if blocking_detector else ["--allow-blocking"]),
        ]
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("LANGSMITH_", "LANGCHAIN_", "CVDIAG_", "OPENAI_"))
        }
        env.update(
            OPENAI_BASE_URL=f"{base}/v1",
            OPENAI_API_KEY="sk-test-langgraph-server",
            CVDIAG_BACKEND_EMITTER="1",
            CVDIAG_DEBUG="1",
            PYTHON_ENV="test",
            CVDIAG_HEARTBEAT_INTERVAL="0.1",
            # Nothing leaves the host: no tracing, no CLI analytics (no licence key: no beacon).
            LANGSMITH_TRACING="false",
            LANGCHAIN_TRACING_V2="false",
            LANGGRAPH_CLI_NO_ANALYTICS="1",
        )
        self._stderr = self.errors.open("wb")
        self._reader: threading.Thread | None = None
        if stdout == "file":
            with self.log.open("wb") as out:
                self.process = subprocess.Popen(
                    command, cwd=root, env=env, stdout=out, stderr=self._stderr,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
        else:
            self.process = subprocess.Popen(
                command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=self._stderr,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            self._reader = threading.Thread(target=self._copy, daemon=True)
            self._reader.start()

    def _copy(self) -> None:
        """The pipe's lines, into the log file as they come (the CLI reads that)."""
        assert self.process.stdout is not None
        with self.log.open("ab") as out:
            for line in self.process.stdout:
                out.write(line)
                out.flush()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + PATIENCE
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"langgraph dev exited: {self.stderr()[-2000:]}")
            try:
                if httpx2.get(f"{self.url}/ok", timeout=2).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"langgraph dev did not start: {self.stderr()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass
        finally:
            if self._reader is not None:
                self._reader.join(timeout=30)
            self._stderr.close()

    def stderr(self) -> str:
        return self.errors.read_text(encoding="utf-8", errors="replace")

    def envelopes(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("CVDIAG {"):
                with contextlib.suppress(ValueError):  # a line still being written
                    found.append(json.loads(line[len("CVDIAG ") :]))
        return found

    def story(self, test_id: str) -> list[dict[str, Any]]:
        return [e for e in self.envelopes() if e["test_id"] == test_id]

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        """Wait for ``condition``; fail at once, with cvdiag's own words, when its sink fails."""
        deadline = time.monotonic() + PATIENCE
        while not condition():
            if "sink failed" in self.stderr():
                raise AssertionError(f"cvdiag could not write: {self.stderr()[-1500:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen; stderr: {self.stderr()[-1500:]}")
            time.sleep(0.02)

    def wait_boundary(self, test_id: str, boundary: str, count: int = 1) -> list[dict[str, Any]]:
        def seen() -> list[dict[str, Any]]:
            return [e for e in self.story(test_id) if e["boundary"] == boundary]

        self.wait_for(f"{count} {boundary} of {test_id}", lambda: len(seen()) >= count)
        return seen()


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[FakeProvider, str]]:
    fake = FakeProvider(reply="Hello from the fake provider", stall_limit=PATIENCE)
    with serve_fake_provider(fake) as url:
        yield fake, url


@pytest.fixture(
    scope="module",
    params=["pipe", "file", "file-allow-blocking"],
)
def server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    provider: tuple[FakeProvider, str],
) -> Iterator[Server]:
    """``langgraph dev`` on the page's files: stdout a pipe or a regular file, blockbuster on
    (``file-allow-blocking``: off, as ``--allow-blocking`` turns it)."""
    root = tmp_path_factory.mktemp(f"langgraph-{request.param}")
    config = json.loads(recipe_code("langgraph-server-json", "json"))
    config["graphs"]["steps"] = "./steps.py:graph"
    (root / "langgraph.json").write_text(json.dumps(config), encoding="utf-8")
    (root / "webapp.py").write_text(recipe_code("langgraph-server-webapp"), encoding="utf-8")
    (root / "graph.py").write_text(recipe_code("langgraph-server-graph"), encoding="utf-8")
    (root / "steps.py").write_text(STEPS, encoding="utf-8")
    stdout = "pipe" if request.param == "pipe" else "file"
    process = Server(
        root,
        stdout=stdout,
        blocking_detector=request.param != "file-allow-blocking",
        base=provider[1],
    )
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture
def fake(provider: tuple[FakeProvider, str]) -> Iterator[FakeProvider]:
    provider[0].first_byte_when = None
    yield provider[0]
    provider[0].first_byte_when = None


def seen_by(fake: FakeProvider, test_id: str) -> int:
    return sum(1 for seen in list(fake.requests) if seen.test_id == test_id)


def hold_from(fake: FakeProvider, test_id: str, nth: int) -> threading.Event:
    """The provider holds the ``nth`` call of ``test_id`` (and later ones) until released."""
    release = threading.Event()
    fake.first_byte_when = lambda: release.is_set() or seen_by(fake, test_id) < nth
    return release


def check_run(server: Server, fake: FakeProvider, test_id: str, calls: int) -> None:
    """The run's envelopes are the request's: its id, the run named, under its ingress; the
    provider got the id on every call; no envelope of a run sits under an id nobody sent."""
    story = server.story(test_id)
    [ingress] = [e for e in story if e["boundary"] == "backend.request.ingress"]
    starts = [e for e in story if e["boundary"] == "backend.llm.call.start"]
    assert len(starts) == calls
    assert seen_by(fake, test_id) == calls
    for start in starts:
        assert start["trace_id"] == ingress["trace_id"]
        assert isinstance(start["metadata"]["run_id"], str)
        assert isinstance(start["metadata"]["thread_id"], str)
    assert {s["metadata"]["run_id"] for s in starts} == {starts[0]["metadata"]["run_id"]}
    assert starts[0]["parent_span_id"] == ingress["span_id"]
    for env in story:
        assert_valid(env)
    strays = [
        e
        for e in server.envelopes()
        if e["boundary"].startswith(RUN_BOUNDARIES) and e["test_id"] not in server.sent
    ]
    assert strays == []
    checked = cvdiag("validate", "--strict", str(server.log))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def terminal_of(server: Server, test_id: str) -> dict[str, Any]:
    server.wait_for(
        f"the terminal of {test_id}",
        lambda: any(
            e["boundary"] in ("backend.response.complete", "backend.sse.aborted")
            for e in server.story(test_id)
        ),
    )
    [terminal] = [
        e
        for e in server.story(test_id)
        if e["boundary"] in ("backend.response.complete", "backend.sse.aborted")
    ]
    return terminal


def test_a_streamed_run_carries_the_request_id(server: Server, fake: FakeProvider) -> None:
    test_id = new_uuid7()
    server.sent.add(test_id)
    body = {"assistant_id": "chat", "input": _input(), "stream_mode": "values"}
    with httpx2.stream(
        "POST", f"{server.url}/runs/stream", json=body, headers={"x-test-id": test_id}
    ) as response:
        assert response.status_code == 200
        text = "".join(response.iter_text())
    assert "Hello from the fake provider" in text
    assert terminal_of(server, test_id)["boundary"] == "backend.response.complete"
    [answer] = server.wait_boundary(test_id, "backend.llm.call.response")
    assert answer["outcome"] == "ok"
    check_run(server, fake, test_id, calls=1)


def test_runs_wait_carries_the_request_id(server: Server, fake: FakeProvider) -> None:
    test_id = new_uuid7()
    server.sent.add(test_id)
    body = {"assistant_id": "steps", "input": _input()}
    response = httpx2.post(
        f"{server.url}/runs/wait", json=body, headers={"x-test-id": test_id}, timeout=PATIENCE
    )
    assert response.status_code == 200
    assert terminal_of(server, test_id)["boundary"] == "backend.response.complete"
    server.wait_boundary(test_id, "backend.llm.call.response", count=2)
    [enter] = server.wait_boundary(test_id, "backend.agent.enter")
    assert enter["metadata"]["agent_name"] == "polish"
    server.wait_boundary(test_id, "backend.agent.exit")
    check_run(server, fake, test_id, calls=2)
    # The draft node's own log line, outside any scope, carries the run's test id, its trace
    # and the request's ingress span (current_context() reads the run's config).
    [ingress] = [e for e in server.story(test_id) if e["boundary"] == "backend.request.ingress"]
    said = f"node-log {test_id} {ingress['trace_id']} {ingress['span_id']} drafting"
    assert said in server.stderr().splitlines(), server.stderr()[-1500:]


def test_a_hanging_model_and_a_client_that_gives_up(server: Server, fake: FakeProvider) -> None:
    """The model sends nothing; the client gives up once the heartbeats say the call is
    outstanding; the run goes on. Released, the call says how long it outlived the request."""
    test_id = new_uuid7()
    server.sent.add(test_id)
    release = hold_from(fake, test_id, 1)
    body = {"assistant_id": "chat", "input": _input(), "stream_mode": "values"}
    try:
        with httpx2.stream(
            "POST", f"{server.url}/runs/stream", json=body, headers={"x-test-id": test_id}
        ) as response:
            assert response.status_code == 200
            server.wait_boundary(test_id, "backend.llm.call.heartbeat")
        # The client is gone: the request's story ends, the call is still outstanding.
        assert terminal_of(server, test_id)["boundary"] == "backend.sse.aborted"
        assert server.wait_boundary(test_id, "backend.llm.call.response", count=0) == []
    finally:
        release.set()
    [answer] = server.wait_boundary(test_id, "backend.llm.call.response")
    assert isinstance(answer["metadata"]["after_request_end_ms"], int)
    beats = [e for e in server.story(test_id) if e["boundary"] == "backend.llm.call.heartbeat"]
    assert beats
    check_run(server, fake, test_id, calls=1)
    # The request's class is the model's: it had not answered when the client gave up, and its
    # answer came later, said once.
    said = cvdiag("classify", test_id, str(server.log))
    assert "stalled-backend" in said.stdout, said.stdout + said.stderr
    assert "had not answered when the request ended" in said.stdout


def test_a_client_that_leaves_mid_stream_while_the_run_goes_on(
    server: Server, fake: FakeProvider
) -> None:
    """The draft streams to the client, which leaves; the polish step's call, held until then,
    ends after the request and says so."""
    test_id = new_uuid7()
    server.sent.add(test_id)
    release = hold_from(fake, test_id, 2)
    body = {"assistant_id": "steps", "input": _input(), "stream_mode": "values"}
    try:
        with httpx2.stream(
            "POST", f"{server.url}/runs/stream", json=body, headers={"x-test-id": test_id}
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if "Hello from the fake provider" in line:
                    break  # the draft arrived: leave
        assert terminal_of(server, test_id)["boundary"] == "backend.sse.aborted"
        server.wait_boundary(test_id, "backend.llm.call.start", count=2)
    finally:
        release.set()
    answers = server.wait_boundary(test_id, "backend.llm.call.response", count=2)
    assert "after_request_end_ms" not in answers[0]["metadata"]
    assert isinstance(answers[1]["metadata"]["after_request_end_ms"], int)
    [enter] = server.wait_boundary(test_id, "backend.agent.enter")
    assert enter["metadata"]["run_id"] is not None
    server.wait_boundary(test_id, "backend.agent.exit")
    check_run(server, fake, test_id, calls=2)
    # The client left; the run went on, and the request's story says so, once.
    said = cvdiag("classify", test_id, str(server.log))
    assert "client-abort" in said.stdout, said.stdout + said.stderr
    assert said.stdout.count("went on") == 1


def test_a_run_whose_request_sent_no_test_id_is_a_background_run_not_a_failure(
    server: Server, fake: FakeProvider
) -> None:
    """No ``x-test-id``: the request gets an id of its own, and its run's envelopes are under the
    run's id (which the client sees in the stream's metadata), named as a run; ``cvdiag ls`` lists
    both as healthy, the run as a background run, never as a request without its terminal."""
    body = {"assistant_id": "steps", "input": _input(), "stream_mode": "values"}
    with httpx2.stream("POST", f"{server.url}/runs/stream", json=body) as response:
        assert response.status_code == 200
        request_id = response.headers["x-test-id"]
        lines = list(response.iter_lines())
    metadata = next(json.loads(line[6:]) for line in lines if line.startswith('data: {"run_id"'))
    run_id = metadata["run_id"]
    server.sent.update({request_id, run_id})
    assert terminal_of(server, request_id)["boundary"] == "backend.response.complete"
    answers = server.wait_boundary(run_id, "backend.llm.call.response", count=2)
    server.wait_boundary(run_id, "backend.agent.exit")
    assert all(answer["outcome"] == "ok" for answer in answers)
    assert seen_by(fake, run_id) == 2  # the provider, too, gets one id for the run
    starts = [e for e in server.story(run_id) if e["boundary"] == "backend.llm.call.start"]
    assert {s["metadata"]["run_id"] for s in starts} == {run_id}
    listed = cvdiag("ls", str(server.log))
    rows = {line.split()[1]: line for line in listed.stdout.splitlines()[1:]}
    assert "healthy" in rows[request_id]
    assert "healthy" in rows[run_id]
    assert "background run" in rows[run_id]
    said = cvdiag("classify", run_id, str(server.log))
    assert "a background run" in said.stdout, said.stdout + said.stderr


# --- the run config, in-process: what the server's worker relies on ----------------------------


def test_a_runnable_config_carries_its_test_id_and_names_its_run(
    cvdiag_events: CvdiagEvents,
) -> None:
    """LangChain makes a runnable's config current while it runs: a call begun there, outside
    any request, adopts its ``x-test-id``; without one, the run's id; inside a request whose
    id differs, the request's id stands and no run is named."""
    from langchain_core.runnables import RunnableConfig, RunnableLambda

    def call(_: object) -> str | None:
        with llm_call("openai", "gpt-4o-mini"):
            ctx = current_context()
            return ctx.test_id if ctx else None

    step = RunnableLambda(call)
    run, thread = new_uuid7(), new_uuid7()
    sent: RunnableConfig = {
        "configurable": {"x-test-id": "lc-1", "run_id": run, "thread_id": thread}
    }
    assert step.invoke(None, config=sent) == "lc-1"
    assert step.invoke(None, config={"configurable": {"run_id": run}}) == run
    with in_request("req-9"):
        assert step.invoke(None, config=sent) == "req-9"
    assert step.invoke(None) not in ("lc-1", run, "req-9", None)  # no config: a fresh id
    starts = cvdiag_events.of("backend.llm.call.start")
    named = [
        (s["test_id"], s["metadata"].get("run_id"), s["metadata"].get("thread_id")) for s in starts
    ]
    assert named[:3] == [("lc-1", run, thread), (run, run, None), ("req-9", None, None)]
    assert "run_id" not in starts[3]["metadata"]


def test_a_runnables_own_code_and_log_records_see_its_configs_test_id(
    cvdiag_events: CvdiagEvents,
) -> None:
    """Outside any scope, in the body of a runnable whose config names a test id: the context a
    scope would adopt there is the current one, and the logging filter puts it on a record; with
    cvdiag off, or with no run config, there is none."""
    import logging

    from langchain_core.runnables import RunnableConfig, RunnableLambda

    from cvdiag import LogContextFilter

    def body(_: object) -> tuple[str | None, str | None]:
        ctx = current_context()
        record = logging.LogRecord("node", logging.INFO, __file__, 1, "in a node", None, None)
        LogContextFilter().filter(record)
        return (ctx.test_id if ctx else None), record.__dict__["test_id"]

    step = RunnableLambda(body)
    sent: RunnableConfig = {"configurable": {"x-test-id": "lc-log", "run_id": new_uuid7()}}
    assert step.invoke(None, config=sent) == ("lc-log", "lc-log")
    assert step.invoke(None) == (None, None)
    emitters._install(Emitter(Settings(enabled=False), sinks=[MemorySink()]))  # restored after
    assert step.invoke(None, config=sent) == (None, None)


def test_the_provider_gets_a_run_configs_id_only_while_cvdiag_is_on(
    cvdiag_events: CvdiagEvents, fake: FakeProvider, provider: tuple[FakeProvider, str]
) -> None:
    from langchain_core.runnables import RunnableConfig, RunnableLambda

    client = instrument_httpx(httpx2.Client(base_url=f"{provider[1]}/v1"))
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    step: RunnableLambda[None, int] = RunnableLambda(
        lambda _: client.post("/chat/completions", json=chat).status_code
    )
    on: RunnableConfig = {"configurable": {"x-test-id": "lc-on"}}
    off: RunnableConfig = {"configurable": {"x-test-id": "lc-off"}}
    assert step.invoke(None, config=on) == 200
    emitters._install(Emitter(Settings(enabled=False), sinks=[MemorySink()]))  # restored after
    assert step.invoke(None, config=off) == 200
    assert (seen_by(fake, "lc-on"), seen_by(fake, "lc-off")) == (1, 0)
    assert {e["test_id"] for e in cvdiag_events.envelopes} == {"lc-on"}


def test_a_background_run_on_a_thread_carries_the_id_of_the_request_that_created_it(
    server: Server, fake: FakeProvider
) -> None:
    """``POST /threads/{id}/runs`` answers at once; the run goes on in the worker after that
    request's terminal, its call held until then: it carries the request's id, names its run
    and thread, and says how long after the request it ended."""
    test_id = new_uuid7()
    server.sent.add(test_id)
    release = hold_from(fake, test_id, 1)
    try:
        thread = httpx2.post(f"{server.url}/threads", json={}, timeout=PATIENCE).json()
        thread_id = thread["thread_id"]
        created = httpx2.post(
            f"{server.url}/threads/{thread_id}/runs",
            json={"assistant_id": "chat", "input": _input()},
            headers={"x-test-id": test_id},
            timeout=PATIENCE,
        )
        assert created.status_code == 200
        run_id = created.json()["run_id"]
        assert terminal_of(server, test_id)["boundary"] == "backend.response.complete"
        server.wait_boundary(test_id, "backend.llm.call.start")
    finally:
        release.set()
    joined = httpx2.get(f"{server.url}/threads/{thread_id}/runs/{run_id}/join", timeout=PATIENCE)
    assert joined.status_code == 200
    [answer] = server.wait_boundary(test_id, "backend.llm.call.response")
    assert isinstance(answer["metadata"]["after_request_end_ms"], int)
    [start] = server.wait_boundary(test_id, "backend.llm.call.start")
    assert (start["metadata"]["run_id"], start["metadata"]["thread_id"]) == (run_id, thread_id)
    check_run(server, fake, test_id, calls=1)
