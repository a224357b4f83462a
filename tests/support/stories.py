"""Hand-written logs for the diagnosis, report and CLI tests: a ``Story`` writes one test id's
envelopes as the backend would (span tree, clocks, metadata), and ``STORIES`` holds one per flap
class.

tests/diagnosis/test_stories_valid.py holds the stories to the packaged schema, so a hand-written
log can never test the commands on envelopes the backend could not write.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from cvdiag.pipeline.envelope import NULL_EDGE_HEADERS

T0 = datetime.datetime(2026, 11, 22, 3, 0, 0, tzinfo=datetime.timezone.utc)
_spans = itertools.count(0x1000)


def span() -> str:
    return f"{next(_spans):016x}"


class Story:
    """The envelopes of one test id, written in emit order with consistent ts and mono_ns."""

    def __init__(
        self, test_id: str, *, slug: str = "chat", start_ms: float = 0.0, mono0: int = 10**12
    ) -> None:
        self.test_id = test_id
        self.slug = slug
        self.start_ms = start_ms
        self.mono0 = mono0
        self.envelopes: list[dict[str, Any]] = []
        self.request: str | None = None

    def emit(
        self,
        boundary: str,
        at_ms: float,
        *,
        outcome: str = "info",
        metadata: dict[str, Any] | None = None,
        duration_ms: int | None = None,
        span_id: str | None = None,
        parent: str | None = None,
        edge: dict[str, str] | None = None,
        **extra: Any,
    ) -> str:
        moment = T0 + datetime.timedelta(milliseconds=self.start_ms + at_ms)
        ts = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        sid = span_id or span()
        self.envelopes.append(
            {
                "schema_version": 1,
                "test_id": self.test_id,
                "trace_id": f"trace-{self.test_id}",
                "span_id": sid,
                "parent_span_id": parent,
                "layer": "backend",
                "boundary": boundary,
                "slug": self.slug,
                "demo": "default",
                "ts": ts,
                "mono_ns": self.mono0 + int((self.start_ms + at_ms) * 1_000_000),
                "duration_ms": duration_ms,
                "outcome": outcome,
                "edge_headers": {**NULL_EDGE_HEADERS, **(edge or {})},
                "metadata": metadata or {},
                **extra,
            }
        )
        return sid

    # -- the boundaries, with the backend's span tree -----------------------------------------

    def ingress(self, at: float = 0.0, *, edge: dict[str, str] | None = None) -> str:
        self.request = self.emit(
            "backend.request.ingress",
            at,
            metadata={"method": "POST", "path": "/chat", "content_length": 42},
            edge=edge,
        )
        return self.request

    def agent(self, at: float, name: str = "chat-agent") -> str:
        return self.emit(
            "backend.agent.enter",
            at,
            metadata={"agent_name": name, "model_id": "fake-1"},
            parent=self.request,
        )

    def agent_exit(self, at: float, entered_at: float, agent: str, outcome: str = "ok") -> str:
        return self.emit(
            "backend.agent.exit",
            at,
            outcome="ok" if outcome == "ok" else "err",
            metadata={"terminal_outcome": outcome, "total_duration_ms": at - entered_at},
            duration_ms=int(at - entered_at),
            parent=self.request,
        )

    def llm_start(self, at: float, parent: str | None) -> str:
        return self.emit(
            "backend.llm.call.start",
            at,
            metadata={"provider": "fake", "model": "fake-1", "prompt_token_count_estimate": 12},
            parent=parent,
        )

    def heartbeat(
        self,
        at: float,
        call: str,
        elapsed: float,
        *,
        first_token: float | None = None,
        chunk_wait: float | None = None,
    ) -> str:
        """``first_token`` and ``chunk_wait`` write a streaming call's additive keys."""
        extra: dict[str, float] = {}
        if first_token is not None:
            extra["first_token_delta_ms"] = first_token
        if chunk_wait is not None:
            extra["chunk_wait_ms"] = chunk_wait
        return self.emit(
            "backend.llm.call.heartbeat",
            at,
            metadata={"elapsed_ms_since_start": elapsed, **extra},
            parent=call,
        )

    def llm_response(
        self,
        at: float,
        call: str,
        latency: float,
        *,
        tokens: int | None = 5,
        outcome: str = "ok",
        error_class: str | None = None,
        first_token: float | None = None,
        after_request_end: float | None = None,
    ) -> str:
        """``first_token`` writes the additive ``first_token_delta_ms`` (issue 14's wire),
        ``after_request_end`` the additive ``after_request_end_ms`` (issue 25's)."""
        extra: dict[str, float] = (
            {} if first_token is None else {"first_token_delta_ms": first_token}
        )
        if after_request_end is not None:
            extra["after_request_end_ms"] = after_request_end
        return self.emit(
            "backend.llm.call.response",
            at,
            outcome=outcome,
            metadata={
                "provider": "fake",
                "model": "fake-1",
                "response_token_count": tokens,
                "latency_ms": latency,
                "error_class": error_class,
                **extra,
            },
            duration_ms=int(latency),
            parent=call,
        )

    def first_byte(self, at: float, *, keepalive: bool = False) -> str:
        """``keepalive`` marks a first chunk of SSE comments only (a ``: ping``)."""
        extra = {"keepalive": True} if keepalive else {}
        return self.emit(
            "backend.sse.first_byte",
            at,
            metadata={"delta_ms_from_ingress": at, **extra},
            parent=self.request,
        )

    def events(self, at: float, count: int, *, step: float = 1.0) -> None:
        for i in range(count):
            self.emit(
                "backend.sse.event",
                at + i * step,
                metadata={
                    "event_type": "TEXT_MESSAGE_CONTENT",
                    "payload_size_bytes": 60,
                    "sequence_num": i,
                },
                parent=self.request,
            )

    def event(self, at: float, event_type: str, sequence: int = 0) -> str:
        return self.emit(
            "backend.sse.event",
            at,
            metadata={"event_type": event_type, "payload_size_bytes": 40, "sequence_num": sequence},
            parent=self.request,
        )

    def aborted(
        self,
        at: float,
        kind: str = "client_disconnect",
        *,
        cause: str | None = None,
        size: int = 120,
    ) -> str:
        """``cause`` writes the additive ``termination_cause`` (issue 14's wire)."""
        extra = {} if cause is None else {"termination_cause": cause}
        return self.emit(
            "backend.sse.aborted",
            at,
            outcome="err",
            metadata={"termination_kind": kind, "bytes_before_abort": size, **extra},
            parent=self.request,
        )

    def complete(
        self,
        at: float,
        *,
        status: int = 200,
        events: int | None = 3,
        outcome: str = "ok",
        edge: dict[str, str] | None = None,
    ) -> str:
        return self.emit(
            "backend.response.complete",
            at,
            outcome=outcome,
            metadata={
                "http_status": status,
                "content_length": None,
                "total_duration_ms": at,
                "sse_event_count": events,
            },
            duration_ms=int(at),
            parent=self.request,
            edge=edge,
        )

    def error(
        self, at: float, parent: str | None = None, exception_type: str = "ValueError"
    ) -> str:
        return self.emit(
            "backend.error.caught",
            at,
            outcome="err",
            metadata={
                "exception_type": exception_type,
                "message_scrubbed": "bad tool input key=[REDACTED]",
                "stack_brief": [{"file": "app.py", "line": 12}],
                "truncated": False,
            },
            parent=parent or self.request,
        )

    # -- output --------------------------------------------------------------------------------

    def lines(self) -> list[str]:
        return [f"CVDIAG {orjson.dumps(env).decode()}" for env in self.envelopes]


# --- one story per flap class ---------------------------------------------------------------


def _happy(
    story: Story, *, tokens: int | None = 5, events: int = 3, latency: float = 20.0
) -> Story:
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    story.llm_response(2 + latency, call, latency, tokens=tokens)
    if events:
        story.first_byte(3 + latency)
        story.events(3 + latency, events)
    story.agent_exit(10 + latency, 1, agent)
    story.complete(12 + latency, events=events)
    return story


def healthy(test_id: str = "t-healthy") -> Story:
    return _happy(Story(test_id))


def edge_interference(test_id: str = "t-edge") -> Story:
    story = Story(test_id)
    story.ingress(edge={"cf-ray": "8f1a-AMS", "via": "1.1 squid"})
    story.complete(5, status=200, events=0, edge={"cf-ray": "8f1b-AMS"})
    return story


def backend_error(test_id: str = "t-error") -> Story:
    story = Story(test_id)
    story.ingress()
    agent = story.agent(1)
    story.error(3, agent)
    story.agent_exit(4, 1, agent, "err")
    story.complete(5, status=500, events=0, outcome="err")
    return story


def stalled(test_id: str = "t-stalled") -> Story:
    story = Story(test_id)
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    for i in range(1, 4):
        story.heartbeat(2 + i * 10_000, call, i * 10_000)
    story.aborted(35_000)
    story.llm_response(
        35_001, call, 34_999, tokens=None, outcome="err", error_class="CancelledError"
    )
    story.agent_exit(35_002, 1, agent, "cancelled")
    return story


def slow_first_token(test_id: str = "t-slow") -> Story:
    story = Story(test_id)
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    for i in range(1, 8):
        story.heartbeat(2 + i * 10_000, call, i * 10_000)
    story.llm_response(75_002, call, 75_000)
    story.first_byte(75_003)
    story.events(75_003, 3)
    story.agent_exit(75_010, 1, agent)
    story.complete(75_012)
    return story


def provider_empty(test_id: str = "t-empty") -> Story:
    return _happy(Story(test_id), tokens=0, events=0)


def client_abort(test_id: str = "t-abort") -> Story:
    story = Story(test_id)
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    story.llm_response(22, call, 20)
    story.first_byte(23)
    story.events(23, 2)
    story.aborted(30)
    story.agent_exit(31, 1, agent, "cancelled")
    return story


def unclassified(test_id: str = "t-unknown") -> Story:
    story = Story(test_id)
    story.ingress()
    story.complete(5, status=503, events=0, outcome="err")
    return story


STORIES: dict[str, Callable[[], Story]] = {
    "edge-interference": edge_interference,
    "backend-error": backend_error,
    "stalled-backend": stalled,
    "slow-first-token": slow_first_token,
    "provider-empty": provider_empty,
    "client-abort": client_abort,
    "healthy": healthy,
    "unclassified": unclassified,
}


def write_log(path: Any, stories: Iterable[Story], *, noise: bool = True) -> None:
    """The stories' lines, interleaved in time order with ordinary log lines between them."""
    lines: list[tuple[str, int, str]] = []
    for story in stories:
        for env, line in zip(story.envelopes, story.lines(), strict=True):
            lines.append((env["ts"], env["mono_ns"], line))
    lines.sort()
    out = []
    for i, (_, _, line) in enumerate(lines):
        if noise:
            out.append(f'INFO:     127.0.0.1:5{i:04d} - "POST /chat HTTP/1.1" 200 OK')
        out.append(line)
    path.write_text("\n".join(out) + "\n")
