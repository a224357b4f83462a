"""Records as ``cvdiag.logs`` reads them, from the hand-written writers' envelopes."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from cvdiag.logs.reading import Record, ts_key
from tests.support.probes import Probe
from tests.support.stories import Story


def records_of(*writers: tuple[str, Story | Probe]) -> list[Record]:
    """Each ``(source, writer)``'s envelopes as records of that source, in the writers' order."""
    out = []
    for source, writer in writers:
        for lineno, env in enumerate(writer.envelopes, 1):
            key = ts_key(env["ts"])
            assert key is not None
            out.append(Record(source, lineno, orjson.dumps(env), env, (key, env["mono_ns"])))
    return out


def by_time(records: Iterable[Record]) -> list[Record]:
    return sorted(records, key=lambda r: r.key)
