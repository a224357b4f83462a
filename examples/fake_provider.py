"""A fake LLM provider: OpenAI- and Anthropic-shaped answers, JSON and SSE, with usage.

OpenAI Chat Completions, Embeddings and the Responses API; Anthropic Messages; Gemini's
``generateContent`` (JSON). A small Starlette app, so the real ``openai`` and ``anthropic``
SDKs can be pointed at it (``base_url``) from the examples' offline runs (``python -m examples
NAME``) and from the test suite. It listens on loopback only, never reaches the network, and
answers deterministically: ``reply`` split into words, one word per stream chunk,
``completion_tokens`` / ``output_tokens`` equal to the word count. It records every request it
gets — path, model, whether it streamed, and the ``x-test-id`` / slug headers — so a test can
prove the caller's test id reached the provider.

    provider = FakeProvider(reply="hello there")
    with serve_fake_provider(provider) as base_url:
        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="test")

Run by itself, for an app of your own: ``python -m examples.fake_provider --port 8001``, then
``OPENAI_BASE_URL=http://127.0.0.1:8001/v1`` (``ANTHROPIC_BASE_URL=http://127.0.0.1:8001``).

The failure stories cvdiag exists for, asked for per request — by a *directive* in the request
body (put it in the user's message: it reaches the provider through any app) or in an
``x-fake-provider`` header:

``[fake:500]`` (any status from 400 to 599)
    answer with that HTTP error (an OpenAI-shaped error body); ``[fake:429]`` is a rate limit.
``[fake:stall]``
    hold the answer, sending nothing, until the caller gives up (at most ``stall_limit``
    seconds, then answer normally).
``[fake:stall=1.5]``
    hold the answer 1.5 s, then answer normally: a slow first token.
``[fake:fail-mid]``
    a streamed answer starts (HTTP 200, one word of content), then the provider reports its own
    in-band error and ends the stream: Chat Completions' ``data: {"error": {..."type":
    "server_error"...}}``, Anthropic's ``event: error`` (``overloaded_error``), the Responses
    API's ``response.failed`` (``server_error``). The failure no status code shows; an answer
    asked for without ``stream`` comes whole.

Knobs (attributes, changeable between requests, for every request): ``first_byte_delay`` and
``chunk_delay`` (seconds), ``fail_status`` (answer every request with this HTTP error status),
``first_byte_when`` (a function: the answer starts only once it returns true, checked every
10 ms for at most ``stall_limit`` seconds; a test holds a call open until it has seen what it
waits for, instead of for a time a busy machine may not honour).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

PROMPT_TOKENS = 7
#: Every answer's ``created`` time: the same bytes for the same request.
CREATED = 1_700_000_000
#: ``[fake:500]``, ``[fake:stall]``, ``[fake:stall=1.5]``, ``[fake:fail-mid]`` in a request body
#: (see the module doc).
DIRECTIVE = re.compile(rb"\[fake:(?:([45]\d\d)|stall(?:=(\d+(?:\.\d+)?))?|(fail-mid))\]")
#: The message of every in-band error ``[fake:fail-mid]`` sends.
FAIL_MID_MESSAGE = "fake failure mid-stream"


@dataclasses.dataclass(frozen=True)
class SeenRequest:
    """What the provider was asked (never the prompt itself)."""

    path: str
    model: str | None
    stream: bool
    test_id: str | None
    slug: str | None


class FakeProvider:
    """The app (``.app``) and what it has seen (``.requests``)."""

    def __init__(
        self,
        *,
        reply: str = "Hello from the fake provider, one word per chunk.",
        first_byte_delay: float = 0.0,
        chunk_delay: float = 0.0,
        fail_status: int | None = None,
        stall_limit: float = 60.0,
    ) -> None:
        self.reply = reply
        self.first_byte_delay = first_byte_delay
        self.chunk_delay = chunk_delay
        self.fail_status = fail_status
        self.stall_limit = stall_limit
        self.first_byte_when: Callable[[], bool] | None = None
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1beta/models/{call}", self._generate_content, methods=["POST"]),
            ]
        )

    @property
    def words(self) -> list[str]:
        return self.reply.split()

    @property
    def completion_tokens(self) -> int:
        return len(self.words)

    # -- plumbing -------------------------------------------------------------------------------

    async def _seen(self, request: Request) -> tuple[dict[str, Any], int | None, bool]:
        """Record the request, play its stall or delay; returns its body, the error status it
        asked for (if any) and whether it asked to fail mid-stream."""
        raw = await request.body()
        body = json.loads(raw)
        with self._lock:
            self.requests.append(
                SeenRequest(
                    path=request.url.path,
                    model=body.get("model"),
                    stream=bool(body.get("stream")),
                    test_id=request.headers.get("x-test-id"),
                    slug=request.headers.get("x-aimock-context"),
                )
            )
        header = request.headers.get("x-fake-provider")
        found = DIRECTIVE.search(f"[fake:{header}]".encode() if header else raw)
        status, stall, fail_mid = None, None, False
        if found is not None:
            if found.group(1):
                status = int(found.group(1))
            elif found.group(3):
                fail_mid = True
            else:
                stall = float(found.group(2)) if found.group(2) else self.stall_limit
        if stall is not None:
            await self._stall(request, stall)
        if self.first_byte_delay:
            await asyncio.sleep(self.first_byte_delay)
        when = self.first_byte_when
        if when is not None:
            deadline = asyncio.get_running_loop().time() + self.stall_limit
            while not when() and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)
        return dict(body), status, fail_mid

    async def _stall(self, request: Request, seconds: float) -> None:
        """Send nothing for ``seconds``, or until the caller hangs up."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while loop.time() < deadline and not await request.is_disconnected():
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))

    def _failure(self, asked: int | None = None) -> Response | None:
        status = asked or self.fail_status
        if status is None:
            return None
        return JSONResponse(
            {"error": {"message": "fake failure", "type": "fake_error"}},
            status_code=status,
        )

    async def _sse(self, frames: list[str]) -> AsyncIterator[bytes]:
        for frame in frames:
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            yield frame.encode()

    def _stream(self, frames: list[str]) -> StreamingResponse:
        return StreamingResponse(self._sse(frames), media_type="text/event-stream")

    # -- OpenAI ---------------------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        body, status, fail_mid = await self._seen(request)
        failure = self._failure(status)
        if failure is not None:
            return failure
        model = str(body.get("model", "unknown"))
        usage = {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": self.completion_tokens,
            "total_tokens": PROMPT_TOKENS + self.completion_tokens,
        }
        created = CREATED
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": self.reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                }
            )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None) -> str:
            data: dict[str, Any] = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            if include_usage:
                data["usage"] = None
            return f"data: {json.dumps(data)}\n\n"

        frames = [chunk({"role": "assistant", "content": ""}, None)]
        if fail_mid:  # one word, then the error object OpenAI sends in a failing stream
            error = {"message": FAIL_MID_MESSAGE, "type": "server_error", "param": None}
            frames.append(chunk({"content": f"{self.words[0]} "}, None))
            frames.append(f"data: {json.dumps({'error': {**error, 'code': None}})}\n\n")
            return self._stream(frames)
        frames += [chunk({"content": f"{word} "}, None) for word in self.words]
        frames.append(chunk({}, "stop"))
        if include_usage:
            final = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            frames.append(f"data: {json.dumps(final)}\n\n")
        frames.append("data: [DONE]\n\n")
        return self._stream(frames)

    async def _embeddings(self, request: Request) -> Response:
        body, status, _ = await self._seen(request)
        failure = self._failure(status)
        if failure is not None:
            return failure
        return JSONResponse(
            {
                "object": "list",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.0, 0.5, 1.0]}],
                "model": body.get("model", "unknown"),
                "usage": {"prompt_tokens": PROMPT_TOKENS, "total_tokens": PROMPT_TOKENS},
            }
        )

    # -- OpenAI Responses API ---------------------------------------------------------------

    async def _responses(self, request: Request) -> Response:
        body, status, fail_mid = await self._seen(request)
        failure = self._failure(status)
        if failure is not None:
            return failure
        model = str(body.get("model", "unknown"))
        text = self.reply
        message = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        response: dict[str, Any] = {
            "id": "resp_fake",
            "object": "response",
            "created_at": CREATED,
            "model": model,
            "status": "completed",
            "output": [message],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": PROMPT_TOKENS,
                "output_tokens": self.completion_tokens,
                "total_tokens": PROMPT_TOKENS + self.completion_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        if not body.get("stream"):
            return JSONResponse(response)
        sequence = iter(range(1_000_000))

        def event(name: str, data: dict[str, Any]) -> str:
            payload = {"type": name, "sequence_number": next(sequence), **data}
            return f"event: {name}\ndata: {json.dumps(payload)}\n\n"

        pending = {**response, "status": "in_progress", "output": [], "usage": None}
        # The item and its content part are announced before their deltas and closed after
        # them, as the API does: the SDK's ``responses.stream()`` helper insists on it.
        where = {"item_id": "msg_fake", "output_index": 0, "content_index": 0}
        item = {**message, "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        frames = [
            event("response.created", {"response": pending}),
            event("response.output_item.added", {"output_index": 0, "item": item}),
            event("response.content_part.added", {**where, "part": part}),
        ]
        words = self.words[:1] if fail_mid else self.words
        frames += [
            event("response.output_text.delta", {**where, "delta": f"{word} "}) for word in words
        ]
        if fail_mid:  # the Responses API's own end for a response that failed
            error = {"code": "server_error", "message": FAIL_MID_MESSAGE}
            failed = {**pending, "status": "failed", "error": error}
            frames.append(event("response.failed", {"response": failed}))
            return self._stream(frames)
        frames += [
            event("response.output_text.done", {**where, "text": text}),
            event("response.content_part.done", {**where, "part": {**part, "text": text}}),
            event("response.output_item.done", {"output_index": 0, "item": message}),
            event("response.completed", {"response": response}),
        ]
        return self._stream(frames)

    # -- Gemini generateContent (JSON only) -------------------------------------------------

    async def _generate_content(self, request: Request) -> Response:
        _, status, _ = await self._seen(request)  # a directive is honoured as on the other APIs
        failure = self._failure(status)
        if failure is not None:
            return failure
        model = request.path_params["call"].partition(":")[0]
        return JSONResponse(
            {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": self.reply}]},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": PROMPT_TOKENS,
                    "candidatesTokenCount": self.completion_tokens,
                    "totalTokenCount": PROMPT_TOKENS + self.completion_tokens,
                },
                "modelVersion": f"{model}-001",
                "responseId": "gemini-fake",
            }
        )

    # -- Anthropic ------------------------------------------------------------------------------

    async def _messages(self, request: Request) -> Response:
        body, status, fail_mid = await self._seen(request)
        failure = self._failure(status)
        if failure is not None:
            return failure
        model = str(body.get("model", "unknown"))
        message: dict[str, Any] = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": self.reply}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": self.completion_tokens},
        }
        if not body.get("stream"):
            return JSONResponse(message)

        def event(name: str, data: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"

        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": 1},
        }
        frames = [
            event("message_start", {"message": start}),
            event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            ),
            event("ping", {}),
        ]
        words = self.words[:1] if fail_mid else self.words
        frames += [
            event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "text_delta", "text": f"{word} "}},
            )
            for word in words
        ]
        if fail_mid:  # Anthropic's in-band error event, as it sends when overloaded mid-answer
            overloaded = {"type": "overloaded_error", "message": "Overloaded"}
            frames.append(event("error", {"error": overloaded}))
            return self._stream(frames)
        frames += [
            event("content_block_stop", {"index": 0}),
            event(
                "message_delta",
                {
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": self.completion_tokens},
                },
            ),
            event("message_stop", {}),
        ]
        return self._stream(frames)


@contextmanager
def serve_fake_provider(provider: FakeProvider | None = None) -> Iterator[str]:
    """Serve ``provider`` (a fresh one by default) on a free loopback port, in a thread; yields
    the base URL (``http://127.0.0.1:PORT``; the OpenAI SDK wants ``/v1`` after it)."""
    from cvdiag.cli.demo import serve  # uvicorn in a thread: the helper `cvdiag demo` runs on

    with serve((provider or FakeProvider()).app) as base_url:
        yield base_url


def main(argv: list[str] | None = None) -> None:
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(
        prog="python -m examples.fake_provider",
        description="A deterministic OpenAI- and Anthropic-compatible provider on 127.0.0.1."
        " Put [fake:500], [fake:429], [fake:stall], [fake:stall=SECONDS] or [fake:fail-mid] in a"
        " message (or the same without brackets in an x-fake-provider header) to get that"
        " failure.",
    )
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--reply", default=FakeProvider().reply, help="the answer, word by word")
    args = parser.parse_args(argv)
    base = f"http://127.0.0.1:{args.port}"
    print(f"fake provider on {base}: OPENAI_BASE_URL={base}/v1 ANTHROPIC_BASE_URL={base}")
    # Loopback only, whatever the arguments: this is a test double, not a service.
    uvicorn.run(FakeProvider(reply=args.reply).app, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
