"""A mock LLM provider's "no fixture matched" is the test's fixtures, not the backend.

A mock provider written here answers from fixtures, as CopilotKit's aimock does: a request whose
last user message has a fixture gets its answer; any other gets the mock's refusal, ``404`` (or a
strict mock's ``503``) with ``{"error": {"message": "No fixture matched", "type":
"invalid_request_error", "code": "no_fixture_match"}}``. A backend calls it through the real
``openai`` SDK on an instrumented httpx client, under uvicorn; ``cvdiag classify``, ``ls`` and the
report name ``mock-fixture-mismatch``, with the model and the mock's message, and the OTel
bridge's LLM span carries the code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, instrument_httpx
from cvdiag.otel.genai import PROVIDER_ERROR_CODE
from cvdiag.pytest_plugin import CvdiagEvents
from tests.support.cli import cvdiag
from tests.support.otel import sdk
from tests.support.report import report
from tests.support.servers import serve_uvicorn

FIXTURES = {"hello": "Hello from the fixture."}
NO_MATCH = {
    "error": {
        "message": "No fixture matched",
        "type": "invalid_request_error",
        "code": "no_fixture_match",
    }
}


def _mock(refusal_status: int) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        said = body["messages"][-1]["content"]
        if said not in FIXTURES:
            return JSONResponse(NO_MATCH, status_code=refusal_status)
        return JSONResponse(
            {
                "id": "chatcmpl-mock",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": FIXTURES[said]},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
            }
        )

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _backend(mock_url: str) -> Starlette:
    client = openai.AsyncOpenAI(
        base_url=f"{mock_url}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=instrument_httpx(
            httpx2.AsyncClient(), llm_hosts={mock_url.removeprefix("http://"): "openai"}
        ),
    )

    async def chat(request: Request) -> Response:
        said = request.query_params["say"]
        reply = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": said}]
        )
        return JSONResponse({"text": reply.choices[0].message.content})

    app = Starlette(routes=[Route("/chat", chat)])
    app.add_middleware(CvdiagMiddleware)
    return app


@pytest.fixture(params=[404, 503], ids=["404", "strict-503"])
def served(request: pytest.FixtureRequest) -> Iterator[str]:
    with serve_uvicorn(_mock(request.param)) as mock, serve_uvicorn(_backend(mock)) as url:
        yield url


def _ask(url: str, say: str, test_id: str) -> int:
    with httpx.Client(timeout=10) as client:
        status: int = client.get(
            f"{url}/chat", params={"say": say}, headers={"x-test-id": test_id}
        ).status_code
    return status


@pytest.mark.parametrize("tier", ["default", "verbose"])
def test_no_fixture_matched_is_the_tests_fixtures(
    cvdiag_events: CvdiagEvents, tmp_path: Path, served: str, tier: str
) -> None:
    events = cvdiag_events(tier)
    assert _ask(served, "hello", "matched") == 200
    assert _ask(served, "unrecorded question", "unmatched") == 500
    events.wait_for("backend.response.complete", count=2, timeout=20)
    log = tmp_path / "backend.log"
    log.write_bytes(b"".join(b"CVDIAG " + line + b"\n" for line in events.lines))
    if tier == "verbose":
        (response,) = [
            e["metadata"]
            for e in events.of("backend.llm.call.response")
            if e["test_id"] == "unmatched"
        ]
        assert response["provider_error_code"] == "no_fixture_match"
        assert response["provider_error_message"] == "No fixture matched"
    verdict: dict[str, Any] = json.loads(cvdiag("classify", "unmatched", str(log), "--json").stdout)
    assert verdict["flap_class"] == "mock-fixture-mismatch", verdict["reason"]
    assert "No fixture matched" in verdict["reason"]
    assert "fixtures" in verdict["reason"]
    if tier == "verbose":
        assert verdict["evidence"]["model"] == "gpt-4o-mini"
        assert verdict["evidence"]["mock_error_code"] == "no_fixture_match"
    matched = json.loads(cvdiag("classify", "matched", str(log), "--json").stdout)
    assert matched["flap_class"] == "healthy"
    listed = cvdiag("ls", str(log), "--class", "mock-fixture-mismatch")
    assert listed.returncode == 0, listed.stderr
    # ``ls`` rows: first seen, test id, class, ...; the matched test id is not of the class.
    rows = [line.split() for line in listed.stdout.splitlines() if "mock-fixture-mismatch" in line]
    assert [row[1] for row in rows] == ["unmatched"]
    page = report(log, tmp_path / "report.html")
    assert page.section_of("unmatched").flap_class == "mock-fixture-mismatch"


def test_the_otel_bridge_names_the_mock_code(cvdiag_events: CvdiagEvents, served: str) -> None:
    exporter, _ = sdk()
    exporter.clear()
    cvdiag_events("verbose", otel=True)
    assert _ask(served, "unrecorded question", "otel-unmatched") == 500
    spans = [
        s
        for s in exporter.get_finished_spans()
        if s.attributes and PROVIDER_ERROR_CODE in s.attributes
    ]
    assert [s.attributes[PROVIDER_ERROR_CODE] for s in spans if s.attributes] == [
        "no_fixture_match"
    ]
    exporter.clear()
