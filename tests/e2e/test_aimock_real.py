"""The mock provider's own record joined in: CopilotKit aimock (the real one, from npm) and its
journal, read beside the backend's log.

One aimock process serves the module's fixtures: one that matches, one slow (``latency`` before
each chunk), one the mock cuts (``truncateAfterChunks``), a gently paced one; any other request
matches none. A backend under uvicorn calls it through the real ``openai`` SDK on an
instrumented httpx client, which forwards the test id aimock keys its journal by. The journal,
fetched as the pytest plugin's ``--cvdiag-aimock`` fetches it, is handed to ``classify``, ``ls``,
``report`` and ``flakes`` as another input: each cause is named from the mock's layer, each
control is healthy, and without the journal the verdicts are what the backend's log alone says.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, instrument_httpx
from cvdiag.pytest_plugin import CvdiagEvents
from cvdiag.pytest_plugin.aimock_journal import fetch
from tests.support.aimock import serve_aimock
from tests.support.cli import cvdiag
from tests.support.report import report
from tests.support.servers import bound_socket, serve_uvicorn

FIXTURES: list[dict[str, Any]] = [
    {"match": {"userMessage": "hello"}, "response": {"content": "Hello from the fixture."}},
    {
        "match": {"userMessage": "gentle"},
        "response": {"content": "A gently paced answer."},
        "latency": 5,
    },
    {
        "match": {"userMessage": "slow"},
        "response": {"content": "Too slow for the backend's client."},
        "latency": 3000,
    },
    {
        "match": {"userMessage": "cut"},
        "response": {"content": "This answer is cut short by the mock after two chunks of it."},
        "truncateAfterChunks": 2,
    },
]
#: The backend's own timeout on its LLM calls: shorter than the slow fixture's pace before its
#: first chunk (3 s), so that call never answers in time, however fast the machine.
LLM_TIMEOUT_S = 1.0
#: How long the backend dawdles after the mock answered, and a first-token timeout below it: the
#: first byte cannot leave before the dawdle ends, however fast the machine.
DAWDLE_S = 0.3
DAWDLE_TIMEOUT_S = "0.2"


def _backend(mock_url: str, dead_url: str) -> Starlette:
    hosts = {mock_url.removeprefix("http://"): "openai", dead_url.removeprefix("http://"): "openai"}
    http = instrument_httpx(httpx2.AsyncClient(), llm_hosts=hosts)

    def client(url: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{url}/v1",
            api_key="sk-test",
            max_retries=0,
            timeout=LLM_TIMEOUT_S,
            http_client=http,
        )

    mock, dead = client(mock_url), client(dead_url)

    async def ask(llm: openai.AsyncOpenAI, said: str) -> str:
        stream = await llm.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": said}],
            stream=True,
            stream_options={"include_usage": True},
        )
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        return "".join(parts)

    async def chat(request: Request) -> Response:
        said = request.query_params["say"]
        text = await ask(mock, said)
        if request.query_params.get("then") == "dead":  # a second call that never reaches it
            text += await ask(dead, said)
        elif request.query_params.get("then") == "dawdle":  # slow after the mock answered

            async def late() -> AsyncIterator[bytes]:
                await asyncio.sleep(DAWDLE_S)
                yield f"data: {json.dumps({'text': text})}\n\n".encode()

            return StreamingResponse(late(), media_type="text/event-stream")
        return JSONResponse({"text": text})

    app = Starlette(routes=[Route("/chat", chat)])
    app.add_middleware(CvdiagMiddleware)
    return app


@pytest.fixture(scope="module")
def aimock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_aimock(FIXTURES, tmp_path_factory.mktemp("aimock")) as url:
        yield url


@pytest.fixture(scope="module")
def dead_url() -> Iterator[str]:
    sock, port = bound_socket()  # bound, never listening: a connection to it is refused
    with sock:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def served(aimock: str, dead_url: str) -> Iterator[str]:
    with serve_uvicorn(_backend(aimock, dead_url)) as url:
        yield url


ASKED = {
    "aim-hello": {"say": "hello"},
    "aim-gentle": {"say": "gentle"},
    "aim-nope": {"say": "a question no fixture has"},
    "aim-slow": {"say": "slow"},
    "aim-cut": {"say": "cut"},
    "aim-dead": {"say": "hello", "then": "dead"},
    "aim-late": {"say": "hello", "then": "dawdle"},
}


def _run(served: str, events: CvdiagEvents, aimock: str, tmp_path: Path) -> tuple[Path, Path]:
    for test_id, params in ASKED.items():
        # A client each: uvicorn closes a connection after an app's error, and a request sent
        # on it as it closes would never reach the backend.
        with httpx.Client(timeout=30) as client:
            client.get(f"{served}/chat", params=params, headers={"x-test-id": test_id})
    events.wait_for("backend.response.complete", count=len(ASKED), timeout=30)
    log = tmp_path / "backend.log"
    log.write_bytes(b"".join(b"CVDIAG " + line + b"\n" for line in events.lines))
    journal = tmp_path / "aimock-journal.json"
    journal.write_bytes(fetch(aimock))
    return log, journal


def _verdict(test_id: str, *files: Path, timeout: str = "60") -> dict[str, Any]:
    done = cvdiag("classify", test_id, *map(str, files), "--json", "--first-token-timeout", timeout)
    assert done.returncode in (0, 1), done.stderr
    verdict: dict[str, Any] = json.loads(done.stdout)
    return verdict


@pytest.mark.parametrize("tier", ["verbose", "default"])
def test_each_cause_named_from_the_mocks_layer(
    cvdiag_events: CvdiagEvents, tmp_path: Path, served: str, aimock: str, tier: str
) -> None:
    log, journal = _run(served, cvdiag_events(tier), aimock, tmp_path)
    verdicts = {t: _verdict(t, log, journal) for t in ASKED}
    for control in ("aim-hello", "aim-gentle"):
        assert verdicts[control]["flap_class"] == "healthy", verdicts[control]["reason"]
        assert "aimock" in verdicts[control]["layers"]
    nope = verdicts["aim-nope"]
    assert nope["flap_class"] == "mock-fixture-mismatch", nope["reason"]
    assert "journal" in nope["reason"]
    assert nope["evidence"]["mock_last_user_message"] == "a question no fixture has"
    assert nope["evidence"]["mock_status"] == 404
    assert "aimock" in nope["layers"]
    assert any(e["boundary"] == "aimock.match.decision" for e in nope["evidence"]["envelopes"])
    cut = verdicts["aim-cut"]
    assert cut["flap_class"] == "provider-error", cut["reason"]
    assert cut["evidence"]["mock_interrupt_reason"] == "truncateAfterChunks"
    assert "mock LLM provider cut its stream" in cut["reason"]
    if tier == "verbose":  # the calls the mock's entries pair with are verbose lines
        slow = verdicts["aim-slow"]
        assert slow["flap_class"] == "slow-first-token", slow["reason"]
        assert slow["evidence"]["mock_latency_ms"] == 3000
        assert "mock's pace" in slow["reason"]
        dead = verdicts["aim-dead"]
        assert dead["flap_class"] == "provider-error", dead["reason"]
        assert "never reached the mock" in dead["reason"]
        assert dead["evidence"]["mock_requests"] == 1
        # The backend slow after the mock answered at once: the backend's wait, the mock cleared.
        late = _verdict("aim-late", log, journal, timeout=DAWDLE_TIMEOUT_S)
        assert late["flap_class"] == "slow-first-token", late["reason"]
        assert "the time after was the backend's, not the mock's" in late["reason"]
        alone = _verdict("aim-late", log, timeout=DAWDLE_TIMEOUT_S)
        assert alone["flap_class"] == "slow-first-token", alone["reason"]
        assert "mock" not in alone["reason"]


def test_without_the_journal_verdicts_stay_the_backends(
    cvdiag_events: CvdiagEvents, tmp_path: Path, served: str, aimock: str
) -> None:
    log, _ = _run(served, cvdiag_events("verbose"), aimock, tmp_path)
    for test_id in ASKED:
        alone = _verdict(test_id, log)
        assert "aimock" not in alone["layers"]
        assert "mock_request" not in alone["evidence"]
        assert "journal" not in alone["reason"]
    # What the backend's lines alone say (issue 48's measure): the mismatch from the mock's
    # error code, the cut and the refused call as transport errors, the slow mock as a stall.
    expected = {
        "aim-hello": "healthy",
        "aim-gentle": "healthy",
        "aim-nope": "mock-fixture-mismatch",
        "aim-slow": "stalled-backend",
        "aim-cut": "provider-error",
        "aim-dead": "provider-error",
        "aim-late": "healthy",
    }
    assert {t: _verdict(t, log)["flap_class"] for t in ASKED} == expected
    assert "mock LLM provider" not in _verdict("aim-cut", log)["reason"]


def test_ls_report_and_flakes_read_the_journal(
    cvdiag_events: CvdiagEvents, tmp_path: Path, served: str, aimock: str
) -> None:
    log, journal = _run(served, cvdiag_events("verbose"), aimock, tmp_path)
    listed = cvdiag("ls", str(log), str(journal), "--class", "provider-error")
    assert listed.returncode == 0, listed.stderr
    assert "aim-cut" in listed.stdout
    page = report([log, journal], tmp_path / "report.html")
    assert page.section_of("aim-cut").flap_class == "provider-error"
    assert page.section_of("aim-nope").flap_class == "mock-fixture-mismatch"
    html = (tmp_path / "report.html").read_text()
    assert "aimock.match.decision" in html
    # The mock provider's lane, under the LLM call that sent its request.
    assert 'class="lane k-provider d2"' in html
    assert "no fixture matched" in html
    flakes = cvdiag("flakes", str(log), str(journal), "--json")
    assert flakes.returncode in (0, 1), flakes.stderr
    assert "aim-nope" in flakes.stdout or "mock-fixture-mismatch" in flakes.stdout


def test_the_plugin_saves_the_journal(pytester: pytest.Pytester, aimock: str) -> None:
    """``--cvdiag-aimock URL`` saves the journal at the session's end, beside ``--cvdiag-log``;
    a mock that cannot be reached is one line, and the session still passes."""
    pytester.makepyfile(
        test_asks=f"""
        import httpx

        def test_asks():
            body = {{"model": "m", "messages": [{{"role": "user", "content": "hello"}}]}}
            answer = httpx.post(
                "{aimock}/v1/chat/completions", json=body, headers={{"x-test-id": "aim-plugin"}}
            )
            assert answer.status_code == 200
        """
    )
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    logs = pytester.path / "logs"
    result = pytester.runpytest_inprocess(
        "-p", "no:xdist", f"--cvdiag-log={logs / 'run.log'}", f"--cvdiag-aimock={aimock}/v1"
    )
    result.assert_outcomes(passed=1)
    saved = logs / "aimock-journal.json"
    result.stdout.fnmatch_lines([f"cvdiag: aimock's journal saved to {saved}"])
    entries = json.loads(saved.read_text())
    assert "aim-plugin" in [e["headers"].get("x-test-id") for e in entries]
    listed = cvdiag("ls", str(saved))
    assert "aim-plugin" in listed.stdout
    # A mock gone: said in one line, never a failed session.
    gone = pytester.runpytest_inprocess(
        "-p", "no:xdist", "--cvdiag-aimock=http://127.0.0.1:9", "-k", "nothing"
    )
    assert gone.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    gone.stdout.fnmatch_lines(
        ["cvdiag: aimock's journal not saved (http://127.0.0.1:9/__aimock/journal)*"]
    )
