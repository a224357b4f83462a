"""What one LLM call has recorded: its times, its token count, the facts for its span.

``LLMCall`` (cvdiag/scopes/llm_calls.py) is this record plus its life: begin, heartbeats, the one
response. The record is what the rest writes and reads while the call is outstanding: the caller
(``record_response``), an instrumented client on every chunk (first chunk, network wait), the
heartbeat and the response envelope. It is a base class rather than an object the call holds, so
a chunk touches the call's attributes directly, as before the two were apart.

Every field is a class-level default, set on the instance only once something is recorded: a
call that records nothing (cvdiag off) costs its configuration alone.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from cvdiag.core.guard import record_failure
from cvdiag.scopes.scope import elapsed_ms

if TYPE_CHECKING:
    from cvdiag.core.context import RequestState
    from cvdiag.providers import RequestFacts, ResponseFacts


class CallRecord:
    """An LLM call's recorded state, and what its heartbeat says of it."""

    #: What ``record_response`` (or an instrumented client) recorded.
    response_token_count: int | None = None
    #: The call's span (its start envelope's) once recorded; None when nothing is recorded.
    span_id: str | None = None
    #: ``time.monotonic()`` at start, and at the first chunk of a streamed response: the time
    #: to first token (``first_token_delta_ms`` on the heartbeats that follow and the response).
    started_at: float | None = None
    first_chunk_at: float | None = None
    #: ``time.monotonic()`` when an instrumented stream began waiting on the network for its
    #: next chunk (None while the app holds the chunk it got): heartbeats carry the wait as
    #: ``chunk_wait_ms``, so a provider gone silent mid-stream shows, and an app slow to
    #: consume a buffered stream does not.
    chunk_wait_since: float | None = None
    #: True once the response envelope is emitted.
    ended: bool = False
    #: Set by an instrumented stream dropped unclosed (from a finalizer, which must not take
    #: locks): the heartbeat thread ends the call at its next beat.
    orphaned: bool = False
    #: The state of the request the call began in, and, once the call has ended after that
    #: request's terminal, by how many ms (``after_request_end_ms``: the model went on).
    request_state: RequestState | None = None
    after_request_end_ms: int | None = None
    #: What an instrumented client knows of the request (operation, streaming, server) and
    #: read from the response (tokens, response model and id, finish reasons): for the span.
    request_facts: RequestFacts | None = None
    response_facts: ResponseFacts | None = None

    @property
    def time_to_first_chunk_ms(self) -> int | None:
        if self.started_at is None or self.first_chunk_at is None:
            return None
        return max(0, round((self.first_chunk_at - self.started_at) * 1000))

    def record_response(self, response_token_count: int | None = None) -> None:
        """Record the answer's token count (kept for the response envelope at exit)."""
        if response_token_count is None:
            return
        try:
            self.response_token_count = max(0, int(response_token_count))
        except (TypeError, ValueError, OverflowError) as exc:
            record_failure("scopes", exc)

    def mark_first_chunk(self) -> None:
        """Note the arrival of the first response chunk (only the first counts)."""
        if self.first_chunk_at is None:
            self.first_chunk_at = time.monotonic()

    def _beat(self, started: float) -> dict[str, Any]:
        """A heartbeat's metadata. Once tokens flow it says since when (the call is streaming,
        not waiting) and, from an instrumented client whose stream is waiting on the network,
        for how long (a whole beat of waiting: the provider went silent mid-way)."""
        metadata: dict[str, Any] = {"elapsed_ms_since_start": elapsed_ms(started)}
        first = self.time_to_first_chunk_ms
        if first is not None:
            metadata["first_token_delta_ms"] = first
            since = self.chunk_wait_since
            if since is not None:
                metadata["chunk_wait_ms"] = max(0, round((time.monotonic() - since) * 1000))
        return metadata
