"""The compiled build (docs/production.md) tolerates what pure Python tolerates, and a run knows
which of the two it tests. CI runs tests/asgi, tests/pipeline and tests/sinks against the
compiled wheel as well as against the sources."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from cvdiag import CvdiagMiddleware, __version__
from cvdiag.core.guard import failures
from cvdiag.core.version import BUILD
from cvdiag.pytest_plugin import CvdiagEvents
from tests.support.asgi_apps import call, http_scope, only
from tests.support.compiled import EXPECTED, REQUEST_PATH, compiled


def test_the_request_path_is_the_build_the_run_expects() -> None:
    # Every module or none: a stale extension beside an edited source would shadow the edit.
    built = {name: compiled(name) for name in REQUEST_PATH}
    assert built == dict.fromkeys(REQUEST_PATH, EXPECTED)


def odd_app(*bodies: Any) -> Any:
    """An app handing what ASGI servers accept and pure Python reads: header pairs as lists,
    a header name as ``str``, bodies as ``bytearray`` and ``memoryview``."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers: list[Any] = [[b"content-type", b"text/event-stream"], ("x-note", b"odd")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for body in bodies:
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": bytearray(b"data: end\n\n")})

    return app


@pytest.mark.parametrize("tier", ["default", "verbose", "debug"])
async def test_odd_but_readable_messages_are_counted_not_refused(
    cvdiag_events: CvdiagEvents, tier: str
) -> None:
    # A type check the compiler inserted would raise inside cvdiag: counted as its own failure,
    # and the request would go untold. Neither may happen where pure Python reads the values.
    sink = cvdiag_events(tier)
    bodies = [bytearray(b"data: 1\n\n"), memoryview(b"data: 2\n\n"), b"data: 3\n\n"]
    before = failures["middleware"]
    scope = http_scope("/odd", [[b"x-test-id", b"odd-run"]])  # type: ignore[list-item]
    sent = await call(CvdiagMiddleware(odd_app(*bodies)), scope)
    assert sent[-1]["body"] == bytearray(b"data: end\n\n")
    assert failures["middleware"] == before
    complete = only(list(sink.envelopes), "backend.response.complete")
    assert complete["test_id"] == "odd-run"
    assert complete["metadata"]["sse_event_count"] == 4
    assert complete["metadata"]["content_length"] == 4 * len(b"data: 1\n\n") + 2


def test_the_build_is_told_by_version_and_at_start() -> None:
    # What a user reads to tell the builds apart (docs/installing.md): `cvdiag --version`, and
    # the startup line once the environment turns cvdiag on; both name the build that runs.
    wanted = "compiled" if EXPECTED else "pure Python"
    assert wanted == BUILD
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_")}
    shown = subprocess.run(
        [sys.executable, "-m", "cvdiag", "--version"], capture_output=True, text=True, env=env
    )
    assert shown.stdout == f"cvdiag {__version__} ({BUILD})\n"
    start = "from cvdiag.pipeline.emitter import get_emitter; get_emitter(); get_emitter()"
    on = subprocess.run(
        [sys.executable, "-c", start],
        capture_output=True,
        text=True,
        env={**env, "CVDIAG_BACKEND_EMITTER": "1"},
    )
    assert on.stderr == f"cvdiag: on at the default tier ({BUILD}), writing to stdout\n"
    off = subprocess.run([sys.executable, "-c", start], capture_output=True, text=True, env=env)
    assert off.stderr == ""


async def test_an_apps_own_subclass_of_the_middleware_runs(cvdiag_events: CvdiagEvents) -> None:
    # Compiled, a class is closed to Python subclasses unless it opens itself: an app that
    # subclasses CvdiagMiddleware (as the showcase face does) must run on either build.
    seen: list[str] = []

    class Mine(CvdiagMiddleware):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            seen.append(scope["path"])
            await super().__call__(scope, receive, send)

    sink = cvdiag_events("default")
    sent = await call(Mine(odd_app(b"data: 1\n\n")), http_scope("/mine", [(b"x-test-id", b"m")]))
    assert sent[-1]["body"] == bytearray(b"data: end\n\n")
    assert seen == ["/mine"]
    assert only(list(sink.envelopes), "backend.response.complete")["test_id"] == "m"
