"""``python -m examples starlette_sse``: a whole agent run, then one the browser leaves early."""

from __future__ import annotations

from collections.abc import Callable

from examples.offline import Client, Example, Visit


def run_agent(*, hang_up_after: int | None = None) -> Callable[[Client, str], str]:
    """GET /agent as an EventSource would, hanging up after ``hang_up_after`` events if set."""

    def drive(client: Client, test_id: str) -> str:
        events = 0
        with client.http.stream(
            "GET", "/agent", params={"prompt": "hello"}, headers={"x-test-id": test_id}
        ) as response:
            for line in response.iter_lines():
                events += line.startswith("data:")
                if events == hang_up_after:
                    return f"HTTP {response.status_code}, {events} events, then hung up"
        return f"HTTP {response.status_code}, {events} events to RUN_FINISHED"

    return drive


EXAMPLE = Example(
    name="starlette_sse",
    summary="Starlette and sse-starlette streaming AG-UI-style events, at the debug tier",
    # The debug tier is granted in a development-like environment only.
    env={"PYTHON_ENV": "development", "CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_DEBUG": "1"},
    visits=[
        Visit("sse-1-healthy", "a whole agent run, every event", run_agent(), "healthy"),
        Visit(
            "sse-2-client-abort",
            "the browser goes away after three events",
            run_agent(hang_up_after=3),
            "client-abort",
        ),
    ],
    needs=("sse_starlette",),
)
