"""What the request benchmarks share: in-process ASGI calls, interleaved rounds, writes
finished inside each variant's own timing, ratios with their spread, and ``--json``.

Each round runs every variant once, in an order that rotates from round to round, as a block of
``requests`` calls. A block is timed as a whole, and it ends only when every line its variant
queued has been written: the sink's own drain, the one the event loop runs once per burst, is
run at the end of the block instead of up to 10 ms later, when the next variant would pay for it.
Each call inside a block is also timed on its own, for the per-request median and p90.

The headline ratio of a variant is the median over rounds of (its block ÷ the bare app's block
in the same round); its spread is that per-round ratio's interquartile range and min–max.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from cvdiag import CvdiagMiddleware
from cvdiag.sinks import QueuedLineSink

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def run_once(app: App, scope: dict[str, Any], body: bytes = b"") -> int:
    """One request; returns its duration in ns. ``receive`` waits once the body is read, like a
    live client, until Starlette cancels its disconnect listener."""
    delivered = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        return None

    start = time.perf_counter_ns()
    await app(dict(scope), receive, send)
    return time.perf_counter_ns() - start


async def response_of(app: App, scope: dict[str, Any], body: bytes = b"") -> tuple[int, bytes]:
    """One request with its response kept: a benchmark first checks that every variant answers
    in full (a 422 or a 404 would be fast and wrong)."""
    status = 0
    chunks: list[bytes] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(dict(scope), receive, send)
    return status, b"".join(chunks)


async def check_all(
    variants: dict[str, App], scope: dict[str, Any], body: bytes, *, events: int
) -> None:
    for name, app in variants.items():
        status, content = await response_of(app, scope, body)
        if status != 200 or content.count(b"data: ") != events:
            raise RuntimeError(f"{name}: status {status}, {content[:200]!r}")


def layers(app: Any) -> Iterator[Any]:
    """The app and every layer under it (Starlette's built middleware stack, ``.app`` links)."""
    seen: set[int] = set()
    layer = app
    while layer is not None and id(layer) not in seen:
        seen.add(id(layer))
        yield layer
        stack = getattr(layer, "middleware_stack", None)
        layer = stack if stack is not None else getattr(layer, "app", None)


def sinks_of(app: Any) -> list[QueuedLineSink]:
    """The queued sinks a variant writes to: its cvdiag emitter's, or a floor's own ``sink``.
    Call after a warm-up request: Starlette builds its middleware stack on the first call."""
    found: list[QueuedLineSink] = []
    for layer in layers(app):
        if isinstance(layer, CvdiagMiddleware) and layer._emitter is not None:
            found.extend(s for s in layer._emitter.sinks if isinstance(s, QueuedLineSink))
        sink = getattr(layer, "sink", None)
        if isinstance(sink, QueuedLineSink):
            found.append(sink)
    return found


def finish(sinks: Iterable[QueuedLineSink]) -> None:
    """Write every queued line now, on this thread: the drain the loop would run after its
    linger, run at once (stdout is /dev/null, which never pushes back). A sink writing through
    its thread instead (a block-buffered stdout) is flushed."""
    for sink in sinks:
        fd = sink._loop_descriptor()
        while sink._queue or sink._rest:
            if fd is None:
                sink.flush(30)
                break
            sink._drain_from_loop(fd)


@dataclass
class Result:
    name: str
    per_request_ns: list[int] = field(default_factory=list)
    #: Per round: the block's ns per request, its writes finished.
    block_ns: list[float] = field(default_factory=list)


async def interleave(
    variants: dict[str, App],
    call: Callable[[App], Awaitable[int]],
    *,
    rounds: int,
    requests: int,
    warmup: int = 50,
    between: Callable[[], None] | None = None,
) -> dict[str, Result]:
    """Every variant once per round, the order rotating; see the module docstring."""
    names = list(variants)
    for name in names:  # build middleware stacks, fill caches
        for _ in range(warmup):
            await call(variants[name])
    sinks = {name: sinks_of(app) for name, app in variants.items()}
    for name in names:
        finish(sinks[name])
    results = {name: Result(name) for name in names}
    clock = time.perf_counter_ns
    for round_no in range(rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            app, own, result = variants[name], sinks[name], results[name]
            gc.collect()
            samples = result.per_request_ns
            start = clock()
            for _ in range(requests):
                samples.append(await call(app))
            finish(own)
            result.block_ns.append((clock() - start) / requests)
            if between is not None:
                between()  # outside the timing: an exporter's memory, say
    return results


def _quantiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _pct(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def summarize(results: dict[str, Result], base: str) -> list[dict[str, Any]]:
    """One row per variant; ratios are against ``base`` round by round."""
    rows = []
    base_blocks = results[base].block_ns
    for name, result in results.items():
        ratios = [mine / theirs for mine, theirs in zip(result.block_ns, base_blocks, strict=True)]
        q1, q3 = _quantiles(ratios)
        rows.append(
            {
                "variant": name,
                "us_per_request": statistics.median(result.block_ns) / 1000,
                "request_median_us": statistics.median(result.per_request_ns) / 1000,
                "request_p90_us": _pct(result.per_request_ns, 0.9),
                "ratio": statistics.median(ratios),
                "ratio_q1": q1,
                "ratio_q3": q3,
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "rounds": len(ratios),
            }
        )
    return rows


def report(title: str, rows: list[dict[str, Any]], *, as_json: bool, extra: dict[str, Any]) -> None:
    """The table to stderr; with ``as_json``, the same figures as one JSON document on stdout."""
    err = sys.stderr
    print(title, file=err)
    print(
        f"{'variant':<30} {'µs/req':>8} {'req med':>8} {'req p90':>8}"
        f" {'ratio':>7} {'IQR':>13} {'min–max':>13}",
        file=err,
    )
    for row in rows:
        print(
            f"{row['variant']:<30} {row['us_per_request']:>8.1f} {row['request_median_us']:>8.1f}"
            f" {row['request_p90_us']:>8.1f} {row['ratio']:>6.3f}x"
            f" {row['ratio_q1']:>6.3f}–{row['ratio_q3']:<6.3f}"
            f" {row['ratio_min']:>6.3f}–{row['ratio_max']:<6.3f}",
            file=err,
        )
    for key, value in extra.items():
        print(f"{key}: {value}", file=err)
    if as_json:
        print(json.dumps({"title": title, "variants": rows, **extra}, indent=2))


def arguments(doc: str | None, *, rounds: int, requests: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument(
        "--requests", type=int, default=requests, help="requests per variant per round"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    return parser


def run_with_stdout_at_devnull(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``main`` with ``sys.stdout`` at /dev/null, line-buffered as under PYTHONUNBUFFERED=1
    (most container images) or on a terminal: the stdout sink then writes from the event loop,
    as in production (docs/performance.md). The real stdout is back for the JSON."""
    devnull = open(os.devnull, "w", buffering=1)  # noqa: SIM115 - held for the whole run
    real_stdout, sys.stdout = sys.stdout, devnull
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    finally:
        sys.stdout = real_stdout
        devnull.close()
