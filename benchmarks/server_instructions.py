"""What cvdiag costs on a real server, counted in instructions: a figure a shared machine cannot
disturb.

Run: ``python benchmarks/server_instructions.py [--requests 600] [--only default,bare]
[--routes json,sse,agent] [--builds pure,compiled] [--python VENV/bin/python] [--once]
[--json]``. Needs valgrind (Debian's package) beside what ``benchmarks/server.py`` needs, and
httpx.

``--builds`` counts each build in the same run, every variant served by the same interpreter
(``--python``; the running one by default): ``pure``, this checkout's sources, and
``compiled``, the compiled wheel installed in that interpreter's environment (``pip install``
it there, docs/installing.md). A build's ratios are to its own bare app. With one build the
JSON is ``{route: {variant: row}}``; with several, ``{build: {route: {variant: row}}}``.

Timing a server on a machine other work shares moves every figure by tens of percent from one
run to the next. Instructions do not move: each variant's server (``server_app.py``, uvicorn
with uvloop and httptools, stdout a real file) runs under ``valgrind --tool=callgrind``, which
counts every instruction the process executes while its counting is on, and one client sends
requests one after another. Counting is switched on (``callgrind_control``) once the server
answers and off once the client is done, so start-up and shutdown are never counted, and they
run at valgrind's uncounted speed, about three times faster than counted. Each variant runs
twice, with ``--requests / 6`` and with ``--requests`` requests; the difference of the two counts
over the difference of requests is the instructions one request costs the server, the first
requests' warm-up and the switching itself cancelled out. ``--once`` runs each variant once and
divides its count by its requests, warm-up included: half the time, for checking that the script
still runs (the test suite's tiny size). It agrees with the server's CPU time under wrk
(``server.py``) where the machine is quiet, and repeats within about 1.5 %.

It is not the figure of record for time (instructions differ in cost: a cache miss, a system
call), and one client at a time is not wrk's 32 connections; it is the figure to compare two
versions of the request path with, on any machine, in one run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from server import BODY, BUILDS, ROUTES, VARIANTS, Server

_CLIENT = """
import sys, httpx
port, route, n, body = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4].encode()
with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
    for _ in range(n):
        if route == "agent":
            r = client.post("/agent", content=body, headers={"content-type": "application/json"})
        else:
            r = client.get("/" + route)
        if r.status_code != 200:
            sys.exit(f"/{route} answered {r.status_code}")
"""


def count(variant: str, route: str, folder: Path, build: str, python: str, *, requests: int) -> int:
    """The instructions the server executed while it served ``requests``: callgrind starts with
    its counting off, is switched on once the server answers and off once the client is done."""
    out = folder / f"callgrind.{build}.{variant}.{route}.{requests}"
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    server = Server(variant, folder, wrapper=wrapper, build=build, python=python)
    try:
        _counting(server, "on")
        command = [
            sys.executable, "-c", _CLIENT, str(server.port), route, str(requests), BODY.decode()
        ]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True)
        _counting(server, "off")
    finally:
        server.stop()
    # "totals:", not "summary:": with counting switched on late, callgrind writes a summary of 0.
    for line in out.read_text().splitlines():
        if line.startswith("totals:"):
            out.unlink()
            server.log.unlink()
            return int(line.split()[1])
    raise SystemExit(f"{variant} /{route}: callgrind wrote no total")


def _counting(server: Server, state: str) -> None:
    """Switch callgrind's counting in the server's process ``on`` or ``off`` (through valgrind's
    gdbserver: ``callgrind_control``, which comes with valgrind)."""
    done = subprocess.run(
        ["callgrind_control", f"--instr={state}", str(server.process.pid)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or "OK." not in done.stdout:
        raise SystemExit(f"callgrind_control could not switch counting {state}: {done.stdout}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--only", default=",".join(VARIANTS))
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--once", action="store_true", help="one run per variant (a smoke run)")
    parser.add_argument("--builds", default="pure", help=f"any of {', '.join(BUILDS)}")
    parser.add_argument("--python", default=sys.executable, help="the servers' interpreter")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    builds = [b for b in args.builds.split(",") if b]
    if not builds or set(builds) - set(BUILDS):
        raise SystemExit(f"--builds takes {', '.join(BUILDS)}, not {args.builds!r}")
    variants = [v for v in args.only.split(",") if v]
    if "bare" not in variants:
        variants.insert(0, "bare")
    few, many = max(1, args.requests // 6), args.requests
    tables: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cvdiag-instructions-") as name:
        folder = Path(name)
        for route in [r for r in args.routes.split(",") if r]:
            # The builds side by side, route by route: the minutes one route takes pass alike
            # for both, should the machine's load change.
            for build in builds:
                table = tables.setdefault(build, {})
                for variant in variants:
                    served = (variant, route, folder, build, args.python)
                    if args.once:
                        per_request = count(*served, requests=many) / many
                    else:
                        spent = count(*served, requests=many) - count(*served, requests=few)
                        per_request = spent / (many - few)
                    table.setdefault(route, {})[variant] = {"instructions": per_request}
                bare = table[route]["bare"]["instructions"]
                for row in table[route].values():
                    row["ratio"] = row["instructions"] / bare
    if args.json:
        shown = tables[builds[0]] if len(builds) == 1 else tables
        print(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode())
        return
    print("build     route   variant      instructions/request  ratio")
    for build, table in tables.items():
        for route, rows in table.items():
            for variant, row in rows.items():
                print(
                    f"{build:<9} {route:<7} {variant:<12} {row['instructions']:>20,.0f}"
                    f"  {row['ratio']:.3f}"
                )


if __name__ == "__main__":
    main()
