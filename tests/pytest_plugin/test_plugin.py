"""The pytest plugin, exercised in real pytest sessions (pytester)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from cvdiag import emit, get_emitter
from cvdiag.core.context import current_context
from cvdiag.pytest_plugin import CvdiagEvents


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


def test_fixture_captures_and_filters(cvdiag_events: CvdiagEvents) -> None:
    emit("backend.agent.enter", metadata={"agent_name": "a"})
    emit("backend.sse.event", metadata={"event_type": "message"})
    emit("backend.agent.exit", metadata={"terminal_outcome": "ok"})
    assert cvdiag_events.boundaries() == [
        "backend.agent.enter",
        "backend.sse.event",
        "backend.agent.exit",
    ]
    (enter,) = cvdiag_events.of("backend.agent.enter")
    assert enter["metadata"] == {"agent_name": "a"}
    assert cvdiag_events.for_test_id(str(enter["test_id"])) == [enter]
    cvdiag_events.assert_sequence(["backend.agent.enter", "backend.agent.exit"])


@pytest.mark.cvdiag(tier="default")
def test_marker_selects_the_tier(cvdiag_events: CvdiagEvents) -> None:
    emit("backend.sse.event")
    emit("backend.llm.call.start")
    emit("backend.error.caught")
    assert cvdiag_events.boundaries() == ["backend.error.caught"]


async def test_wait_for_async_lets_the_loop_run(cvdiag_events: CvdiagEvents) -> None:
    import asyncio

    async def later() -> None:
        await asyncio.sleep(0.05)
        emit("backend.agent.exit")

    task = asyncio.create_task(later())
    (env,) = await cvdiag_events.wait_for_async("backend.agent.exit", timeout=5)
    await task
    assert env["boundary"] == "backend.agent.exit"


def test_wait_for_from_another_thread(cvdiag_events: CvdiagEvents) -> None:
    import threading

    timer = threading.Timer(0.05, lambda: emit("backend.agent.exit"))
    timer.start()
    assert len(cvdiag_events.wait_for("backend.agent.exit", timeout=5)) == 1
    timer.join()


def test_isolation_restores_the_emitter(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from cvdiag import emit, get_emitter

        def test_one(cvdiag_events):
            assert get_emitter().enabled
            emit("backend.error.caught")
            assert len(cvdiag_events.all()) == 1

        def test_two():
            assert not get_emitter().enabled

        def test_three(cvdiag_events):
            assert cvdiag_events.all() == []
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    result.assert_outcomes(passed=3)


def test_assert_sequence_failure_is_readable(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from cvdiag import emit

        def test_order(cvdiag_events):
            emit("backend.agent.exit")
            emit("backend.agent.enter")
            cvdiag_events.assert_sequence(["backend.agent.enter", "backend.agent.exit"])
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*boundary 'backend.agent.exit' (#2 of the expected sequence) was not emitted*",
            "*cvdiag replay*",
        ]
    )


def test_wait_for_times_out_with_a_message(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_wait(cvdiag_events):
            cvdiag_events.wait_for("backend.response.complete", timeout=0.05)
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*waited 0.05s for 1 x backend.response.complete, saw 0*"])


def test_cvdiag_log_writes_every_envelope(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(
        """
        from cvdiag import emit

        def test_a(cvdiag_events):
            emit("backend.error.caught", outcome="err")

        def test_b(cvdiag_events):
            emit("backend.agent.enter")
            emit("backend.agent.exit")
        """
    )
    log = tmp_path / "cvdiag.log"
    result = pytester.runpytest_inprocess(f"--cvdiag-log={log}")
    result.assert_outcomes(passed=2)
    lines = log.read_bytes().splitlines()
    assert [orjson.loads(line[7:])["boundary"] for line in lines] == [
        "backend.error.caught",
        "backend.agent.enter",
        "backend.agent.exit",
    ]


def test_stdout_option_still_writes_lines(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from cvdiag import emit

        @pytest.mark.cvdiag(stdout=True)
        def test_a(cvdiag_events):
            emit("backend.error.caught")
            cvdiag_events.emitter.flush()
            assert False
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CVDIAG {*backend.error.caught*"])


def test_context_is_reset_around_the_test(cvdiag_events: CvdiagEvents) -> None:
    assert current_context() is None
    assert get_emitter() is cvdiag_events.emitter


def test_works_with_starlette_testclient(cvdiag_events: CvdiagEvents) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    def handler(request: Request) -> PlainTextResponse:
        emit("backend.agent.enter", metadata={"agent_name": "sync"})
        return PlainTextResponse("ok")

    with TestClient(Starlette(routes=[Route("/", handler)])) as client:
        assert client.get("/").text == "ok"
    assert cvdiag_events.boundaries() == ["backend.agent.enter"]


@pytest.mark.anyio
async def test_works_under_anyio(cvdiag_events: CvdiagEvents) -> None:
    emit("backend.agent.enter")
    assert cvdiag_events.boundaries() == ["backend.agent.enter"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_bad_marker_tier_fails_with_a_clear_message(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cvdiag(tier="bogus")
        def test_it(cvdiag_events):
            pass
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*@pytest.mark.cvdiag(...): tier 'bogus' is not one of default*"])
    assert "KeyError" not in result.stdout.str()


def test_calling_the_fixture_changes_the_settings_and_starts_afresh(
    cvdiag_events: CvdiagEvents,
) -> None:
    emit("backend.sse.event")
    assert cvdiag_events.boundaries() == ["backend.sse.event"]  # debug, from the fixture
    first = cvdiag_events.emitter
    assert cvdiag_events("default", heartbeat_interval=0.05) is cvdiag_events
    assert cvdiag_events.all() == []  # what the debug capture held is forgotten
    assert get_emitter() is cvdiag_events.emitter is not first
    assert cvdiag_events.emitter.settings.heartbeat_interval == 0.05
    emit("backend.sse.event")  # verbose-or-more: dropped at the default tier
    emit("backend.error.caught", outcome="err")
    assert cvdiag_events.boundaries() == ["backend.error.caught"]
    assert len(cvdiag_events.lines) == len(cvdiag_events.envelopes) == 1
    assert orjson.loads(cvdiag_events.lines[0]) == cvdiag_events.envelopes[0]


def test_calling_the_fixture_with_a_bad_setting_fails_in_one_line(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        def test_bad(cvdiag_events):
            cvdiag_events("loud")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cvdiag_events(...): *loud*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_the_emitter_in_force_before_the_test_is_back_after_it_called_the_fixture(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        from cvdiag import get_emitter

        BEFORE = []

        def test_first(cvdiag_events):
            BEFORE.append(cvdiag_events.emitter)
            cvdiag_events("verbose")

        def test_after():
            assert not get_emitter().enabled
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
