"""The scrubber's cost: typical strings beside a plain regex search, and its worst case.

Run: ``python benchmarks/scrub.py``. The worst case is 10 MB of adversarial input (runs of the
prefixes the patterns anchor on); the floor in the same run is ``str.find`` over the same text.
"""

from __future__ import annotations

import statistics
import time

from cvdiag.scrub import scrub_text

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
}


def timed(fn: object, *args: object, repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)  # type: ignore[operator]
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    print(f"{'typical string':60} {'scrub µs':>9}")
    for text in TYPICAL:
        n = 2000
        start = time.perf_counter()
        for i in range(n):
            scrub_text(text + str(i))  # defeat the short-string memo: the uncached cost
        print(f"{text[:60]:60} {(time.perf_counter() - start) / n * 1e6:9.2f}")
    print()
    print(f"{'10 MB adversarial input':24} {'scrub ms':>9} {'str.find ms (floor)':>20}")
    worst = 0.0
    for name, text in ADVERSARIAL.items():
        cost = timed(scrub_text, text) * 1000
        floor = timed(text.find, "\x00") * 1000
        worst = max(worst, cost)
        print(f"{name:24} {cost:9.2f} {floor:20.2f}")
    print(f"worst case: {worst:.2f} ms (target: under 50 ms)")


if __name__ == "__main__":
    main()
