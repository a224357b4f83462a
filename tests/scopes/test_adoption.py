"""``adopt_test_id``: a test id carried into work that runs outside its request.

A ``BackgroundTasks`` task behind a real uvicorn server, a thread pool, a task run by another
event loop and a queue consumer the request only hands a value to: each adopts the id it is given,
its LLM calls carry it (the fake provider receives it), and no id adopted in one task shows in
another. The id is read as the middleware reads an inbound one: scrubbed and bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
import pytest
from fastapi import BackgroundTasks, FastAPI, Request
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag import (
    CvdiagMiddleware,
    Emitter,
    MemorySink,
    Settings,
    adopt_test_id,
    agent_scope,
    current_context,
    instrument_httpx,
    llm_call,
)
from cvdiag.core.guard import failures
from cvdiag.pipeline import emitter as emitters
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.schema.ids import join_key, new_uuid7
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.schema_check import assert_valid
from tests.support.asgi_apps import wait_for
from tests.support.corpus import credentials
from tests.support.requests import in_request
from tests.support.servers import serve_uvicorn

CHAT: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[FakeProvider, str]]:
    fake = FakeProvider(reply="adopted")
    with serve_fake_provider(fake) as url:
        yield fake, url


def terminal(events: CvdiagEvents, test_id: str) -> bool:
    return any(e["boundary"] == "backend.response.complete" for e in events.for_test_id(test_id))


def seen_by(fake: FakeProvider, test_id: str) -> int:
    return sum(1 for seen in list(fake.requests) if seen.test_id == test_id)


# --- a block, a decorator, a task ---------------------------------------------------------------


def test_a_block_carries_the_id_to_its_scopes_and_resets_after(
    cvdiag_events: CvdiagEvents,
) -> None:
    with adopt_test_id("job-42", run_id="run-7", thread_id="thread-9", slug="my-app") as adopted:
        inside = current_context()
        with agent_scope("worker"), llm_call("openai", "gpt-4o-mini"):
            pass
    assert current_context() is None
    assert inside is not None
    assert inside == adopted.context
    assert (inside.test_id, inside.slug, inside.span_id) == ("job-42", "my-app", None)
    story = list(cvdiag_events.envelopes)
    assert {env["test_id"] for env in story} == {"job-42"}
    assert {env["trace_id"] for env in story} == {inside.trace_id}
    [enter] = cvdiag_events.of("backend.agent.enter")
    [start] = cvdiag_events.of("backend.llm.call.start")
    # Both start envelopes name the run; the call hangs under the agent.
    for env in (enter, start):
        assert (env["metadata"]["run_id"], env["metadata"]["thread_id"]) == ("run-7", "thread-9")
    assert enter["parent_span_id"] is None
    assert start["parent_span_id"] == enter["span_id"]
    for env in story:
        assert_valid(env)


def test_a_uuid_is_adopted_as_its_text(cvdiag_events: CvdiagEvents) -> None:
    job = uuid.uuid4()
    with adopt_test_id(job, run_id=job) as adopted:
        pass
    assert adopted.context is not None
    assert adopted.context.test_id == str(job)


def test_without_a_run_the_start_envelopes_keep_their_v1_keys(
    cvdiag_events: CvdiagEvents,
) -> None:
    with adopt_test_id("job-1"), agent_scope("worker"):
        pass
    [enter] = cvdiag_events.of("backend.agent.enter")
    assert enter["metadata"] == {"agent_name": "worker", "model_id": None}


def test_inside_a_request_with_its_own_id_the_work_stays_in_its_trace_and_span(
    cvdiag_events: CvdiagEvents,
) -> None:
    with in_request("req-5") as request, adopt_test_id("req-5"), agent_scope("late"):
        pass
    [enter] = cvdiag_events.of("backend.agent.enter")
    assert (enter["trace_id"], enter["parent_span_id"]) == (request.trace_id, request.span_id)


def test_a_job_carrying_its_requests_trace_and_span_continues_them(
    cvdiag_events: CvdiagEvents,
) -> None:
    """The request ran in another process (a web server enqueuing for a worker): what the job
    carries of it (``current_context()``'s trace and span there) continues its trace here."""
    trace, span = new_uuid7(), "0123456789abcdef"
    job = {"test_id": "req-77", "trace_id": trace, "span_id": span}
    with (
        adopt_test_id(
            job["test_id"], trace_id=job["trace_id"], parent_span_id=job["span_id"], run_id="job-1"
        ),
        agent_scope("worker"),
    ):
        inner = current_context()
    [enter] = cvdiag_events.of("backend.agent.enter")
    assert (enter["test_id"], enter["trace_id"], enter["parent_span_id"]) == ("req-77", trace, span)
    assert inner is not None
    assert inner.span_id == enter["span_id"]


@pytest.mark.parametrize(
    "span", ["", "0000000000000000", "0123456789ABCDEF", "0123456789abcde", "x" * 16, 12, None]
)
def test_a_parent_span_that_is_not_a_span_id_is_not_trusted(
    cvdiag_events: CvdiagEvents, span: Any
) -> None:
    with adopt_test_id("req-78", parent_span_id=span), agent_scope("worker"):
        pass
    [enter] = cvdiag_events.of("backend.agent.enter")
    assert enter["parent_span_id"] is None
    assert_valid(enter)


def test_another_id_inside_a_request_wins_until_the_block_ends(
    cvdiag_events: CvdiagEvents,
) -> None:
    with in_request("req-6") as request:
        with adopt_test_id("job-6"):
            adopted = current_context()
        after = current_context()
    assert adopted is not None
    assert adopted.test_id == "job-6"
    assert adopted.trace_id != request.trace_id
    assert after == request


async def test_decorated_coroutines_adopt_afresh_per_call_and_never_see_each_other(
    cvdiag_events: CvdiagEvents,
) -> None:
    both_inside = asyncio.Barrier(2) if hasattr(asyncio, "Barrier") else None
    seen: dict[str, list[str | None]] = {}

    async def work(test_id: str) -> None:
        @adopt_test_id(test_id)
        async def job() -> None:
            ctx = current_context()
            seen.setdefault(test_id, []).append(ctx.test_id if ctx else None)
            if both_inside is not None:
                await both_inside.wait()  # both adopted at once, interleaved
            else:
                await asyncio.sleep(0)
            async with llm_call("openai", "gpt-4o-mini"):
                ctx = current_context()
                seen[test_id].append(ctx.test_id if ctx else None)

        await job()
        ctx = current_context()
        seen[test_id].append(ctx.test_id if ctx else None)

    await asyncio.gather(work("task-a"), work("task-b"))
    assert seen == {"task-a": ["task-a", "task-a", None], "task-b": ["task-b", "task-b", None]}
    starts = cvdiag_events.of("backend.llm.call.start")
    assert sorted(env["test_id"] for env in starts) == ["task-a", "task-b"]
    assert current_context() is None


def test_a_decorated_generator_adopts_only_while_its_body_runs(
    cvdiag_events: CvdiagEvents,
) -> None:
    @adopt_test_id("gen-1")
    def numbers() -> Iterator[str | None]:
        for _ in range(2):
            ctx = current_context()
            yield ctx.test_id if ctx else None

    outside: list[str | None] = []
    inside: list[str | None] = []
    for item in numbers():
        inside.append(item)
        ctx = current_context()
        outside.append(ctx.test_id if ctx else None)
    assert (inside, outside) == (["gen-1", "gen-1"], [None, None])


def test_a_thread_pool_adopts_per_job_and_leaks_nothing_into_the_next(
    cvdiag_events: CvdiagEvents,
) -> None:
    """A pool's threads do not copy the submitter's context: each job adopts its own id, and a
    job that adopts nothing, run next on the same thread, sees none."""

    def job(test_id: str | None) -> tuple[str | None, str | None]:
        if test_id is None:
            ctx = current_context()
            return None, ctx.test_id if ctx else None
        with adopt_test_id(test_id), llm_call("openai", "gpt-4o-mini"):
            ctx = current_context()
        return test_id, ctx.test_id if ctx else None

    ids = [f"pool-{n}" for n in range(8)]
    with ThreadPoolExecutor(max_workers=1) as pool:  # one thread: every job follows another
        results = list(pool.map(job, [x for i in ids for x in (i, None)]))
    assert results == [pair for i in ids for pair in ((i, i), (None, None))]
    starts = cvdiag_events.of("backend.llm.call.start")
    assert sorted(env["test_id"] for env in starts) == sorted(ids)


async def test_a_task_created_from_another_event_loop(cvdiag_events: CvdiagEvents) -> None:
    """A consumer's loop in its own thread creates the task that adopts; the id stays there."""
    ready = threading.Event()
    result: dict[str, str | None] = {}

    async def consume() -> None:
        async def handle() -> None:
            async with adopt_test_id("loop-2"), agent_scope("consumer"):
                ctx = current_context()
                result["inside"] = ctx.test_id if ctx else None
                ready.set()
                await asyncio.sleep(0)

        await asyncio.get_running_loop().create_task(handle())
        ctx = current_context()
        result["creator"] = ctx.test_id if ctx else None

    thread = threading.Thread(target=asyncio.run, args=(consume(),))
    thread.start()
    while not ready.is_set():  # this loop's own task, meanwhile, never sees it
        assert current_context() is None
        await asyncio.sleep(0.001)
    await asyncio.to_thread(thread.join)
    assert result == {"inside": "loop-2", "creator": None}
    assert {env["test_id"] for env in cvdiag_events.envelopes} == {"loop-2"}


# --- bad input -----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=300), st.binary(max_size=300)))
def test_any_value_becomes_a_bounded_join_key(raw: str | bytes | None) -> None:
    with _on(), adopt_test_id(raw, run_id=raw, thread_id=raw, trace_id=raw, slug=raw) as adopted:
        ctx = current_context()
    assert ctx is not None
    assert ctx == adopted.context
    expected = join_key(raw)
    if expected is not None:
        assert ctx.test_id == expected
    assert 1 <= len(ctx.test_id) <= 128
    assert current_context() is None


@contextlib.contextmanager
def _on() -> Iterator[None]:
    """cvdiag on for a hypothesis example (a function-scoped fixture serves one per test)."""
    previous = emitters._emitter
    emitters._install(Emitter(Settings(enabled=True), sinks=[MemorySink()]))
    try:
        yield
    finally:
        if previous is not None:
            emitters._install(previous)


def test_a_credential_given_as_an_id_never_reaches_a_line(cvdiag_events: CvdiagEvents) -> None:
    corpus = credentials()
    for credential in corpus:
        text = credential.text
        with adopt_test_id(text, run_id=text, slug=text), agent_scope("x"):
            pass
    lines = b"\n".join(cvdiag_events.lines).decode()
    assert len(cvdiag_events.of("backend.agent.enter")) == len(corpus)
    assert [c.family for c in corpus if c.leaked(lines)] == []


def test_exited_in_another_context_it_is_counted_and_never_raises(
    cvdiag_events: CvdiagEvents,
) -> None:
    adopted = adopt_test_id("misused")
    contextvars.copy_context().run(adopted.__enter__)
    before = failures["scopes"]
    adopted.__exit__(None, None, None)  # its tokens belong to the other Context
    assert failures["scopes"] == before + 1


def test_off_it_adopts_nothing(cvdiag_events: CvdiagEvents) -> None:
    emitters._install(Emitter(Settings(enabled=False), sinks=[MemorySink()]))  # restored after
    with adopt_test_id("x") as adopted:
        assert current_context() is None
    assert adopted.context is None


# --- behind a real server -------------------------------------------------------------------------


def test_background_tasks_and_a_queue_consumer_carry_the_request_id_to_the_provider(
    cvdiag_events: CvdiagEvents, provider: tuple[FakeProvider, str]
) -> None:
    """``POST /work`` answers at once and a ``BackgroundTasks`` task calls the model after the
    response. Once that request's terminal is out, ``POST /later`` hands its id to a queue
    consumer (a task in none of any request's context), which calls the model under it: both
    calls are the first request's, in its trace, and say how long after its end they ended."""
    fake, url = provider
    queue: asyncio.Queue[str] = asyncio.Queue()
    client = instrument_httpx(httpx2.AsyncClient(base_url=f"{url}/v1"))
    app = FastAPI()
    app.add_middleware(CvdiagMiddleware)
    consumer: list[asyncio.Task[None]] = []

    async def ask() -> None:
        (await client.post("/chat/completions", json=CHAT)).raise_for_status()

    async def consume() -> None:
        while True:
            test_id = await queue.get()
            async with adopt_test_id(test_id):
                await ask()

    async def in_background(test_id: str) -> None:
        async with adopt_test_id(test_id):
            await ask()

    @app.post("/work")
    async def work(request: Request, tasks: BackgroundTasks) -> dict[str, str]:
        if not consumer:
            # A queue's consumer runs in none of the request's context (create_task's own
            # ``context=`` is Python 3.11+).
            consumer.append(contextvars.Context().run(asyncio.create_task, consume()))
        test_id = request.headers["x-test-id"]
        tasks.add_task(in_background, test_id)
        return {"queued": test_id}

    @app.post("/later")
    async def later(request: Request) -> dict[str, str]:
        test_id = (await request.json())["test_id"]
        queue.put_nowait(test_id)
        return {"queued": test_id}

    ids = [new_uuid7() for _ in range(3)]
    with serve_uvicorn(app) as base:
        for test_id in ids:
            httpx2.post(f"{base}/work", headers={"x-test-id": test_id}).raise_for_status()
        wait_for(lambda: all(terminal(cvdiag_events, i) for i in ids))
        for test_id in ids:
            httpx2.post(f"{base}/later", json={"test_id": test_id}).raise_for_status()
        wait_for(lambda: all(seen_by(fake, i) == 2 for i in ids))
        wait_for(lambda: len(cvdiag_events.of("backend.llm.call.response")) == 6)
    for test_id in ids:
        story = cvdiag_events.for_test_id(test_id)
        ingress = [e for e in story if e["boundary"] == "backend.request.ingress"]
        starts = [e for e in story if e["boundary"] == "backend.llm.call.start"]
        responses = [e for e in story if e["boundary"] == "backend.llm.call.response"]
        assert len(ingress) == 1
        assert len(starts) == 2
        assert len(responses) == 2
        # Both calls hang under the request's ingress, in its trace, and ended after it.
        assert {e["parent_span_id"] for e in starts} == {ingress[0]["span_id"]}
        assert {e["trace_id"] for e in story} == {ingress[0]["trace_id"]}
        assert all(isinstance(e["metadata"]["after_request_end_ms"], int) for e in responses)
        for env in story:
            assert_valid(env)
    # The /later requests' own stories are theirs alone: nothing of the calls is in them.
    others = {e["test_id"] for e in cvdiag_events.envelopes} - set(ids)
    assert len(others) == len(ids)
    assert {e["boundary"] for e in cvdiag_events.envelopes if e["test_id"] in others} <= {
        "backend.request.ingress",
        "backend.sse.first_byte",
        "backend.sse.event",
    } | {"backend.response.complete"}


def test_the_requests_remembered_are_bounded_and_the_latest_kept() -> None:
    from cvdiag.core.context import (
        _BY_TEST_ID,
        REMEMBERED_MAX,
        RequestContext,
        RequestState,
        remember_request,
        request_for,
    )

    state = RequestState()
    for n in range(3 * REMEMBERED_MAX):
        remember_request(RequestContext(f"bound-{n}", "trace"), state)
        assert len(_BY_TEST_ID) <= REMEMBERED_MAX
    last = f"bound-{3 * REMEMBERED_MAX - 1}"
    found = request_for(last)
    assert found is not None
    assert found[0].test_id == last
    assert request_for("bound-0") is None
