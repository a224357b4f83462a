"""``cvdiag diff`` and ``cvdiag flakes`` on big logs, beside the reads they are held to.

Run: ``python benchmarks/compare.py [--size-mb 300] [--runs 100] [--run-mb 30] [--dir /tmp]
[--repeat 3]``. The logs are the mixed logs of ``benchmarks/cli.py`` (half CVDIAG envelopes of
many requests, half access-log lines, one request in ``FAILED_EVERY`` failed).

- diff: two stories of one ``--size-mb`` log (a healthy request from its middle and a failed
  one), against ``cvdiag ls`` on the same log (the target: no slower than it);
- flakes: ``--runs`` logs of ``--run-mb`` each (one generated, the rest copies of it: the disk
  needs room for them all), against ``cvdiag ls`` over the same logs and
  a Python loop that ``json.loads`` every envelope line of each (reading them once; the target:
  within 2x of it).

Each figure is the median of ``--repeat`` interleaved rounds: wall seconds, CPU seconds (user and
system, which other work on the machine stretches least) and the peak RSS of the command
(``cli.measure_cpu``). ``--json`` prints them as one object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cli  # type: ignore[import-not-found]  # benchmarks/cli.py: its generator and measure

CVDIAG = [sys.executable, "-m", "cvdiag"]


def _failed_id(target: str) -> str:
    """A failed request's test id before ``target``'s (``cli._lines`` fails every
    ``FAILED_EVERY``-th request, at ``FAILED_AT``)."""
    n = int(target.split("-")[1])
    failed = n - n % cli.FAILED_EVERY + cli.FAILED_AT
    if failed > n:
        failed -= cli.FAILED_EVERY
    return f"req-{max(failed, cli.FAILED_AT):08d}"


def _rounds(commands: dict[str, list[str]], repeat: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    peaks: dict[str, float] = dict.fromkeys(commands, 0.0)
    for _ in range(repeat):
        for name, command in commands.items():
            elapsed, rss, cpu = cli.measure_cpu(*command)
            times[name].append(elapsed)
            cpus[name].append(cpu)
            peaks[name] = max(peaks[name], rss)
    return {
        name: {
            "seconds": round(cli._median(values), 3),
            "cpu_seconds": round(cli._median(cpus[name]), 3),
            "peak_mb": round(peaks[name], 1),
        }
        for name, values in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--run-mb", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        work = Path(folder)
        big = work / "big.log"
        target = cli.generate(big, args.size_mb << 20)
        big.read_bytes()  # page-cached, as for every command measured
        other = _failed_id(target)
        figures["diff"] = _rounds(
            {
                "cvdiag ls": [*CVDIAG, "ls", str(big)],
                "cvdiag diff": [*CVDIAG, "diff", target, other, str(big)],
            },
            args.repeat,
        )
        big.unlink()
        first = work / "run-000.log"
        cli.generate(first, args.run_mb << 20)
        runs = [first]
        for number in range(1, args.runs):
            # Copies, not links: the command reads a file named twice once (the same inode).
            copy = work / f"run-{number:03}.log"
            shutil.copyfile(first, copy)
            runs.append(copy)
        names = [str(path) for path in runs]
        loop = "import sys\n" + "\n".join(
            f"sys.argv[1:] = [{name!r}]\n" + cli._BASELINE_STATS for name in names
        )
        figures["flakes"] = _rounds(
            {
                "read once (json.loads)": [sys.executable, "-c", loop],
                "cvdiag ls": [*CVDIAG, "ls", *names],
                "cvdiag flakes": [*CVDIAG, "flakes", *names],
            },
            args.repeat,
        )
    figures["sizes"] = {"diff_log_mb": args.size_mb, "runs": args.runs, "run_mb": args.run_mb}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for part in ("diff", "flakes"):
        print(part)
        for name, figure in figures[part].items():  # type: ignore[attr-defined]
            print(
                f"  {name:<24} {figure['seconds']:>8.2f} s  {figure['cpu_seconds']:>8.2f} s CPU"
                f"  {figure['peak_mb']:>7.1f} MB"
            )


if __name__ == "__main__":
    main()
