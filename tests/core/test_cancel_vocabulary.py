"""One error vocabulary on every async library: a call cut by cancellation is ``CancelledError``.

trio names its cancellation ``Cancelled``; the docs, the classifier and the OTel bridge know
asyncio's ``CancelledError``. Both a hand-written ``llm_call`` and an instrumented httpx stream
closed by a cancelled trio task are written with the documented word, on a real trio run against
the fake provider served by uvicorn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from cvdiag import instrument_httpx, llm_call
from cvdiag.core.errors import error_class_of, is_cancellation
from cvdiag.pytest_plugin import CvdiagEvents
from examples.fake_provider import FakeProvider, serve_fake_provider

trio = pytest.importorskip("trio")


@pytest.fixture(scope="module")
def provider_url() -> Iterator[str]:
    with serve_fake_provider(FakeProvider()) as url:
        yield url


def responses(sink: CvdiagEvents) -> list[dict[str, object]]:
    return [e["metadata"] for e in sink.envelopes if e["boundary"] == "backend.llm.call.response"]


def test_cancellation_of_every_library_is_one_word() -> None:
    assert error_class_of(asyncio.CancelledError()) == "CancelledError"
    assert is_cancellation(asyncio.CancelledError())
    assert not is_cancellation(ValueError("x"))
    assert not is_cancellation(None)
    assert error_class_of(ValueError("x")) == "ValueError"

    async def cancelled() -> str:
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.sleep(0)
            except trio.Cancelled as exc:
                return error_class_of(exc)
        raise AssertionError("not cancelled")

    assert trio.run(cancelled) == "CancelledError"


def test_an_llm_call_cut_by_a_trio_cancel_scope_is_cancelled_error(
    cvdiag_events: CvdiagEvents,
) -> None:
    sink = cvdiag_events("verbose")

    async def run() -> None:
        with trio.CancelScope() as scope:
            async with llm_call("fake", "fake-1"):
                scope.cancel()
                await trio.sleep(0)

    trio.run(run)
    (meta,) = responses(sink)
    assert meta["error_class"] == "CancelledError"


def test_an_instrumented_stream_closed_by_a_trio_cancel_is_cancelled_error(
    cvdiag_events: CvdiagEvents, provider_url: str
) -> None:
    sink = cvdiag_events("verbose")
    body = {"model": "fake-1", "stream": True, "messages": [{"role": "user", "content": "hi"}]}

    url = f"{provider_url}/v1/chat/completions"

    async def run() -> int:
        chunks = 0
        async with httpx.AsyncClient(timeout=10.0) as client:
            instrument_httpx(client)
            with trio.CancelScope() as scope:
                async with client.stream("POST", url, json=body) as r:
                    async for _ in r.aiter_raw():
                        chunks += 1
                        scope.cancel()  # the task is cancelled mid-stream, as a deadline would
                        await trio.sleep(0)
        return chunks

    assert trio.run(run) >= 1
    (meta,) = responses(sink)
    assert meta["error_class"] == "CancelledError"
