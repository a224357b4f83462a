"""One test id's story as points that two runs can be matched on, built one envelope at a time.

Span ids and test ids differ between any two runs, so a point is named by structure: requests by
method and path (the n-th ``POST /chat``), agent scopes by name, LLM calls by order, provider and
model. Each request, scope and call gives two points: its beginning (what it was asked: the
path, the agent, the model and the request's fingerprint) and its end (what came of it: status,
terminal, events, tokens, time to first token). A difference is placed where it became visible,
so a request that ended differently splits at its end, after the LLM call that made it so.

Nothing holds the envelopes: ``cvdiag flakes`` builds one story per test id of many large logs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from cvdiag.diagnosis.classify import Verdict, classify
from cvdiag.diagnosis.describe import edge_headers, number
from cvdiag.diagnosis.facts import Facts
from cvdiag.diagnosis.timeline import Clock
from cvdiag.layers.join import Join
from cvdiag.layers.split import path_of
from cvdiag.logs.reading import Record, key_millis

#: Event names kept per request: positions past this are compared by count only.
EVENTS_KEPT: Final = 256
#: Points kept per story: a test id that ran away (thousands of calls) stays bounded.
POINTS_MAX: Final = 2000

INGRESS: Final = "backend.request.ingress"
TERMINALS: Final = ("backend.response.complete", "backend.sse.aborted")


@dataclasses.dataclass(slots=True)
class Point:
    """A beginning or an end of a request, an agent scope or an LLM call."""

    key: str
    kind: str  # request, agent, llm
    end: bool
    label: str
    at_ms: float
    #: Compared exactly: a difference here is a difference of the story.
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Compared with the threshold: durations and times to first token, in ms.
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    heartbeats: int = 0
    #: The last heartbeat's time since the call began: how long a call had waited when last seen.
    waited_ms: float | None = None


@dataclasses.dataclass(slots=True)
class _Open:
    begin: Point
    span: str
    parent: str | None
    events: list[str] = dataclasses.field(default_factory=list)
    event_count: int = 0
    first_byte_ms: float | None = None


class Story:
    """The points of one test id, in the order they became visible; its class once finished."""

    def __init__(self, test_id: str, *, gather_facts: bool = True, timed: bool = True) -> None:
        self.test_id = test_id
        #: Envelopes taken (accounting ones aside).
        self.count = 0
        #: False: the classifier's facts are gathered later, only for the stories whose class is
        #: wanted (``flakes`` reads a failure's lines again), at a third of the cost of a read.
        self.gather_facts = gather_facts
        #: False: only LLM calls' beginnings are placed in time (``flakes`` needs their order,
        #: for the first call's provider); every other point, and ``end_ms``, stays at 0. The
        #: clock was a third of the cost of a story (two dates parsed per envelope).
        self.timed = timed
        self.points: list[Point] = []
        self._facts: Facts | None = None
        self._anchor: tuple[str, int] | None = None
        self._clock: Clock | None = None
        self._seen: dict[str, int] = {}
        # Span id of a beginning -> what is still open: requests and calls apart, so that an
        # envelope hung under the wrong span (a hand-made log) never ends the other kind.
        self._requests: dict[str, _Open] = {}
        self._open: dict[str, _Open] = {}
        self._agents: list[_Open] = []
        self._calls = 0
        self.end_ms = 0.0
        self.client_left_ms: float | None = None
        #: The probe's lines alone (and a runner's words): what the client saw, on its clock.
        self.client = Join()
        self._verdict: Verdict | None = None
        #: Set by ``finish``: the class is decided when first asked for (``flakes`` asks only
        #: for the failures': classifying is most of its time).
        self.first_token_timeout: float | None = None
        #: (agent turn's span, fingerprint) -> LLM calls that sent it.
        self.repeats: dict[tuple[str, str], int] = {}

    def add(self, record: Record) -> None:
        env = record.envelope
        boundary: str = env["boundary"]
        if boundary.startswith("cvdiag."):
            return
        self.count += 1
        if self.gather_facts:
            self.facts.add(record)
        if boundary.startswith("probe."):
            # The client's layer: in the facts (read on the backend's clock from there), and
            # in a join of its own for the facts ``flakes`` reads of every attempt.
            self.client.add(record)
            return
        if self._anchor is None:
            self._anchor = record.key  # the clock's origin, timed or not: the same offsets
        if self.timed or boundary == "backend.llm.call.start":
            if self._clock is None:
                self._clock = Clock(self._anchor)
            at = self._clock.offset_ms(record.key)
            self.end_ms = max(self.end_ms, at)
        else:
            at = 0.0
        if len(self.points) >= POINTS_MAX:
            return
        meta = env["metadata"] if isinstance(env["metadata"], dict) else {}
        span, parent = env["span_id"], env.get("parent_span_id")
        if boundary == INGRESS:
            self._begin_request(span, at, meta, env)
        elif boundary in TERMINALS:
            self._end_request(parent, at, boundary, meta, env)
        elif boundary == "backend.sse.event":
            held = self._requests.get(parent or "")
            if held is not None:
                held.event_count += 1
                if len(held.events) < EVENTS_KEPT:
                    held.events.append(str(meta.get("event_type")))
        elif boundary == "backend.sse.first_byte":
            held = self._requests.get(parent or "")
            if held is not None:  # compared on the request's end: its absence is an outcome
                held.first_byte_ms = at - held.begin.at_ms
        elif boundary == "backend.agent.enter":
            name = str(meta.get("agent_name"))
            begin = self._point("agent", name, f"agent {name}", at)
            self._agents.append(_Open(begin, span, parent))
        elif boundary == "backend.agent.exit":
            self._end_agent(parent, at, meta.get("terminal_outcome") or env["outcome"])
        elif boundary == "backend.llm.call.start":
            self._begin_call(span, parent, at, meta)
        elif boundary == "backend.llm.call.heartbeat":
            held = self._call(parent, pop=False)
            if held is not None:
                held.begin.heartbeats += 1
                held.begin.waited_ms = number(meta.get("elapsed_ms_since_start"))
        elif boundary == "backend.llm.call.response":
            self._end_call(parent, at, meta, env)

    # -- requests ------------------------------------------------------------------------------

    def _point(
        self, kind: str, identity: str, label: str, at: float, *, end: bool = False
    ) -> Point:
        name = f"{kind} {identity}"
        if not end:
            self._seen[name] = self._seen.get(name, 0) + 1
        key = f"{name} #{self._seen.get(name, 1)}" + (" end" if end else "")
        point = Point(key, kind, end, label, at)
        self.points.append(point)
        return point

    def _begin_request(
        self, span: str, at: float, meta: dict[str, Any], env: dict[str, Any]
    ) -> None:
        what = f"{str(meta.get('method'))[:16]} {str(meta.get('path'))[:200]}"
        begin = self._point("request", what, f"ingress {what}", at)
        begin.facts["edge_headers"] = edge_headers(env)
        self._requests[span] = _Open(begin, span, None)

    def _end_request(
        self,
        parent: str | None,
        at: float,
        boundary: str,
        meta: dict[str, Any],
        env: dict[str, Any],
    ) -> None:
        held = self._requests.pop(parent or "", None)
        if held is None:  # no ingress (the default tier): the terminal begins its request too
            held = _Open(self._point("request", "?", "a request", at), "", None)
        end = Point(held.begin.key + " end", "request", True, held.begin.label, at)
        self.points.append(end)
        aborted = boundary == "backend.sse.aborted"
        end.facts.update(
            terminal="aborted" if aborted else "complete",
            outcome=env["outcome"],
            http_status=meta.get("http_status"),
            termination_kind=meta.get("termination_kind"),
            termination_cause=meta.get("termination_cause"),
            events=held.event_count or meta.get("sse_event_count"),
            event_names=held.events,
            edge_headers={**held.begin.facts.get("edge_headers", {}), **edge_headers(env)},
        )
        end.facts = {k: v for k, v in end.facts.items() if v is not None and v != []}
        duration = number(env.get("duration_ms")) or number(meta.get("total_duration_ms"))
        if duration is not None:
            end.timings["duration_ms"] = duration
        if held.first_byte_ms is not None:
            end.timings["first_byte_ms"] = held.first_byte_ms
        if aborted and self.client_left_ms is None:
            self.client_left_ms = at

    def _end_agent(self, parent: str | None, at: float, outcome: object) -> None:
        # An exit names no agent and hangs under the request, not the enter: the innermost open
        # scope of the same parent is the one that ends.
        for index in range(len(self._agents) - 1, -1, -1):
            held = self._agents[index]
            if held.parent == parent:
                del self._agents[index]
                end = Point(held.begin.key + " end", "agent", True, held.begin.label, at)
                end.facts["outcome"] = outcome
                end.timings["duration_ms"] = at - held.begin.at_ms
                self.points.append(end)
                return

    # -- LLM calls -----------------------------------------------------------------------------

    def _begin_call(self, span: str, parent: str | None, at: float, meta: dict[str, Any]) -> None:
        self._calls += 1
        model = f"{str(meta.get('provider'))[:40]}/{str(meta.get('model'))[:80]}"
        begin = self._point("llm", f"{self._calls} {model}", f"LLM {model}", at)
        sent = meta.get("request_fingerprint")
        if isinstance(sent, str):
            begin.facts["request_fingerprint"] = sent
            # The same prompt sent again within one agent turn (the same parent scope): the
            # agent may be looping, asking the model the same thing and getting the same answer.
            turn = (parent or "", sent)
            self.repeats[turn] = self.repeats.get(turn, 0) + 1
        self._open[span] = _Open(begin, span, None)

    def _end_call(
        self, parent: str | None, at: float, meta: dict[str, Any], env: dict[str, Any]
    ) -> None:
        held = self._call(parent, pop=True)
        if held is None:
            return
        end = Point(held.begin.key + " end", "llm", True, held.begin.label, at)
        end.heartbeats = held.begin.heartbeats
        end.facts.update(
            outcome=env["outcome"],
            error_class=meta.get("error_class"),
            response_token_count=meta.get("response_token_count"),
            finish_reasons=meta.get("finish_reasons"),
        )
        end.facts = {k: v for k, v in end.facts.items() if v is not None}
        first = number(meta.get("first_token_delta_ms"))
        if first is not None:
            end.timings["first_token_ms"] = first
        latency = number(meta.get("latency_ms")) or number(env.get("duration_ms"))
        if latency is not None:
            end.timings["latency_ms"] = latency
        self.points.append(end)

    def _call(self, parent: str | None, *, pop: bool) -> _Open | None:
        """The open call ``parent`` names; else the latest call still open (a log that hangs a
        call's heartbeats and answer under its request)."""
        key = parent or ""
        if key not in self._open:
            if not self._open:
                return None
            key = next(reversed(self._open))
        return self._open.pop(key) if pop else self._open[key]

    def finish(self, *, first_token_timeout: float) -> Story:
        """The calls still waiting and the requests with no terminal become points at the
        story's end; the class is decided."""
        for held in self._open.values():
            end = Point(held.begin.key + " end", "llm", True, held.begin.label, self.end_ms)
            end.facts["outcome"] = "no answer"
            end.heartbeats = held.begin.heartbeats
            end.waited_ms = held.begin.waited_ms
            self.points.append(end)
        for held in self._requests.values():
            end = Point(held.begin.key + " end", "request", True, held.begin.label, self.end_ms)
            end.facts.update(terminal="none", events=held.event_count)
            self.points.append(end)
        self._open.clear()
        self._requests.clear()
        self._client_left()
        self.points.sort(key=_at)
        self.first_token_timeout = first_token_timeout
        return self

    def _client_left(self) -> None:
        """When the client left, by its own side (probe lines, a runner's words) when it says
        (the backend learns it only when it next writes); and each request the client sent as
        a point: how it ended, when its head and first event came after it was sent."""
        joined = self._facts is not None and self._facts.join.has_probe
        view = (self.facts.join if joined else self.client).view()
        if view is None or self._anchor is None:
            return
        anchor = key_millis(self._anchor[0])
        if view.left_ms is not None:
            self.client_left_ms = view.left_ms - anchor
        for request in view.requests if self.timed else ():
            what = f"{request.method or '?'} {path_of(request.url) or '?'}"
            seen = self._seen[f"client {what}"] = self._seen.get(f"client {what}", 0) + 1
            at = request.end_ms or request.head_ms or request.sent_ms
            point = Point(
                f"client {what} #{seen} end",
                "client",
                True,
                f"client {what}",
                at - anchor if at is not None else self.end_ms,
            )
            point.facts["client_end"] = request.end or "none"
            if request.timeout_ms is not None:
                point.facts["client_timeout_ms"] = request.timeout_ms
            sent = request.sent_ms
            for name, value in (
                ("client_head_ms", request.head_ms),
                ("client_first_event_ms", request.first_event_ms),
            ):
                if value is not None and sent is not None:
                    point.timings[name] = value - sent
            self.points.append(point)

    @property
    def facts(self) -> Facts:
        """The classifier's facts, made when first wanted: most of ``flakes``'s stories (its
        passes) never want them."""
        if self._facts is None:
            self._facts = Facts(self.test_id)
        return self._facts

    @property
    def finished(self) -> bool:
        return self.first_token_timeout is not None

    @property
    def verdict(self) -> Verdict | None:
        if self._verdict is None and self.first_token_timeout is not None:
            self._verdict = classify(self.facts, first_token_timeout=self.first_token_timeout)
        return self._verdict

    def loops(self) -> list[tuple[str, int]]:
        """Fingerprints sent more than once within one agent turn, with how often: a possible
        loop."""
        return [(sent, n) for (_, sent), n in self.repeats.items() if n > 1]

    @property
    def flap_class(self) -> str:
        verdict = self.verdict
        return verdict.flap_class if verdict is not None else "unknown"


def _at(point: Point) -> float:
    return point.at_ms
