"""Following one LLM response's body as it passes: first chunk, usage, and the end of its call.

The httpx transports hand each response body chunk to a ``Tracker`` before the caller sees it.
What the body says (gzip / deflate undone, SSE lines or a bounded JSON body, usage) is read by
its base, ``BodyReader`` (cvdiag/outbound/body.py); the tracker adds the call's side. It ends
its call exactly once: at the end of the body, when it is closed early, when it is dropped
unclosed, or at shutdown; never because the request that opened it ended.
"""

from __future__ import annotations

import asyncio
import gc
from time import monotonic
from typing import Any, Final

from cvdiag.core.guard import record_failure
from cvdiag.outbound.body import BodyReader, Undecodable
from cvdiag.scopes import LLMCall

#: ``error_class`` of a call whose stream was left unread and unclosed.
ABANDONED_ERROR: Final = "StreamCancelledUnclosed"


def current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop, or not asyncio (trio under anyio)
        return None


class Tracker(BodyReader):
    """Follows one LLM response's body: first chunk, usage, and the single end of its call.

    ``owned`` is False when the request ran inside a hand-written ``llm_call``: then the tracker
    only fills in that call's token count and first-chunk time, and never ends it.
    """

    __slots__ = ("call", "done", "error_class", "owned", "reader", "reading")

    def __init__(self, call: LLMCall, owned: bool, response: Any) -> None:
        self.call = call
        self.owned = owned
        self.done = False
        status = int(response.status_code)
        #: An HTTP error status is a failed call even though nothing raised.
        self.error_class: str | None = f"HTTP{status}" if status >= 400 else None
        super().__init__(response.headers)
        #: The task that asked for the latest chunk of an async stream (None for a sync one),
        #: and whether a read is in progress: how a request's end tells left from still read.
        self.reader: asyncio.Task[Any] | None = None
        self.reading = False

    def waiting(self) -> None:
        """A read of the body begins: from now the stream waits on the network."""
        self.reading = True
        if self._sse:
            self.call.chunk_wait_since = monotonic()

    def got_chunk(self) -> None:
        """The read returned a chunk: the app holds it, nobody waits on the network."""
        self.reading = False
        self.call.chunk_wait_since = None

    def feed(self, chunk: bytes) -> None:
        """One chunk of the raw body. Never raises: a failure only stops the usage reading."""
        if not chunk:
            return
        call = self.call
        if call.first_chunk_at is None and self._sse:  # time to first token: streams only
            call.first_chunk_at = monotonic()
        if not self._tracking:
            return
        try:
            data = self._decoder.decode(chunk) if self._decoder is not None else chunk
            if self._sse:
                self._feed_lines(data)
            else:
                self._feed_body(data)
        except Undecodable:
            self._stop_tracking()
        except Exception as exc:
            record_failure("httpx", exc)
            self._stop_tracking()

    def read_all(self, content: bytes) -> None:
        """A response whose body was already read (a mock transport, a cache): decoded bytes."""
        self._decoder = None
        self.feed(content)

    def finish(
        self,
        exc: BaseException | None = None,
        *,
        early: bool = False,
        cancelled: bool = False,
        abandoned: bool = False,
    ) -> None:
        """The body is exhausted (default), failed (``exc``), was closed ``early`` or was
        ``abandoned`` (dropped unclosed, unread to its end): once."""
        if self.done:
            return
        self.done = True
        call = self.call
        call.chunk_wait_since = None  # a hand-written call may go on: this stream waits no more
        try:
            if self._tracking and not self._sse:
                self._read_body()
        except Undecodable:
            pass
        except Exception as failure:
            record_failure("httpx", failure)
        self._stop_tracking()
        try:
            facts = self.facts
            if facts.output_tokens is not None and (
                self.owned or call.response_token_count is None
            ):
                call.record_response(facts.output_tokens)
            if self.owned or call.response_facts is None:
                call.response_facts = facts
            if not self.owned:
                return
            if self.error_class is None:
                # A failure the provider reported after answering 200 (an error event, a
                # ``response.failed``): the call failed, however the stream then ended.
                self.error_class = facts.error
            if exc is not None:
                call.finish(exc)
            elif (early or abandoned) and not self.provider_done:
                if abandoned:
                    closed = ABANDONED_ERROR
                else:
                    closed = "CancelledError" if cancelled else "StreamCancelled"
                call.finish(error_class=self.error_class or closed)
            else:
                call.finish(error_class=self.error_class)
        except Exception as failure:
            record_failure("httpx", failure)

    def abandoned(self) -> None:
        """The stream was garbage-collected unclosed: let the heartbeat thread end the call."""
        if not self.done and self.owned:
            self.call.orphaned = True

    def request_ending(self) -> bool:
        """The request that opened this stream is ending; True once nothing is left to watch.

        A stream dropped unclosed (``abandoned``) ends here, and so does one whose last read
        came from the request's own task (this one: the handler that read it has returned)
        or, for a sync stream with no read in progress, that a collection finds dropped. A stream
        last read by another task goes on, however its request ends: a graph run reading after
        its client left (LangGraph reads each chunk from a new task, so no reader seen so far
        says it is over). It ends at its end, its close, when dropped, or at shutdown; after
        the request's terminal, its response says by how much (``after_request_end_ms``).
        """
        if self.done:
            return True
        reader = self.reader
        if reader is None and not self.reading and not self.call.orphaned:
            # A sync stream (or one read where cvdiag cannot name tasks: trio), with no read in
            # progress: still held by whoever may read on (a graph run in a worker thread), or
            # dropped inside a reference cycle (an SDK stream a handler broke out of). Only a
            # collection tells which, and runs only here: a dropped one ends now, via
            # ``abandoned``; a held one goes on like a stream read by another task.
            gc.collect()
        if self.call.orphaned or (reader is not None and reader is current_task()):
            self.finish(abandoned=True)
            return True
        return False
