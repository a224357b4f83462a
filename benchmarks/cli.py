"""Throughput and peak memory of ``cvdiag grep``, ``validate``, ``stats``, ``ls`` and ``report``
on a large log.

Run: ``python benchmarks/cli.py [--size-mb 1024] [--dir /tmp] [--repeat 3]``. A mixed log is
generated first (half the lines CVDIAG envelopes of many requests, half ordinary access-log
lines; one request in ``FAILED_EVERY`` fails, three kinds in turn, one of them 450 heartbeats
long), then each command runs as a subprocess beside a baseline measured in the same run:

- grep by test id against ``grep -F ID log`` itself (the target: within 1.3x of it), and
  against ``grep -F ID log | python`` (``json.loads`` of each matching line);
- validate, stats, stats --by-class and ls against a Python loop that ``json.loads`` every
  envelope line and does nothing else;
- report (its page written to a temporary file, whose size is shown) against ``ls --json``,
  whose work is its first read, round by round, and against the same loop.

``--only grep,validate`` runs only the commands named (``grep``, ``validate``, ``stats``,
``by-class``, ``ls``, ``report``) with the baselines they are read against; ``--log FILE
--test-id ID`` measures a log kept earlier with ``--keep`` instead of generating one;
``--against REV`` runs each cvdiag command a second time with the package as it was at git
revision REV (exported to a temporary folder), in the same rounds. cvdiag's bytecode is
compiled first, as an installed package's is (with ``PYTHONDONTWRITEBYTECODE`` set, every run
would compile the CLI's modules again).

``--many-ids N`` measures what grows with the number of test ids instead: a log of N short
requests (three envelopes each, one test id each, no other lines; one in
``MANY_FAILED_EVERY``, at least six, fails), read by ``ls --json``, ``stats --by-class`` and
``report`` beside the Python baseline (``--against REV`` applies too).
The commands run in ``--repeat`` interleaved rounds; each figure is the median with the
range. Peak memory is the child's maximum RSS (``getrusage``), taken in a wrapper process per
command so each figure is that command's own. The log is read once before the runs, so every command
meets it page-cached. Targets (issue 17): grep >= 1.5 GB/s, validate and stats >= 200 MB/s,
peak memory < 100 MB whatever the size.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import orjson

import cvdiag as package
from cvdiag.pipeline.envelope import NULL_EDGE_HEADERS

# The command's output goes to a temporary file, not /dev/null: GNU grep notices a stdout that
# is /dev/null and stops at the first match (as -q does), which made ``grep -F`` look twice as
# fast as a whole scan on the generated log, whose test id sits in its middle.
_WRAPPER = """
import resource, subprocess, sys, tempfile, time
out = tempfile.TemporaryFile()
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=out, stderr=subprocess.PIPE)
elapsed = time.perf_counter() - start
if done.returncode not in (0, 1):
    sys.exit(done.stderr.decode()[-500:])
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(elapsed, used.ru_maxrss, used.ru_utime + used.ru_stime)
"""

_BASELINE_STATS = """
import json, sys
n = 0
with open(sys.argv[1], "rb") as f:
    for line in f:
        i = line.find(b"CVDIAG {")
        if i >= 0:
            json.loads(line[i + 7:])
            n += 1
"""

_BASELINE_GREP = """
import json, sys
for line in sys.stdin:
    json.loads(line[line.index("CVDIAG {") + 7:])
"""


def _request(n: int) -> list[bytes]:
    """One request's envelope lines (test id ``req-<n>``), each followed by an access-log line."""
    test_id = f"req-{n:08d}"
    second = n % 86400
    ts = f"2026-11-22T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
    request_span = f"{n:08x}00000001"
    boundaries = [
        ("backend.request.ingress", {"method": "POST", "path": "/chat", "content_length": 88}),
        ("backend.agent.enter", {"agent_name": "chat-agent", "model_id": "gpt-x"}),
        (
            "backend.llm.call.start",
            {"provider": "openai", "model": "gpt-x", "prompt_token_count_estimate": 412},
        ),
        (
            "backend.llm.call.response",
            {
                "provider": "openai",
                "model": "gpt-x",
                "response_token_count": 57,
                "latency_ms": 812 + n % 500,
                "error_class": None,
            },
        ),
        ("backend.sse.first_byte", {"delta_ms_from_ingress": 830 + n % 500}),
        *[
            (
                "backend.sse.event",
                {"event_type": "TEXT_MESSAGE_CONTENT", "payload_size_bytes": 60, "sequence_num": i},
            )
            for i in range(6)
        ],
        ("backend.agent.exit", {"terminal_outcome": "ok", "total_duration_ms": 900}),
        (
            "backend.response.complete",
            {
                "http_status": 200,
                "content_length": 2048,
                "total_duration_ms": 905,
                "sse_event_count": 6,
            },
        ),
    ]
    lines = []
    for i, (boundary, metadata) in enumerate(boundaries):
        envelope = {
            "schema_version": 1,
            "test_id": test_id,
            "trace_id": f"0193f1a2-{n:04x}-7000-8000-000000000000"[:36],
            "span_id": f"{n:08x}{i + 1:08x}",
            "parent_span_id": None if i == 0 else request_span,
            "layer": "backend",
            "boundary": boundary,
            "slug": f"slug-{n % 7}",
            "demo": "chat",
            "ts": f"{ts}.{i * 37 % 1000:03d}Z",
            "mono_ns": 10**15 + n * 10**9 + i * 10**6,
            "duration_ms": None,
            "outcome": "ok" if boundary.endswith(("response", "complete", "exit")) else "info",
            "edge_headers": NULL_EDGE_HEADERS,
            "metadata": metadata,
        }
        lines.append(b"CVDIAG " + orjson.dumps(envelope) + b"\n")
        lines.append(
            f'INFO:     10.0.{n % 250}.{i}:51234 - "POST /chat HTTP/1.1" 200 OK'
            f" request_id={n:08x}{i:04x} worker=uvicorn-{n % 8}\n".encode()
        )
    return lines


#: Every this many requests, one fails instead (the kinds in turn, see ``_failed``): a few
#: failed test ids for ``report`` to draw (seven in 300 MB), too few to change what the other
#: commands measure. At an odd remainder, so never the ``req-<n + 100>`` that ``grep`` seeks.
FAILED_EVERY: Final = 5000
FAILED_AT: Final = 2537
#: Heartbeats of the LLM call that never answers, one each 200 ms: a long run to fold.
STALLED_BEATS: Final = 450

# One envelope of a failed request: boundary, outcome, metadata, milliseconds from its start.
_Step = tuple[str, str, Mapping[str, object], int]

_LLM = {"provider": "openai", "model": "gpt-x"}
_ANSWERED = {**_LLM, "response_token_count": 57, "latency_ms": 812, "error_class": None}
_GONE = {"termination_kind": "rst", "termination_cause": "client_disconnect"}


def _failed(kind: int) -> list[_Step]:
    """A failed request, one of three kinds (``kind`` modulo 3): the client gone mid-stream
    (client-abort), a caught exception answered 500 (backend-error), an LLM call that never
    answers, heartbeats until the client leaves after 90 s (slow-first-token)."""
    head: list[_Step] = [
        ("backend.request.ingress", "info", {"method": "POST", "path": "/chat"}, 0),
        ("backend.agent.enter", "info", {"agent_name": "chat-agent", "model_id": "gpt-x"}, 1),
        ("backend.llm.call.start", "info", {**_LLM, "prompt_token_count_estimate": 412}, 2),
    ]
    kind %= 3
    if kind == 0:
        events: list[_Step] = [
            (
                "backend.sse.event",
                "info",
                {"event_type": "TEXT_MESSAGE_CONTENT", "sequence_num": i},
                831 + i,
            )
            for i in range(3)
        ]
        return [
            *head,
            ("backend.llm.call.response", "ok", _ANSWERED, 814),
            ("backend.sse.first_byte", "info", {"delta_ms_from_ingress": 830}, 830),
            *events,
            ("backend.sse.aborted", "err", {**_GONE, "bytes_before_abort": 180}, 900),
            ("backend.agent.exit", "err", {"terminal_outcome": "cancelled"}, 901),
        ]
    if kind == 1:
        caught = {"exception_type": "KeyError", "message_scrubbed": "'choices'"}
        return [
            *head,
            ("backend.llm.call.response", "ok", _ANSWERED, 814),
            ("backend.error.caught", "err", caught, 815),
            ("backend.agent.exit", "err", {"terminal_outcome": "error"}, 816),
            (
                "backend.response.complete",
                "err",
                {"http_status": 500, "total_duration_ms": 817},
                817,
            ),
        ]
    beats: list[_Step] = [
        ("backend.llm.call.heartbeat", "info", {"elapsed_ms_since_start": 200 * b}, 2 + 200 * b)
        for b in range(1, STALLED_BEATS + 1)
    ]
    return [
        *head,
        ("backend.sse.first_byte", "info", {"delta_ms_from_ingress": 3, "keepalive": True}, 3),
        *beats,
        (
            "backend.sse.aborted",
            "err",
            {**_GONE, "bytes_before_abort": 0},
            200 * STALLED_BEATS + 50,
        ),
    ]


def _failed_lines(n: int, test_id: str, kind: int, *, second: int, access: bool) -> list[bytes]:
    """Request ``n`` as ``_failed(kind)``'s envelope lines of ``test_id``, from ``second`` of
    the day, each followed by an access-log line when ``access``."""
    start_ms = second % 86400 * 1000
    # A call's heartbeats and response hang under its start's span (the third envelope's).
    request_span, call_span = f"{n:08x}00000001", f"{n:08x}00000003"
    lines = []
    for i, (boundary, outcome, metadata, at) in enumerate(_failed(kind)):
        under = call_span if boundary.endswith((".heartbeat", ".response")) else request_span
        ms = start_ms + at
        ts = f"2026-11-22T{ms // 3_600_000 % 24:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}"
        envelope = {
            "schema_version": 1,
            "test_id": test_id,
            "trace_id": f"0193f1a2-{n:04x}-7000-8000-000000000000"[:36],
            "span_id": f"{n:08x}{i + 1:08x}",
            "parent_span_id": None if i == 0 else under,
            "layer": "backend",
            "boundary": boundary,
            "slug": f"slug-{n % 7}",
            "demo": "chat",
            "ts": f"{ts}.{ms % 1000:03d}Z",
            "mono_ns": 10**15 + n * 10**9 + at * 10**6,
            "duration_ms": None,
            "outcome": outcome,
            "edge_headers": NULL_EDGE_HEADERS,
            "metadata": metadata,
        }
        lines.append(b"CVDIAG " + orjson.dumps(envelope) + b"\n")
        if access:
            lines.append(
                f'INFO:     10.0.{n % 250}.{i % 250}:51234 - "POST /chat HTTP/1.1" 200 OK'
                f" request_id={n:08x}{i:04x} worker=uvicorn-{n % 8}\n".encode()
            )
    return lines


def _lines(n: int) -> list[bytes]:
    """Request ``n`` of the mixed log: healthy, or every ``FAILED_EVERY``-th failed."""
    if n % FAILED_EVERY == FAILED_AT:
        return _failed_lines(n, f"req-{n:08d}", n // FAILED_EVERY, second=n, access=True)
    return _request(n)


def generate(path: Path, size: int) -> str:
    """Write about ``size`` bytes; returns a test id from the middle of the log."""
    written = 0
    n = 0
    target = ""
    with open(path, "wb", buffering=1 << 20) as out:
        while written < size:
            chunk = b"".join(line for k in range(n, n + 200) for line in _lines(k))
            out.write(chunk)
            written += len(chunk)
            if not target and written >= size // 2:
                target = f"req-{n + 100:08d}"
            n += 200
    return target or "req-00000100"


def _short_request(n: int) -> bytes:
    """Three envelopes of one short request (test id ``id-<n>``): ingress, first byte, end."""
    test_id = f"id-{n:09d}"
    second = n // 100 % 86400
    ts = f"2026-11-22T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
    boundaries = [
        ("backend.request.ingress", "info", {"method": "GET", "path": "/ping"}),
        ("backend.sse.first_byte", "info", {"delta_ms_from_ingress": 3}),
        ("backend.response.complete", "ok", {"http_status": 200, "total_duration_ms": 5}),
    ]
    lines = []
    for i, (boundary, outcome, metadata) in enumerate(boundaries):
        envelope = {
            "schema_version": 1,
            "test_id": test_id,
            "trace_id": f"t{n:09d}",
            "span_id": f"{n:08x}{i + 1:08x}",
            "parent_span_id": None,
            "layer": "backend",
            "boundary": boundary,
            "slug": f"slug-{n % 7}",
            "demo": "ping",
            "ts": f"{ts}.{n % 100 * 10 + i:03d}Z",
            "mono_ns": 10**15 + n * 10**7 + i * 10**6,
            "duration_ms": None,
            "outcome": outcome,
            "edge_headers": NULL_EDGE_HEADERS,
            "metadata": metadata,
        }
        lines.append(b"CVDIAG " + orjson.dumps(envelope) + b"\n")
    return b"".join(lines)


#: In the ``--many-ids`` log, one request in this many (and at least six in all) fails instead.
MANY_FAILED_EVERY: Final = 50_000


def generate_many(path: Path, count: int) -> None:
    """``count`` short requests, each a test id of its own, one after the other; a few of them
    fail (``_failed``, no access-log lines), for ``report`` to draw."""
    every = max(2, min(MANY_FAILED_EVERY, count // 6))

    def one(n: int) -> bytes:
        if n % every != every // 2:
            return _short_request(n)
        failed = _failed_lines(n, f"id-{n:09d}", n // every, second=n // 100, access=False)
        return b"".join(failed)

    with open(path, "wb", buffering=1 << 20) as out:
        for start in range(0, count, 1000):
            out.write(b"".join(one(n) for n in range(start, min(count, start + 1000))))


def _export(revision: str, into: Path) -> Path:
    """The package as it was at ``revision``, for ``PYTHONPATH``: ``git archive`` of this
    checkout, so nothing outside it is read."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", revision, "cvdiag"], capture_output=True, check=True
    ).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def measure(*command: str, cwd: str | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``command`` run in a fresh wrapper process."""
    elapsed, rss, _ = measure_cpu(*command, cwd=cwd)
    return elapsed, rss


def measure_cpu(*command: str, cwd: str | None = None) -> tuple[float, float, float]:
    """``measure``'s figures and the CPU seconds (user and system) ``command`` used: on a
    machine shared with other work, the figure its load stretches least."""
    out = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *command],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    )
    elapsed, rss_kb, cpu = out.stdout.split()
    return float(elapsed), int(rss_kb) / 1024, float(cpu)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def many_ids(args: argparse.Namespace, workdir: Path) -> None:
    """``ls --json`` and ``stats --by-class`` on ``--many-ids`` test ids, this code and, with
    ``--against``, the code at that revision, interleaved in each round."""
    log = workdir / "many.log"
    started = time.perf_counter()
    generate_many(log, args.many_ids)
    size_mb = log.stat().st_size / 1024 / 1024
    print(
        f"generated {args.many_ids} test ids, {size_mb:.0f} MB,"
        f" in {time.perf_counter() - started:.1f} s"
    )
    cvdiag = [sys.executable, "-m", "cvdiag"]
    page = workdir / "report.html"
    runs = [
        ("cvdiag ls --json", [*cvdiag, "ls", "--json", str(log)]),
        ("cvdiag stats --by-class", [*cvdiag, "stats", "--by-class", str(log)]),
        ("cvdiag report", [*cvdiag, "report", "-o", str(page), str(log)]),
    ]
    runs.append(("baseline: python json.loads", [sys.executable, "-c", _BASELINE_STATS, str(log)]))
    log.read_bytes()  # page-cache the log for every command alike
    figures = _interleaved(args, workdir, runs)
    print(
        f"\n{args.repeat} interleaved rounds; median (min-max)\n"
        f"{'command':<44} {'seconds':>18} {'MB/s':>6} {'k ids/s':>16} {'peak MB':>18}"
    )
    for name, found in figures.items():
        seconds = sorted(s for s, _ in found)
        peaks = sorted(p for _, p in found)
        ids = args.many_ids / 1000
        rates = f"{ids / _median(seconds):.0f} ({ids / seconds[-1]:.0f}-{ids / seconds[0]:.0f})"
        peak = f"{_median(peaks):.1f} ({peaks[0]:.1f}-{peaks[-1]:.1f})"
        took = f"{_median(seconds):.2f} ({seconds[0]:.2f}-{seconds[-1]:.2f})"
        print(f"{name:<44} {took:>18} {size_mb / _median(seconds):>6.0f} {rates:>16} {peak:>18}")
    _page(page)
    _ratio(figures, "cvdiag report", "cvdiag ls --json", args.against)


def _page(page: Path) -> None:
    """The size of the page ``report`` wrote (each round writes the same page again)."""
    if page.exists():
        print(f"\nthe report page: {page.stat().st_size / 1024:.0f} KB")


def _ratio(
    figures: dict[str, list[tuple[float, float]]], mine: str, against: str, revision: str | None
) -> None:
    """How many times ``against``'s time ``mine`` took, round by round: median (range); with
    ``--against REV``, the same at REV."""
    for tag in ("", *([f" @{revision}"] if revision else [])):
        if mine + tag not in figures or against + tag not in figures:
            continue
        pairs = zip(figures[mine + tag], figures[against + tag], strict=True)
        ratios = sorted(a / b for (a, _), (b, _) in pairs)
        print(
            f"{mine + tag} takes {_median(ratios):.2f}x the time of {against + tag} in the same"
            f" round ({ratios[0]:.2f}-{ratios[-1]:.2f})"
        )


def _against(
    args: argparse.Namespace, workdir: Path, runs: list[tuple[str, list[str]]]
) -> dict[str, str]:
    """With ``--against REV``, each cvdiag run again with the package at REV: ``-m cvdiag``
    run from the exported folder imports its cvdiag (the working directory comes first on
    ``sys.path``). Returns the working directory of each added run."""
    if not args.against:
        return {}
    tree = str(_export(args.against, workdir / "against"))
    places = {}
    for name, command in list(runs):
        if name.startswith("cvdiag"):
            runs.append((f"{name} @{args.against}", command))
            places[f"{name} @{args.against}"] = tree
    return places


def _interleaved(
    args: argparse.Namespace, workdir: Path, runs: list[tuple[str, list[str]]]
) -> dict[str, list[tuple[float, float]]]:
    """``(seconds, peak MB)`` of each run (with ``--against``, also at REV), in ``--repeat``
    rounds that interleave the commands, so a burst of load on a shared machine falls on all."""
    places = _against(args, workdir, runs)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in runs}
    for _ in range(args.repeat):
        for name, command in runs:
            figures[name].append(measure(*command, cwd=places.get(name)))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=1024, help="log size (default 1024)")
    parser.add_argument("--dir", default=None, help="where to write the log (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument(
        "--only", default="", help="comma-separated: grep, validate, stats, by-class, ls, report"
    )
    parser.add_argument("--log", type=Path, help="a log generated before (with --keep)")
    parser.add_argument("--test-id", help="the test id --keep printed for that log")
    parser.add_argument("--against", metavar="REV", help="also run the package as at REV")
    parser.add_argument(
        "--many-ids", type=int, default=0, metavar="N", help="ls, stats, report on N ids"
    )
    args = parser.parse_args()
    if (args.log is None) != (args.test_id is None):
        parser.error("--log and --test-id go together")

    workdir = Path(tempfile.mkdtemp(prefix="cvdiag-bench-", dir=args.dir)).resolve()
    log = args.log.resolve() if args.log else workdir / "mixed.log"
    if args.many_ids:
        try:
            many_ids(args, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return
    try:
        compileall.compile_dir(Path(package.__file__).parent, quiet=1)
        started = time.perf_counter()
        test_id = args.test_id or generate(log, args.size_mb * 1024 * 1024)
        size_mb = log.stat().st_size / 1024 / 1024
        made = "" if args.log else f"generated in {time.perf_counter() - started:.1f} s; "
        print(f"{log}: {size_mb:.0f} MB; {made}test id {test_id}")
        cvdiag = [sys.executable, "-m", "cvdiag"]
        grep = shutil.which("grep") or "grep"
        log.read_bytes()  # page-cache the log for every command alike
        # (name, the --only words that select it, command): a baseline runs with its commands.
        every = ("validate", "stats", "by-class", "ls", "report")
        page = workdir / "report.html"  # written again by each round's report
        rows: list[tuple[str, tuple[str, ...], list[str]]] = [
            ("cvdiag grep --test-id", ("grep",), [*cvdiag, "grep", "--test-id", test_id, str(log)]),
            ("baseline: grep -F", ("grep",), [grep, "-F", test_id, str(log)]),
            (
                "baseline: grep -F | python json.loads",
                ("grep",),
                [
                    "bash",
                    "-c",
                    f'{grep} -F "$1" "$2" | "$3" -c "$4"',
                    "bench",
                    test_id,
                    str(log),
                    sys.executable,
                    _BASELINE_GREP,
                ],
            ),
            ("cvdiag validate", ("validate",), [*cvdiag, "validate", str(log)]),
            ("cvdiag stats", ("stats",), [*cvdiag, "stats", "--json", str(log)]),
            ("cvdiag stats --by-class", ("by-class",), [*cvdiag, "stats", "--by-class", str(log)]),
            # ``report``'s first read is ``ls``'s: it is read against it.
            ("cvdiag ls", ("ls", "report"), [*cvdiag, "ls", "--json", str(log)]),
            ("cvdiag report", ("report",), [*cvdiag, "report", "-o", str(page), str(log)]),
            (
                "baseline: python json.loads every envelope",
                every,
                [sys.executable, "-c", _BASELINE_STATS, str(log)],
            ),
        ]
        words = {word.strip() for word in args.only.split(",") if word.strip()}
        runs = [(name, command) for name, tags, command in rows if not words or words & set(tags)]
        figures = _interleaved(args, workdir, runs)
        print(
            f"\n{args.repeat} interleaved rounds; median (min-max)\n"
            f"{'command':<44} {'seconds':>18} {'MB/s':>18} {'peak MB':>8}"
        )
        for name, found in figures.items():
            seconds = sorted(s for s, _ in found)
            low, high = size_mb / seconds[-1], size_mb / seconds[0]
            rates = f"{size_mb / _median(seconds):.0f} ({low:.0f}-{high:.0f})"
            peak = max(p for _, p in found)
            took = f"{_median(seconds):.2f} ({seconds[0]:.2f}-{seconds[-1]:.2f})"
            print(f"{name:<44} {took:>18} {rates:>18} {peak:>8.1f}")
        _page(page)
        _ratio(figures, "cvdiag report", "cvdiag ls", args.against)
        if "cvdiag grep --test-id" not in figures:
            return
        ratios = sorted(
            mine / grep_f
            for (mine, _), (grep_f, _) in zip(
                figures["cvdiag grep --test-id"], figures["baseline: grep -F"], strict=True
            )
        )
        print(
            f"\ngrep --test-id takes {_median(ratios):.2f}x the time of grep -F in the same round"
            f" ({ratios[0]:.2f}-{ratios[-1]:.2f}; target <= 1.3)"
        )
    finally:
        # Only the log is kept: the report's page and an ``--against`` export go, and with
        # ``--log`` (a log outside it) the whole folder.
        if args.keep and not args.log:
            for item in workdir.iterdir():
                if item.is_dir():
                    shutil.rmtree(item, ignore_errors=True)
                elif item != log:
                    item.unlink()
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        if args.keep or args.log:
            print(f"log kept at {log}")


if __name__ == "__main__":
    main()
