"""Probe records read on the backend's clock: each probe writer's records of a test id shifted
by the offset its pairs bound (``join``), the mock provider's by the offset its entries and the
backend's LLM calls bound (``mock``), then every record in time order again.

The commands that draw or list a test id's records one by one (``replay``, ``classify``, the
report's stories, ``diff``) read them through here, once; the facts a class rests on read the
offset themselves (``Join.view``), from each envelope's own ``ts``, so shifted or not they agree.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from cvdiag.layers.join import Join
from cvdiag.layers.split import is_probe, layer_of
from cvdiag.logs.reading import Record, format_key, key_millis

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def shift_key(key: tuple[str, int], ms: float) -> tuple[str, int]:
    """A merge key ``ms`` later (earlier when negative), to the microsecond."""
    moment = _EPOCH + datetime.timedelta(milliseconds=key_millis(key[0]) + ms)
    return format_key(moment), key[1]


def aligned(records: Iterable[Record]) -> list[Record]:
    """``records`` (any test ids, any layers) with each probe writer's records, and the mock
    provider's, shifted onto its backend's clock, in time order (stable: equal keys keep the
    order given). Records without a probe or mock layer come back as they were."""
    given = list(records)
    joins: dict[str, Join] = {}
    for record in given:
        test_id = record.envelope["test_id"]
        join = joins.get(test_id)
        if join is None:
            join = joins[test_id] = Join()
        join.add(record)
    offsets = {test_id: join.offsets() for test_id, join in joins.items() if join.has_probe}
    # The mock provider's lines (``aimock.*``), on the backend's clock from its LLM calls.
    mocks = {test_id: join.mock.offset() for test_id, join in joins.items() if join.mock.has_mock}
    if not offsets and not mocks:
        return given
    out = []
    for record in given:
        test_id = record.envelope["test_id"]
        of = offsets.get(test_id)
        offset = of.get(record.source) if of is not None and is_probe(record) else None
        if offset is None and test_id in mocks and layer_of(record.envelope) == "aimock":
            offset = mocks[test_id]
        if offset is not None and offset.theta_ms:
            record = Record(
                record.source,
                record.lineno,
                record.text,
                record.envelope,
                shift_key(record.key, offset.theta_ms),
            )
        out.append(record)
    out.sort(key=_key)
    return out


def _key(record: Record) -> tuple[str, int]:
    return record.key
