"""Probe records read on the backend's clock: shifted by the offset their pairs bound, merged
again in time order; the backend's records untouched; a join read twice says the same."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag.layers import Join, aligned, is_probe
from cvdiag.layers.join import wall_ms
from cvdiag.logs.reading import key_millis
from tests.support.client_stories import page, slow_llm
from tests.support.probes import Probe
from tests.support.records import records_of
from tests.support.stories import Story


@settings(max_examples=60, deadline=None)
@given(skew=st.floats(min_value=-100_000.0, max_value=100_000.0, allow_nan=False))
def test_probe_records_move_onto_the_backends_clock(skew: float) -> None:
    story = Story("t-align")
    story.ingress(0)
    story.first_byte(20)
    story.complete(40, events=1)
    probe = Probe("t-align", skew_ms=skew)
    index = probe.send(-2)
    probe.head(3, index, sent=-2)
    probe.event(22, index)
    given_records = records_of(("probe.log", probe), ("backend.log", story))
    out = aligned(given_records)
    assert sorted(r.where for r in out) == sorted(r.where for r in given_records)
    backend = [r for r in out if not is_probe(r)]
    assert backend == [r for r in given_records if not is_probe(r)]  # untouched, same order
    assert [r.key for r in out] == sorted(r.key for r in out)
    for record in out:
        if is_probe(record):  # within the stamps' resolution of where it truly was
            true = wall_ms(record) + skew
            assert abs(key_millis(record.key[0]) - true) <= 4.0
    order = [r.envelope["boundary"] for r in out]
    assert order.index("probe.message.send") < order.index("backend.request.ingress")
    assert order.index("backend.sse.first_byte") < order.index("probe.sse.event")


def test_without_probe_lines_the_records_come_back_as_they_were() -> None:
    story, _ = slow_llm()
    records = records_of(("backend.log", story))
    assert aligned(records) == records


def test_a_join_read_twice_says_the_same() -> None:
    story, probe = page("hydration")
    assert probe is not None
    join = Join()
    for record in records_of(("b", story), ("p", probe)):
        join.add(record)
    first, second = join.view(), join.view()
    assert first is not None
    assert second is not None
    assert first.to_json() == second.to_json()
    assert [e.at_ms for e in first.console_errors] == [e.at_ms for e in second.console_errors]
