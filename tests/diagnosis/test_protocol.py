"""``protocol-incomplete`` on hand-written logs: an AG-UI run or a Responses stream that completed
without its terminal event, or sent after it, read from the debug tier's events or from the
terminal's ``first_event_type``/``last_event_type`` alike. The real streams are in
tests/e2e/test_protocol_real.py."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from cvdiag.diagnosis import classify
from cvdiag.logs.reading import Input, records
from tests.support.stories import Story

AGUI = ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STATE_SNAPSHOT"]
ENDS = ["RUN_FINISHED", "RUN_ERROR"]


def _classify(story: Story) -> classify.Verdict:
    data = ("\n".join(story.lines()) + "\n").encode()
    found = list(records(Input("log", io.BytesIO(data)), print))
    return classify.classify(classify.gather(story.test_id, found))


def _expected(kinds: list[str]) -> bool:
    """Whether an AG-UI stream of ``kinds`` breaks its protocol, as the issue words it."""
    if not kinds or kinds[0] != "RUN_STARTED":
        return False
    ends = [i for i, kind in enumerate(kinds) if kind in ENDS]
    return not ends or ends[0] != len(kinds) - 1


def _debug(kinds: list[str]) -> Story:
    story = Story("debug")
    story.ingress()
    story.first_byte(1)
    for i, kind in enumerate(kinds):
        story.event(2 + i, kind, i)
    story.complete(5 + len(kinds), events=len(kinds))
    return story


def _default(kinds: list[str]) -> Story:
    story = Story("default")
    story.complete(5, events=len(kinds))
    if kinds:
        story.envelopes[-1]["metadata"].update(first_event_type=kinds[0], last_event_type=kinds[-1])
    return story


run = st.lists(st.sampled_from(["RUN_STARTED", *AGUI, *ENDS]), max_size=12)


@given(body=run, opened=st.booleans())
def test_the_debug_tier_names_every_broken_run(body: list[str], opened: bool) -> None:
    kinds = (["RUN_STARTED"] if opened else []) + body
    verdict = _classify(_debug(kinds))
    broken = _expected(kinds)
    # An error event in-band is the backend's story first (backend-error), whatever follows it.
    if "RUN_ERROR" in kinds:
        return
    assert (verdict.flap_class == "protocol-incomplete") == broken, (kinds, verdict.reason)
    if not broken:
        assert verdict.flap_class == "healthy"


@given(body=st.lists(st.sampled_from([*AGUI, "RUN_FINISHED"]), max_size=12))
def test_below_debug_the_terminals_first_and_last_events_tell(body: list[str]) -> None:
    kinds = ["RUN_STARTED", *body]
    verdict = _classify(_default(kinds))
    ended = kinds[-1] == "RUN_FINISHED"
    assert verdict.flap_class == ("healthy" if ended else "protocol-incomplete"), verdict.reason


def test_a_responses_stream_without_its_end_and_one_after_it() -> None:
    cut = _classify(_debug(["response.created", "response.output_text.delta"]))
    assert cut.flap_class == "protocol-incomplete"
    assert "OpenAI Responses stream" in cut.reason
    assert "last event was response.output_text.delta" in cut.reason
    late = _classify(
        _debug(["response.created", "response.completed", "response.output_text.delta"])
    )
    assert late.flap_class == "protocol-incomplete"
    assert late.evidence["breach"] == "after-terminal"
    whole = _classify(
        _debug(["response.created", "response.output_text.delta", "response.completed"])
    )
    assert whole.flap_class == "healthy"


def test_a_stream_that_opened_no_run_is_not_held_to_one() -> None:
    """AG-UI-like names without ``RUN_STARTED`` (a demo's bare ``TEXT_MESSAGE_CONTENT``)."""
    assert _classify(_default(["TEXT_MESSAGE_CONTENT"])).flap_class == "healthy"
    assert _classify(_debug(["TEXT_MESSAGE_CONTENT"])).flap_class == "healthy"


def test_each_request_of_a_test_id_is_held_to_its_own_run() -> None:
    story = Story("two")
    for start in (0, 100):
        story.ingress(start)
        story.first_byte(start + 1)
        story.event(start + 2, "RUN_STARTED")
        if start == 0:
            story.event(start + 3, "RUN_FINISHED", 1)
        story.complete(start + 5, events=2)
    verdict = _classify(story)
    assert verdict.flap_class == "protocol-incomplete"
    assert "last event was RUN_STARTED" in verdict.reason
