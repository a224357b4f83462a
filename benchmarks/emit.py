"""Per-envelope cost of ``emit`` to the real stdout sink, beside ``orjson.dumps`` alone; and
the cost of minting a UUIDv7 with cvdiag's RFC 9562 counter beside ``uuid6.uuid7()``.

Run: ``python benchmarks/emit.py [--n 50000]``. stdout is pointed at /dev/null for the run so
the figures measure cvdiag, not the terminal; results go to stderr.

Both variants run in one process, interleaved in rounds, and each timed call is measured on its
own with ``perf_counter_ns``, so the median and p99 are per envelope.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import orjson
import uuid6

from cvdiag import RequestContext, Settings, configure, flush
from cvdiag.context import set_context
from cvdiag.envelope import NULL_EDGE_HEADERS, build
from cvdiag.ids import new_uuid7

METADATA = {"event_type": "TEXT_MESSAGE_CONTENT", "payload_size_bytes": 187, "sequence_num": 12}


def _percentile(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50_000, help="envelopes per variant")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    devnull = open(os.devnull, "w")  # noqa: SIM115 - held for the whole run
    real_stdout, sys.stdout = sys.stdout, devnull
    emitter = configure(Settings(enabled=True, tier="debug", debug_max_envelopes=10**9))
    context = RequestContext(
        test_id="01a20162-2dc3-73c2-bd91-a4bc72607c4d",
        trace_id="01a20162-2dc4-7ef8-8320-cbf32bb53867",
        slug="demo-agent",
        demo="chat",
        span_id="6340156b9a4e1c56",
    )
    set_context(context)
    envelope = build(
        "backend.sse.event",
        outcome="info",
        metadata=dict(METADATA),
        duration_ms=None,
        context=context,
        span_id="6340156b9a4e1c56",
        parent_span_id="0b6a1e35d1b5a77c",
        edge_headers=NULL_EDGE_HEADERS,
    )
    emit_ns: list[int] = []
    dumps_ns: list[int] = []
    ours_ns: list[int] = []
    uuid6_ns: list[int] = []
    per_round = max(1, args.n // args.rounds)
    clock = time.perf_counter_ns
    for _ in range(args.rounds):
        for _ in range(per_round):
            start = clock()
            orjson.dumps(envelope)
            dumps_ns.append(clock() - start)
        for _ in range(per_round):
            start = clock()
            emitter.emit("backend.sse.event", metadata=METADATA)
            emit_ns.append(clock() - start)
        for _ in range(per_round):
            start = clock()
            new_uuid7()
            ours_ns.append(clock() - start)
        for _ in range(per_round):
            start = clock()
            str(uuid6.uuid7())
            uuid6_ns.append(clock() - start)
        flush(30)  # the writer drains between rounds; the queue never overflows
    flush(30)
    sys.stdout = real_stdout
    dropped = emitter.stats()["queue_dropped"]

    rows = [
        ("orjson.dumps alone (floor)", dumps_ns),
        ("cvdiag emit → stdout sink", emit_ns),
        ("uuid6.uuid7() (was cvdiag's)", uuid6_ns),
        ("cvdiag.ids.new_uuid7()", ours_ns),
    ]
    print(f"{'variant':32} {'median µs':>10} {'p99 µs':>10} {'mean µs':>10}", file=sys.stderr)
    for name, samples in rows:
        print(
            f"{name:32} {statistics.median(samples) / 1000:10.2f} "
            f"{_percentile(samples, 0.99):10.2f} {statistics.fmean(samples) / 1000:10.2f}",
            file=sys.stderr,
        )
    ratio = statistics.median(emit_ns) / statistics.median(dumps_ns)
    print(f"emit median / orjson median: {ratio:.1f}x; dropped: {dropped}", file=sys.stderr)


if __name__ == "__main__":
    main()
