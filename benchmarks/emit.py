"""Per-envelope cost of one ``backend.sse.event``: the public ``emit()``, and the per-request
template path the middleware writes its own envelopes with (``Emitter.lines_for`` →
``RequestLines.event``, cvdiag/pipeline/template.py), beside ``orjson.dumps`` of the envelope alone;
and the cost of minting a UUIDv7 with cvdiag's RFC 9562 counter beside ``uuid6.uuid7()``.

Run: ``python benchmarks/emit.py [--n 50000] [--rounds 10] [--json]``. stdout is pointed at
/dev/null (line-buffered, as under PYTHONUNBUFFERED=1) so the figures measure cvdiag, not the
terminal; results go to stderr, and with ``--json`` to stdout as JSON.

Everything runs on an event loop, as the middleware does, so the stdout sink drains from the
loop. The variants are interleaved in rounds; each call is timed on its own with
``perf_counter_ns`` (the median and p99 are per call), and each variant's block is also timed
whole with its lines written to /dev/null (``µs amortized``: the call plus its share of the
write, see benchmarks/harness.py ``finish``). The empty call's row is what the timing itself
costs each call: subtract it to compare with figures measured in bulk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
import uuid6
from harness import finish

from cvdiag import RequestContext, Settings, configure, emit
from cvdiag.core.context import set_context
from cvdiag.pipeline.envelope import NULL_EDGE_HEADERS, build
from cvdiag.schema.ids import new_uuid7
from cvdiag.sinks import QueuedLineSink

METADATA = {"event_type": "TEXT_MESSAGE_CONTENT", "payload_size_bytes": 187, "sequence_num": 12}
ROWS = (
    "orjson.dumps alone (floor)",
    "an empty call (the timer's own)",
    "public emit() → stdout sink",
    "request template → stdout sink",
    "uuid6.uuid7() (was cvdiag's)",
    "cvdiag.schema.ids.new_uuid7()",
)


def _percentile(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


async def bench(n: int, rounds: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    emitter = configure(
        Settings(enabled=True, tier="debug", debug_max_envelopes=10**9, queue_size=10**7)
    )
    sinks = [s for s in emitter.sinks if isinstance(s, QueuedLineSink)]
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
    lines = emitter.lines_for(context)
    if lines is None:
        raise RuntimeError("the template path is not in use for the stdout sink")
    calls: dict[str, Callable[[], Any]] = {
        ROWS[0]: lambda: orjson.dumps(envelope),
        ROWS[1]: lambda: None,
        ROWS[2]: lambda: emit("backend.sse.event", metadata=METADATA),
        ROWS[3]: lambda: lines.event("TEXT_MESSAGE_CONTENT", 187, 12),
        ROWS[4]: lambda: str(uuid6.uuid7()),
        ROWS[5]: new_uuid7,
    }
    per_call: dict[str, list[int]] = {name: [] for name in ROWS}
    amortized: dict[str, list[float]] = {name: [] for name in ROWS}
    per_round = max(1, n // rounds)
    clock = time.perf_counter_ns
    for fn in calls.values():  # warm up
        for _ in range(1000):
            fn()
    finish(sinks)
    for round_no in range(rounds):
        shift = round_no % len(ROWS)
        for name in ROWS[shift:] + ROWS[:shift]:
            fn, samples = calls[name], per_call[name]
            start = clock()
            for _ in range(per_round):
                t0 = clock()
                fn()
                samples.append(clock() - t0)
            finish(sinks)  # the lines this block queued are written inside its timing
            amortized[name].append((clock() - start) / per_round)
        await asyncio.sleep(0)  # the loop's scheduled drains find nothing left
    rows = [
        {
            "variant": name,
            "median_us": statistics.median(per_call[name]) / 1000,
            "p99_us": _percentile(per_call[name], 0.99),
            "amortized_us": statistics.median(amortized[name]) / 1000,
            "amortized_min_us": min(amortized[name]) / 1000,
            "amortized_max_us": max(amortized[name]) / 1000,
        }
        for name in ROWS
    ]
    return rows, {"emitted": emitter.emitted, "dropped": emitter.stats()["queue_dropped"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50_000, help="calls per variant")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()

    devnull = open(os.devnull, "w", buffering=1)  # noqa: SIM115 - held for the whole run
    real_stdout, sys.stdout = sys.stdout, devnull
    try:
        rows, extra = asyncio.run(bench(args.n, args.rounds))
    finally:
        sys.stdout = real_stdout
    err = sys.stderr
    print(
        f"{'variant':34} {'median µs':>10} {'p99 µs':>8} {'µs amortized (min–max)':>24}",
        file=err,
    )
    for row in rows:
        spread = f"{row['amortized_min_us']:.2f}–{row['amortized_max_us']:.2f}"
        print(
            f"{row['variant']:34} {row['median_us']:10.2f} {row['p99_us']:8.2f}"
            f" {row['amortized_us']:10.2f} ({spread})",
            file=err,
        )
    by_name = {row["variant"]: row for row in rows}
    for name in ROWS[2:4]:
        ratio = by_name[name]["median_us"] / by_name[ROWS[0]]["median_us"]
        print(f"{name}: {ratio:.1f}x orjson.dumps alone", file=err)
    print(f"envelopes emitted {extra['emitted']}, dropped {extra['dropped']}", file=err)
    if args.json:
        print(json.dumps({"variants": rows, **extra}, indent=2))


if __name__ == "__main__":
    main()
