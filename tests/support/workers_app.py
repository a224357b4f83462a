"""The app several worker processes serve in tests/sinks/test_shared_log.py: gunicorn with uvicorn
workers, or ``uvicorn --workers``, all writing to one stdout.

``/sse`` streams ``EVENTS`` events of a few hundred bytes, so that a story at the debug tier is a
dozen envelopes; with ``APP_LINES=1`` in the environment the app also prints one JSON line of its
own per request to the same stdout, the way an app's logging does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from cvdiag import CvdiagMiddleware

EVENTS = 8
_PAYLOAD = "x" * 300
_APP_LINES = os.environ.get("APP_LINES") == "1"


async def sse(request: Request) -> StreamingResponse:
    test_id = request.headers.get("x-test-id", "")
    if _APP_LINES:
        # One write of a whole line, as logging's StreamHandler makes on an unbuffered stdout.
        line = orjson.dumps({"app": "log", "test_id": test_id, "pad": _PAYLOAD}) + b"\n"
        sys.stdout.buffer.write(line)
        sys.stdout.flush()

    async def events() -> AsyncIterator[bytes]:
        for i in range(EVENTS):
            yield f'event: delta\ndata: {{"i": {i}, "text": "{_PAYLOAD}"}}\n\n'.encode()

    return StreamingResponse(events(), media_type="text/event-stream")


app = Starlette(routes=[Route("/sse", sse)])
app.add_middleware(CvdiagMiddleware)
