"""Hand-written stories of issue 45's causes, backend and probe lines together (``Story`` and
``Probe``): the probe's clock skewed from the backend's, each cause with its control.
The diagnosis tests classify them as records, the CLI tests as files."""

from __future__ import annotations

from tests.support.probes import Probe
from tests.support.stories import Story, _happy

SKEW = 3_250.0  # the probe's clock is behind the backend's by this much
Planted = tuple[Story, Probe | None]


def slow_llm(*, answers: bool = True) -> Planted:
    """A JSON POST whose LLM call takes 4.1 s, against the client's 2 s timeout."""
    story = Story("t-slow-llm")
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    if answers:
        story.llm_response(4102, call, 4100)
        story.aborted(4123, "rst", cause="left_before_response", size=56)
    else:
        story.aborted(9000, "rst", cause="left_before_response", size=0)
        story.llm_response(
            9001, call, 8999, tokens=None, outcome="err", error_class="CancelledError"
        )
    story.agent_exit(9002 if not answers else 4124, 1, agent, "cancelled")
    probe = Probe("t-slow-llm", skew_ms=SKEW)
    probe.start(-5)
    index = probe.send(-1, timeout=2000)
    probe.error(1999, index, timeout=2000)
    probe.exit(2010, passed=False)
    return story, probe


def held_stream(*, held: bool = True, head_held: bool = False) -> Planted:
    """The backend sends 8 events 100 ms apart and completes; a buffering proxy holds them
    (``head_held``: the head too, as nginx's buffering with gzip does in the real run, so the
    answers bound the clocks' offset loosely)."""
    story = Story("t-held")
    story.ingress(edge={"via": "1.1 nginx"})
    story.first_byte(10)
    story.events(10, 8, step=100)
    story.complete(800, events=8)
    probe = Probe("t-held", skew_ms=-SKEW)
    probe.start(-5)
    index = probe.send(-1)
    probe.head(801 if head_held else 4, index, sent=-1)
    first = 802 if held else 12
    for i in range(8):
        probe.event(first + (i if held else i * 100), index, i)
    probe.exit(830, passed=True, events=8)
    return story, probe


def left_early(*, probe_lines: bool = True) -> Planted:
    story = Story("t-left")
    story.ingress()
    agent = story.agent(1)
    call = story.llm_start(2, agent)
    story.llm_response(22, call, 20)
    story.first_byte(23)
    story.events(23, 2)
    story.aborted(30)
    story.agent_exit(31, 1, agent, "cancelled")
    if not probe_lines:
        return story, None
    probe = Probe("t-left", skew_ms=SKEW)
    probe.start(-5)
    index = probe.send(-1)
    probe.head(3, index, sent=-1)
    probe.event(24, index)
    probe.aborted(29, index, cause="left-early", size=120)
    probe.exit(35, passed=True, events=1)
    return story, probe


def runner_crash(*, exits: bool = False) -> Planted:
    story = Story("t-crash")
    story.ingress()
    story.first_byte(5)
    story.aborted(60, "rst", cause="client_disconnect")
    probe = Probe("t-crash", skew_ms=SKEW)
    probe.start(-5)
    index = probe.send(-1)
    probe.head(6, index, sent=-1)
    if exits:
        probe.aborted(59, index, cause="network-error")
        probe.exit(61, passed=False)
    return story, probe


def page(kind: str) -> Planted:
    """A browser test over a healthy backend: the page's first token, a console error, or
    other content in its place."""
    story = _happy(Story(f"t-page-{kind}"))
    probe = Probe(f"t-page-{kind}", skew_ms=-SKEW, runner="playwright")
    probe.start(-50, url="http://127.0.0.1:3000/")
    index = probe.send(-1)
    probe.head(2, index, sent=-1)
    probe.event(24, index)
    if kind == "healthy":
        probe.first_token(40)
    elif kind == "hydration":
        probe.console_error(30, "TypeError: Cannot read properties of undefined (reading 'map')")
    else:
        probe.alternate(40)
    probe.exit(500, passed=kind == "healthy", events=3)
    return story, probe


def favicon(*, chat: bool = True) -> Planted:
    story = Story("t-icon")
    if chat:
        _happy(story)
    story.request = story.emit(
        "backend.request.ingress",
        40,
        metadata={"method": "GET", "path": "/favicon.ico", "content_length": None},
    )
    story.complete(45, status=404, events=0)
    return story, None
