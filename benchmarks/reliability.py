"""The reliability suite in full, and the figures of docs/reliability.md.

Run: ``python benchmarks/reliability.py`` (about five minutes on a 2-core machine). It

1. runs ``pytest -m reliability tests/reliability`` with ``CVDIAG_RELIABILITY_SCALE=full`` (the
   issue's numbers: 2,000 concurrent requests, 1,000 per fault, 100,000 for memory, 500
   hypothesis examples per property), and
2. measures what the suite does not assert, because timings are not assertions: p50/p99
   latency of the same load with and without cvdiag, interleaved round by round in one run; the
   scrubber's worst case on 10 MB of adversarial input; RSS growth over 100,000 requests; what
   ``os._exit`` without a flush loses; what a blocking callable sink costs a request.

Then it prints the table. ``--skip-tests`` measures only; ``--rounds``/``--requests`` size the
latency comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.reliability.apps import EVENTS  # noqa: E402
from tests.reliability.drivers import (  # noqa: E402
    Result,
    memory_run_with_devnull_stdout,
    percentile,
    plan,
    run_load,
    server_process,
)
from tests.reliability.lifecycle import end_a_host  # noqa: E402
from tests.reliability.scale import DISCONNECT_SHARE, FULL  # noqa: E402

Row = tuple[str, str, str]


def run_suite() -> tuple[list[Row], float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "reliability", "tests/reliability",
         "-p", "no:randomly", "-o", "addopts=-p no:cacheprovider"],
        cwd=ROOT,
        env={**os.environ, "CVDIAG_RELIABILITY_SCALE": "full"},
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "no output"
    print(proc.stdout[-3000:], file=sys.stderr)
    status = "pass" if proc.returncode == 0 else f"FAIL (exit {proc.returncode})"
    return [("full suite (`-m reliability`, scale=full)", summary, status)], elapsed


# --- load: p99 with and without cvdiag, interleaved -------------------------------------------


def load_figures(rounds: int, requests: int) -> list[Row]:
    latencies: dict[str, list[float]] = {"off": [], "default": []}
    stats: dict[str, Any] = {}
    lines = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cvdiag-stdout.log")
        with server_process("off") as bare, server_process("default", stdout_file=out) as cv:
            urls = {"off": bare.url, "default": cv.url}
            for round_no in range(rounds + 1):  # round 0 warms both servers up
                order = ["off", "default"] if round_no % 2 else ["default", "off"]
                for variant in order:
                    results = plan(requests, DISCONNECT_SHARE, EVENTS, seed=round_no)
                    asyncio.run(run_load(urls[variant], results, events=EVENTS))
                    errors = [r for r in results if r.error]
                    assert not errors, errors[:3]
                    if round_no:
                        latencies[variant] += _complete(results)
        stats = cv.stats
        lines = len(cv.envelopes())
    rows: list[Row] = []
    p50 = {v: percentile(x, 0.5) * 1000 for v, x in latencies.items()}
    p99 = {v: percentile(x, 0.99) * 1000 for v, x in latencies.items()}
    n = len(latencies["default"])
    label = f"{requests:,} concurrent SSE requests x {rounds} rounds, {DISCONNECT_SHARE:.0%} leave"
    rows.append((label, f"{n:,} complete streams timed per variant", ""))
    rows.append(("p50 without / with cvdiag (default tier)",
                 f"{p50['off']:.0f} ms / {p50['default']:.0f} ms",
                 f"{p50['default'] / p50['off']:.3f}x"))  # fmt: skip
    rows.append(("p99 without / with cvdiag (default tier)",
                 f"{p99['off']:.0f} ms / {p99['default']:.0f} ms",
                 f"{p99['default'] / p99['off']:.3f}x (target <= 1.10x)"))  # fmt: skip
    rows.append(("envelopes emitted / on stdout / dropped",
                 f"{stats.get('emitted', 0):,} / {lines:,} / {stats.get('queue_dropped', 0):,}",
                 "no loss" if lines == stats.get("emitted") and not stats.get("queue_dropped")
                 else "LOSS"))  # fmt: skip
    return rows


def _complete(results: list[Result]) -> list[float]:
    return [r.latency for r in results if r.disconnect_after is None]


# --- the scrubber's worst case -------------------------------------------------------------------

ADVERSARIAL_UNITS = [
    "eyJ", "a", "sk-", "https://", "password=", "-----BEGIN PRIVATE KEY-----", "Bearer ", "a:",
    "ab1-", "AGE-SECRET-KEY-1", "whsec_", "1//0", "1:AA", "hooks.slack.com/services/", "key-",
    "SG.", "AccountKey=", "dp.pt.", "%41", "%2525", "password%3D", "%2570assword%253D",
    "Bearer%2520", "https%3A%2F%2Fa%40", "AGE-SECRET-KEY-1%2525", "secret_key=",
]  # fmt: skip


def scrub_figures() -> list[Row]:
    from cvdiag.scrubbing.redact import scrub_text

    worst, worst_unit = 0.0, ""
    size = 10_000_000
    for unit in ADVERSARIAL_UNITS:
        text = unit * (size // len(unit))
        cost = min(_timed(scrub_text, text) for _ in range(5)) * 1000
        if cost > worst:
            worst, worst_unit = cost, unit
    return [(f"scrub: 10 MB adversarial input, worst of {len(ADVERSARIAL_UNITS)} shapes",
             f"{worst:.1f} ms ({worst_unit!r} repeated)",
             "target < 50 ms")]  # fmt: skip


def _timed(fn: Callable[..., Any], *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


# --- memory --------------------------------------------------------------------------------------


def memory_figures(requests: int) -> list[Row]:
    run = memory_run_with_devnull_stdout(requests, warmup=5_000)
    mb = run.rss_growth / 1024 / 1024
    return [
        (f"memory: {requests:,} requests (streaming, aborted, failing, WebSocket)",
         f"RSS {run.rss_after_warmup / 2**20:.1f} -> {run.rss_after / 2**20:.1f} MB "
         f"(+{mb:.2f} MB); {run.emitted:,} envelopes",
         "target < 10 MB"),
        ("leftovers after the memory run",
         f"tasks {run.tasks_after - 1}, threads {run.threads_after - run.threads_after_warmup:+d}, "
         f"contexts {run.contexts_left}, outstanding calls {run.outstanding_calls}",
         "all zero"),
    ]  # fmt: skip


# --- lifecycle -----------------------------------------------------------------------------------


def lifecycle_figures() -> list[Row]:
    rows: list[Row] = []
    count, queue = 20_000, 5_000
    for ending in ("sigterm", "sigint", "uncaught exception", "os._exit after flush()"):
        result = end_a_host(ending, count=count, queue=count, read_while_running=False)
        rows.append((f"{ending}: {count:,} envelopes queued, stdout unread",
                     f"{result.written:,} on stdout", "none lost" if result.written == count
                     else "LOSS"))  # fmt: skip
    for read in (True, False):
        result = end_a_host(
            "os._exit without flush", count=count, queue=queue, read_while_running=read
        )
        how = "stdout read" if read else "stdout unread"
        rows.append((f"os._exit without flush, {how} (queue {queue:,})",
                     f"{result.written:,} of {count:,} on stdout, {result.dropped:,} dropped "
                     f"(counted) while the pipe was full, {result.lost_at_exit:,} lost at exit, "
                     f"{result.partial} partial line",
                     "loss bounded by the queue (+ one 512-line batch)"))  # fmt: skip
    return rows


# --- a blocking callable sink --------------------------------------------------------------------


def blocking_sink_figures() -> list[Row]:
    from cvdiag import CallableSink, MemorySink, Settings, Tier, configure
    from tests.reliability.apps import build
    from tests.reliability.drivers import MIX, exchange

    req = MIX[1]  # a 4-event SSE stream: 10 envelopes at the debug tier

    def per_request(sinks: list[Any]) -> float:
        configure(Settings(enabled=True, tier=Tier.DEBUG, debug_max_envelopes=10**9), sinks=sinks)
        app = build()

        async def run() -> list[float]:
            out = []
            for _ in range(200):
                start = time.perf_counter()
                await exchange(app, req)
                out.append(time.perf_counter() - start)
            return out

        return statistics.median(asyncio.run(run())) * 1000

    quick = per_request([MemorySink()])
    blocking = per_request([CallableSink(lambda envelope: time.sleep(0.001))])
    configure(Settings(), sinks=[MemorySink()])
    return [("callable sink blocking 1 ms per envelope (debug, 10 envelopes)",
             f"median request {quick:.2f} ms -> {blocking:.2f} ms",
             "runs in the emitting thread: the request waits")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=FULL.load_requests)
    parser.add_argument("--memory", type=int, default=FULL.memory_requests)
    args = parser.parse_args()
    started = time.perf_counter()
    rows: list[Row] = []
    if not args.skip_tests:
        suite, elapsed = run_suite()
        rows += [(name, f"{summary} ({elapsed:.0f} s)", status) for name, summary, status in suite]
    sections: list[Callable[[], list[Row]]] = [
        lambda: load_figures(args.rounds, args.requests),
        scrub_figures,
        lambda: memory_figures(args.memory),
        lifecycle_figures,
        blocking_sink_figures,
    ]
    for section in sections:
        rows += section()
        print(f"... {len(rows)} rows, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print("| what | figure | note |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    print(f"\n_{time.perf_counter() - started:.0f} s in all, {os.cpu_count()} cores, "
          f"Python {sys.version.split()[0]}._")  # fmt: skip


if __name__ == "__main__":
    main()
