"""agent_scope and llm_call: context managers, decorators, span tree, errors, cancellation."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest

from cvdiag import (
    MemorySink,
    RequestContext,
    Settings,
    agent_scope,
    configure,
    current_context,
    llm_call,
)
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.scopes import current_llm_call
from cvdiag.scopes.heartbeat import scheduler
from tests.support.requests import in_request, of, one

Envelope = Mapping[str, Any]


# --- agent_scope ------------------------------------------------------------------------------


def test_with_agent_scope_emits_enter_and_exit_under_the_request(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")
    with in_request() as request, agent_scope("planner", model_id="gpt-4o") as scope:
        inside = current_context()
    enter = one(sink, "backend.agent.enter")
    exit_ = one(sink, "backend.agent.exit")
    assert enter["metadata"] == {"agent_name": "planner", "model_id": "gpt-4o"}
    assert enter["span_id"] == scope.span_id
    assert enter["parent_span_id"] == request.span_id
    assert exit_["parent_span_id"] == request.span_id
    assert exit_["span_id"] not in (enter["span_id"], request.span_id)
    assert exit_["outcome"] == "ok"
    assert exit_["metadata"]["terminal_outcome"] == "ok"
    assert isinstance(exit_["metadata"]["total_duration_ms"], int)
    assert isinstance(exit_["duration_ms"], int)
    assert {enter["test_id"], exit_["test_id"]} == {"req-1"}
    assert {enter["slug"], exit_["slug"]} == {"demo-app"}
    # Inside, everything hangs under the scope; afterwards the request's context is back.
    assert inside is not None
    assert inside.span_id == scope.span_id
    assert inside.test_id == "req-1"
    assert current_context() is None


async def test_async_with_agent_scope(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    with in_request() as request:
        async with agent_scope("writer") as scope:
            await asyncio.sleep(0)
            inside = current_context()
        assert current_context() is request
    assert inside is not None
    assert inside.span_id == scope.span_id
    assert one(sink, "backend.agent.enter")["metadata"] == {
        "agent_name": "writer",
        "model_id": None,
    }
    assert one(sink, "backend.agent.exit")["metadata"]["terminal_outcome"] == "ok"


def test_decorated_sync_function(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    seen: list[RequestContext | None] = []

    @agent_scope("sync-agent")
    def turn(x: int, *, y: int) -> int:
        seen.append(current_context())
        return x + y

    with in_request():
        assert turn(1, y=2) == 3
        assert turn(3, y=4) == 7
    assert turn.__name__ == "turn"
    enters = of(sink, "backend.agent.enter")
    assert len(enters) == 2
    assert len(of(sink, "backend.agent.exit")) == 2
    # A fresh scope (span) per call.
    assert [ctx.span_id for ctx in seen if ctx] == [env["span_id"] for env in enters]
    assert enters[0]["span_id"] != enters[1]["span_id"]


async def test_decorated_async_function(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    @agent_scope("async-agent", model_id="m")
    async def turn(x: int) -> int:
        await asyncio.sleep(0)
        ctx = current_context()
        assert ctx is not None
        return x * 2

    assert inspect.iscoroutinefunction(turn)
    with in_request() as request:
        results = await asyncio.gather(turn(1), turn(2), turn(3))
    assert results == [2, 4, 6]
    enters = of(sink, "backend.agent.enter")
    assert len(enters) == 3
    assert len({env["span_id"] for env in enters}) == 3
    assert {env["parent_span_id"] for env in enters} == {request.span_id}
    assert [env["metadata"]["terminal_outcome"] for env in of(sink, "backend.agent.exit")] == [
        "ok"
    ] * 3


async def test_decorated_async_generator_scopes_the_body_not_the_consumer(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")
    inside: list[str | None] = []

    @agent_scope("streamer")
    async def tokens(n: int) -> AsyncIterator[str]:
        for i in range(n):
            ctx = current_context()
            inside.append(ctx.span_id if ctx else None)
            await asyncio.sleep(0)
            yield f"t{i}"

    assert inspect.isasyncgenfunction(tokens)
    with in_request() as request:
        got = []
        async for item in tokens(3):
            # The consumer stays in the request's context between items.
            assert current_context() is request
            got.append(item)
    assert got == ["t0", "t1", "t2"]
    enter = one(sink, "backend.agent.enter")
    assert inside == [enter["span_id"]] * 3
    assert enter["parent_span_id"] == request.span_id
    assert one(sink, "backend.agent.exit")["metadata"]["terminal_outcome"] == "ok"


async def test_async_generator_asend_and_athrow_reach_the_body(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    @agent_scope("echo")
    async def echo() -> Any:
        received = None
        while True:
            try:
                received = yield received
            except KeyError:
                received = "recovered"

    with in_request():
        gen = echo()
        assert await gen.asend(None) is None
        assert await gen.asend("a") == "a"
        assert await gen.athrow(KeyError("k")) == "recovered"
        await gen.aclose()
    # Closed by its consumer before it finished: the turn was stopped, not failed.
    exit_ = one(sink, "backend.agent.exit")
    assert exit_["metadata"]["terminal_outcome"] == "cancelled"
    assert of(sink, "backend.error.caught") == []


async def test_async_generator_error_is_reported_and_propagates(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")
    boom = RuntimeError("stream broke")

    @agent_scope("streamer")
    async def tokens() -> AsyncIterator[str]:
        yield "one"
        raise boom

    with in_request():
        got: list[str] = []

        async def consume() -> None:
            async for item in tokens():
                got.append(item)

        with pytest.raises(RuntimeError) as raised:
            await consume()
    assert raised.value is boom
    assert got == ["one"]
    error = one(sink, "backend.error.caught")
    assert error["metadata"]["exception_type"] == "RuntimeError"
    assert error["parent_span_id"] == one(sink, "backend.agent.enter")["span_id"]
    assert one(sink, "backend.agent.exit")["metadata"]["terminal_outcome"] == "err"


def test_decorated_sync_generator(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    @agent_scope("gen")
    def numbers() -> Iterator[int]:
        ctx = current_context()
        assert ctx is not None
        yield from range(3)
        return

    with in_request() as request:
        got = []
        for n in numbers():
            assert current_context() is request
            got.append(n)
    assert got == [0, 1, 2]
    assert one(sink, "backend.agent.exit")["metadata"]["terminal_outcome"] == "ok"
    # Sending into a decorated generator reaches the body.

    @agent_scope("doubler")
    def doubler() -> Any:
        value = yield
        while True:
            value = yield value * 2

    gen = doubler()
    next(gen)
    assert gen.send(2) == 4
    gen.close()


def test_nested_agents_and_llm_calls_link_into_one_tree(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    with in_request() as request, agent_scope("outer") as outer:
        with agent_scope("inner") as inner, llm_call("openai", "gpt-4o") as call:
            call.record_response(12)
        with llm_call("anthropic", "claude") as direct:
            pass
    enters = {env["metadata"]["agent_name"]: env for env in of(sink, "backend.agent.enter")}
    assert enters["outer"]["parent_span_id"] == request.span_id
    assert enters["inner"]["parent_span_id"] == outer.span_id
    exits = of(sink, "backend.agent.exit")
    assert [env["parent_span_id"] for env in exits] == [outer.span_id, request.span_id]
    starts = of(sink, "backend.llm.call.start")
    responses = of(sink, "backend.llm.call.response")
    assert [env["parent_span_id"] for env in starts] == [inner.span_id, outer.span_id]
    assert [env["span_id"] for env in starts] == [call.span_id, direct.span_id]
    # A call's response hangs under its start.
    assert [env["parent_span_id"] for env in responses] == [call.span_id, direct.span_id]
    assert responses[0]["metadata"] == {
        "provider": "openai",
        "model": "gpt-4o",
        "response_token_count": 12,
        "latency_ms": responses[0]["metadata"]["latency_ms"],
        "error_class": None,
    }
    assert responses[0]["outcome"] == "ok"
    assert {env["test_id"] for env in list(sink.envelopes)} == {"req-1"}


def test_exception_propagates_unchanged_and_is_reported_once(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    boom = ValueError("bad tool output")
    with (
        in_request(),
        pytest.raises(ValueError, match="bad tool output") as raised,
        agent_scope("outer"),
        agent_scope("inner") as inner,
    ):
        raise boom
    assert raised.value is boom
    error = one(sink, "backend.error.caught")  # once, by the innermost scope
    assert error["outcome"] == "err"
    assert error["parent_span_id"] == inner.span_id
    assert error["metadata"]["exception_type"] == "ValueError"
    assert "bad tool output" in error["metadata"]["message_scrubbed"]
    assert [
        (env["outcome"], env["metadata"]["terminal_outcome"])
        for env in of(sink, "backend.agent.exit")
    ] == [("err", "err"), ("err", "err")]


def test_a_timeout_is_an_error_with_outcome_timeout(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    with pytest.raises(TimeoutError), agent_scope("slow"):
        raise TimeoutError("model took too long")
    exit_ = one(sink, "backend.agent.exit")
    assert exit_["outcome"] == "timeout"
    assert exit_["metadata"]["terminal_outcome"] == "err"
    assert one(sink, "backend.error.caught")["metadata"]["exception_type"] == "TimeoutError"


async def test_cancellation_propagates_and_is_not_an_error(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    started = asyncio.Event()

    async def turn() -> None:
        async with agent_scope("cancelled-agent"), llm_call("openai", "gpt-4o"):
            started.set()
            await asyncio.sleep(60)

    with in_request():
        task = asyncio.create_task(turn())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert task.cancelled()
    assert of(sink, "backend.error.caught") == []
    exit_ = one(sink, "backend.agent.exit")
    assert (exit_["outcome"], exit_["metadata"]["terminal_outcome"]) == ("info", "cancelled")
    response = one(sink, "backend.llm.call.response")
    assert response["outcome"] == "err"
    assert response["metadata"]["error_class"] == "CancelledError"


async def test_cancelling_a_decorated_coroutine(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")

    @agent_scope("worker")
    async def work() -> None:
        await asyncio.sleep(60)

    task = asyncio.create_task(work())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert one(sink, "backend.agent.exit")["metadata"]["terminal_outcome"] == "cancelled"


async def test_wait_for_timeout_cancels_the_inner_scope_and_fails_the_outer(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("default")

    @agent_scope("inner")
    async def slow() -> None:
        await asyncio.sleep(60)

    with pytest.raises(asyncio.TimeoutError):
        async with agent_scope("outer"):
            await asyncio.wait_for(slow(), timeout=0.01)
    exits = of(sink, "backend.agent.exit")
    assert [env["metadata"]["terminal_outcome"] for env in exits] == ["cancelled", "err"]
    assert exits[1]["outcome"] == "timeout"


# --- outside a request, threads, disabled --------------------------------------------------------


def test_a_top_level_scope_gets_a_fresh_test_id_of_its_own(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    with agent_scope("first") as first:
        inside = current_context()
        with llm_call("openai", "m") as call:
            assert current_context() == inside.child(call.span_id or "")  # type: ignore[union-attr]
    with agent_scope("second"):
        pass
    with llm_call("openai", "m"):
        pass
    assert current_context() is None
    assert inside is not None
    assert inside.span_id == first.span_id
    enters = of(sink, "backend.agent.enter")
    assert [env["parent_span_id"] for env in enters] == [None, None]
    first_id, second_id = (env["test_id"] for env in enters)
    assert first_id != second_id
    assert inside.test_id == first_id
    starts = of(sink, "backend.llm.call.start")
    assert starts[0]["test_id"] == first_id  # the call inside the first scope joins it
    assert starts[1]["test_id"] not in (first_id, second_id)
    assert starts[1]["parent_span_id"] is None
    for env in list(sink.envelopes):
        assert len(env["test_id"]) == 36
        assert env["test_id"][14] == "7"  # UUIDv7


def test_scopes_in_threads_keep_their_own_requests(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=0.02)
    barrier = threading.Barrier(4)
    spans: dict[str, tuple[str | None, str | None]] = {}

    def worker(n: int) -> None:
        with in_request(test_id=f"thread-{n}"), agent_scope(f"agent-{n}") as agent:
            barrier.wait(5)
            with llm_call("openai", f"model-{n}") as call:
                while not any(
                    env["parent_span_id"] == call.span_id
                    for env in of(sink, "backend.llm.call.heartbeat")
                ):
                    threading.Event().wait(0.005)
            spans[f"thread-{n}"] = (agent.span_id, call.span_id)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(spans) == 4
    for test_id, (agent_span, call_span) in spans.items():
        mine = [env for env in list(sink.envelopes) if env["test_id"] == test_id]
        start = next(env for env in mine if env["boundary"] == "backend.llm.call.start")
        assert start["parent_span_id"] == agent_span
        assert start["metadata"]["model"] == f"model-{test_id[-1]}"
        beats = [env for env in mine if env["boundary"] == "backend.llm.call.heartbeat"]
        assert beats
        assert {env["parent_span_id"] for env in beats} == {call_span}


def test_disabled_scopes_do_nothing(cvdiag_events: CvdiagEvents) -> None:
    sink = MemorySink()
    configure(Settings(enabled=False), sinks=[sink])
    before = scheduler().outstanding
    with in_request() as request:
        with agent_scope("quiet") as scope, llm_call("openai", "m") as call:
            assert current_context() is request  # no context change
            assert current_llm_call() is None
            assert scheduler().outstanding == before  # no heartbeat registration
            call.record_response(3)
        assert scope.span_id is None
        assert call.span_id is None
    assert list(sink.envelopes) == []


def test_default_tier_records_agents_but_not_llm_calls(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    before = scheduler().outstanding
    with agent_scope("a"), llm_call("openai", "m"):
        assert scheduler().outstanding == before
    assert [env["boundary"] for env in list(sink.envelopes)] == [
        "backend.agent.enter",
        "backend.agent.exit",
    ]


def test_a_scope_object_can_be_reused_but_not_re_entered_while_live(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    scope = agent_scope("again")
    with scope:
        pass
    with scope, scope:  # the inner entry is ignored (and counted), not an error
        pass
    assert len(of(sink, "backend.agent.enter")) == 2
    assert len(of(sink, "backend.agent.exit")) == 2
    call = llm_call("openai", "m")
    with call:
        call.record_response(5)
    with call:
        pass
    responses = of(sink, "backend.llm.call.response")
    assert [env["metadata"]["response_token_count"] for env in responses] == [5, None]


# --- llm_call ----------------------------------------------------------------------------------


def test_llm_call_start_and_response(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    with in_request() as request:
        with llm_call("openai", "gpt-4o", prompt_token_count_estimate=321) as call:
            assert current_llm_call() is call
            inside = current_context()
            call.record_response(42)
        assert current_llm_call() is None
    start = one(sink, "backend.llm.call.start")
    assert start["metadata"] == {
        "provider": "openai",
        "model": "gpt-4o",
        "prompt_token_count_estimate": 321,
    }
    assert start["parent_span_id"] == request.span_id
    assert inside is not None
    assert inside.span_id == call.span_id == start["span_id"]
    response = one(sink, "backend.llm.call.response")
    assert response["metadata"]["response_token_count"] == 42
    assert response["metadata"]["error_class"] is None
    assert response["metadata"]["latency_ms"] == response["duration_ms"]
    assert call.ended


def test_llm_call_error(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    boom = ConnectionError("provider unreachable")
    with pytest.raises(ConnectionError) as raised, llm_call("openai", "gpt-4o"):
        raise boom
    assert raised.value is boom
    response = one(sink, "backend.llm.call.response")
    assert response["outcome"] == "err"
    assert response["metadata"]["error_class"] == "ConnectionError"
    assert response["metadata"]["response_token_count"] is None
    assert of(sink, "backend.error.caught") == []  # an agent scope reports errors, not a call


def test_llm_call_timeout(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    with pytest.raises(TimeoutError), llm_call("openai", "gpt-4o"):
        raise TimeoutError
    response = one(sink, "backend.llm.call.response")
    assert (response["outcome"], response["metadata"]["error_class"]) == (
        "timeout",
        "TimeoutError",
    )


async def test_llm_call_decorators(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)

    @llm_call("openai", "sync-model")
    def complete_sync() -> str:
        call = current_llm_call()
        assert call is not None
        call.record_response(1)
        return "sync"

    @llm_call("openai", "async-model")
    async def complete_async() -> str:
        call = current_llm_call()
        assert call is not None
        call.record_response(2)
        return "async"

    @llm_call("anthropic", "stream-model")
    async def complete_stream() -> AsyncIterator[str]:
        call = current_llm_call()
        assert call is not None
        call.record_response(3)
        yield "a"
        yield "b"

    assert complete_sync() == "sync"
    assert await complete_async() == "async"
    assert [x async for x in complete_stream()] == ["a", "b"]
    responses = of(sink, "backend.llm.call.response")
    assert [
        (env["metadata"]["model"], env["metadata"]["response_token_count"]) for env in responses
    ] == [
        ("sync-model", 1),
        ("async-model", 2),
        ("stream-model", 3),
    ]
    assert {env["outcome"] for env in responses} == {"ok"}


def test_record_response_ignores_nonsense(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("verbose", heartbeat_interval=60)
    with llm_call("openai", "m") as call:
        call.record_response(7)
        call.record_response(None)  # a response without a count keeps what was recorded
        call.record_response("many")  # type: ignore[arg-type]
    assert one(sink, "backend.llm.call.response")["metadata"]["response_token_count"] == 7


def test_llm_call_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="heartbeat_interval"):
        llm_call("openai", "m", heartbeat_interval=0)


async def test_cancelling_the_consumer_of_a_decorated_stream(cvdiag_events: CvdiagEvents) -> None:
    sink = cvdiag_events("default")
    first = asyncio.Event()

    @agent_scope("streamer")
    async def tokens() -> AsyncIterator[str]:
        yield "one"
        await asyncio.sleep(60)
        yield "never"

    async def consume() -> None:
        async for _ in tokens():
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    exit_ = one(sink, "backend.agent.exit")
    assert exit_["metadata"]["terminal_outcome"] == "cancelled"
    assert of(sink, "backend.error.caught") == []


def test_cvdiag_failing_inside_a_scope_never_reaches_the_host(cvdiag_events: CvdiagEvents) -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

        __repr__ = __str__

    cvdiag_events("verbose", heartbeat_interval=60)
    with (
        agent_scope(Unprintable()) as scope,  # type: ignore[arg-type]
        llm_call(Unprintable(), Unprintable()) as call,  # type: ignore[arg-type]
    ):
        result = "the host's work"
    assert result == "the host's work"
    assert scope.span_id is not None
    assert call.ended
