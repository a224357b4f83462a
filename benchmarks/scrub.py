"""The scrubber's cost: typical strings against the scrubber before issue 15, its worst case on
10 MB of adversarial input, and one emit of 64×64 adversarial nested strings.

Run: ``python benchmarks/scrub.py [--baseline REV]``. The baseline is the scrubber
(``cvdiag/scrub.py`` then) as it was at REV (default: the commit before the rewrite), read from this
repository's own git history and loaded as a module, so both are measured in the same process,
interleaved. Targets (issue 15): a typical short string no slower than the baseline, the 10 MB worst
case ≤ 30 ms, the emit ≤ 50 ms; issue 37 allows the 10 MB worst case 50 ms.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cvdiag import MemorySink, Settings, Tier
from cvdiag.pipeline.emitter import Emitter
from cvdiag.scrubbing.redact import scrub_text

#: The last commit whose scrubber predates issue 15.
BASELINE = "3e4748e"
ROOT = Path(__file__).resolve().parent.parent

TYPICAL = [
    "TEXT_MESSAGE_CONTENT",
    "/api/copilotkit/agentic_chat",
    "openai.APIStatusError: Error code: 401 - Incorrect API key provided: sk-proj-abc***xyz",
    "ConnectionResetError: [Errno 104] Connection reset by peer while reading response body",
]
ADVERSARIAL = {
    "eyJ repeated": "eyJ" * 3_400_000,
    "letters": "a" * 10_000_000,
    "sk- repeated": "sk-" * 3_400_000,
    "https:// repeated": "https://" * 1_250_000,
    "password= repeated": "password=" * 1_100_000,
    "Bearer repeated": "Bearer " * 1_400_000,
    "a: repeated": "a:" * 5_000_000,
    "digits and dashes": "ab1-" * 2_500_000,
    "key=value pairs": "token=a&" * 1_250_000,
    "JSON-escaped keys": '\\"password\\": \\"x\\", ' * 420_000,
    "private key headers": "-----BEGIN RSA PRIVATE KEY-----\n" * 320_000,
    "scheme words": "Basic Bearer Token Digest " * 400_000,
    "userinfo": "a://b:c@" * 1_250_000,
    "percent-encoded": "%2525" * 2_000_000,
    # Issue 37: a vendor prefix before a run of percent escapes, and the showcase's shapes.
    "AGE-SECRET-KEY-1 + %25": "AGE-SECRET-KEY-1" + "%25" * 3_330_000,
    "sk- letters": "sk-abcdefghijklmnopqrstuvwx " * 360_000,
    "Bearer lower-case token": "Bearer secrettoken " * 520_000,
    "ASIA names": "ASIAPACIFIC2024REGION " * 450_000,
}


def baseline_module(rev: str) -> types.ModuleType | None:
    """The scrubber at ``rev`` (``cvdiag/scrub.py`` then), from this repository's history; None
    without git."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:cvdiag/scrub.py"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("scrub_baseline")
    exec(compile(source, f"scrub.py@{rev}", "exec"), module.__dict__)  # our own history, not input
    return module


_round = 0


def per_call_us(fn: Callable[[str], Any], text: str, n: int = 4000) -> float:
    """Microseconds per call, each on a new string (so no memo helps), median of 5 rounds."""
    global _round
    _round += 1
    rounds = []
    for r in range(5):
        inputs = [f"{text}{_round}.{r}.{i}" for i in range(n)]
        start = time.perf_counter()
        for item in inputs:
            fn(item)
        rounds.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(rounds)


def timed_ms(fn: Callable[[], Any], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def nested_metadata() -> dict[str, Any]:
    """64 keys of 64 adversarial strings (each 64 KiB): 256 MiB of text if it were all read."""
    text = ("sk-" * 2000 + "password=" * 2000 + "eyJ" * 2000 + "a" * 46000)[:65536]
    return {
        "message_scrubbed": {f"k{i}": [text + str(j) for j in range(64)] for i in range(64)},
        "stack_brief": [text] * 64,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline", default=BASELINE)
    args = parser.parse_args()
    old = baseline_module(args.baseline)
    print(f"{'typical string':52} {'now µs':>8} {'before µs':>10} {'ratio':>6}")
    for text in TYPICAL:
        # Interleaved: a drift of the machine's speed affects both alike.
        now = per_call_us(scrub_text, text)
        before = per_call_us(old.scrub_text, text) if old is not None else float("nan")
        now = min(now, per_call_us(scrub_text, text))
        print(f"{text[:52]:52} {now:8.2f} {before:10.2f} {now / before:6.2f}")
    print()
    print(f"{'10 MB adversarial input':24} {'scrub ms':>9}")
    worst = 0.0
    for name, text in ADVERSARIAL.items():
        cost = timed_ms(lambda text=text: scrub_text(text))  # type: ignore[misc]
        worst = max(worst, cost)
        print(f"{name:24} {cost:9.2f}")
    print(f"worst case: {worst:.2f} ms (target ≤ 50 ms, issue 37)")
    print()
    sink = MemorySink()
    emitter = Emitter(Settings(enabled=True, tier=Tier.DEBUG), sinks=[sink])
    metadata = nested_metadata()
    cost = timed_ms(lambda: emitter.emit("backend.error.caught", metadata=metadata))
    print(f"one emit, 64×64 adversarial nested strings: {cost:.2f} ms (target ≤ 50 ms)")
    print(f"  its line: {len(sink.lines[-1])} bytes")


if __name__ == "__main__":
    main()
