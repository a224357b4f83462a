"""What cvdiag costs on a real server: uvicorn under wrk, the server's CPU per request.

Run: ``python benchmarks/server.py [--rounds 5] [--seconds 5] [--connections 32] [--json]``;
``--only default,bare`` and ``--routes sse`` pick variants and routes; ``--build compiled
--python VENV/bin/python`` serves the compiled wheel installed there instead of this checkout's
sources (``BUILDS``). Needs uvicorn with uvloop
and httptools (``pip install 'uvicorn[standard]'``), asgi-correlation-id, sse-starlette, the
OpenTelemetry SDK and ASGI instrumentation, and Debian's ``wrk``.

Each run starts a fresh server process for one variant (``benchmarks/server_app.py``): one
uvicorn worker (uvloop, httptools, no access log but in the ``accesslog`` variant) pinned to
CPU 0, its stdout — where cvdiag's
lines go — a real file; wrk on CPU 1 (``taskset``; on a one-CPU machine both share it) warms it
up, then loads one route for ``--seconds``. The figure of record is the server process's own CPU
time (user + system, from ``/proc/PID/stat``) over the load divided by the requests served: what
a user's CPU pays per request, whatever the load generator does. Throughput and wrk's p50/p99
latency are shown beside it. Variants run interleaved: every round runs each variant once per
route, in an order that rotates from round to round, so a slow moment of a shared machine falls
on all of them; a variant's ratio is the median over rounds of its CPU per request ÷ the bare
app's in the same round, shown with the min–max over rounds.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Which cvdiag a server runs (``--build``): ``pure``, this checkout's sources, put first on the
#: server's path (whatever the interpreter has installed); ``compiled``, the cvdiag installed in
#: ``--python``'s environment, which must be the compiled wheel (docs/installing.md). The server
#: refuses to start on any other build than the one asked for (``server_app.build``).
BUILDS = ("pure", "compiled")
VARIANTS = (
    "bare", "off", "default", "verbose", "debug", "floor", "correlation", "accesslog", "otel"
)  # fmt: skip
#: What the access-log variant writes for each request (uvicorn's access format, to stdout).
ACCESS_LINE = b'HTTP/1.1" 200'
ROUTES = ("json", "sse", "agent")
#: The agent route's body: about 2 KB of JSON, as an AG-UI run's input.
BODY = orjson.dumps(
    {
        "threadId": "thread-0190d6a0",
        "runId": "run-5c2e7c3a",
        "messages": [
            {"id": f"msg-{i}", "role": "user", "content": "What is the weather in Amsterdam? " * 3}
            for i in range(16)
        ],
    }
)
_TICK = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _pin(cpu: int) -> list[str]:
    if shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return []
    return ["taskset", "-c", str(cpu)]


def _logging(variant: str) -> list[str]:
    """uvicorn's logging for ``variant``: its access log is what every user of uvicorn already
    pays for one line per request, left on by default (``--log-level info``), to stdout (the
    same file as cvdiag's lines); every other variant runs without it."""
    if variant == "accesslog":
        return ["--log-level", "info"]
    return ["--no-access-log", "--log-level", "warning"]


class Server:
    """One uvicorn worker serving one variant, its stdout a file."""

    def __init__(
        self,
        variant: str,
        folder: Path,
        wrapper: list[str] | None = None,
        *,
        build: str = "pure",
        python: str = sys.executable,
    ) -> None:
        """``wrapper``: a command the server runs under (valgrind), instead of a CPU pin;
        ``build`` and ``python``: which cvdiag it runs, on which interpreter (``BUILDS``).

        A free port is only free until someone binds it: on a machine where other servers start
        (a test suite beside this one) another may take it first, and a check that only connects
        would then measure that server. So the server says who it is (``/whoami`` answers the
        token it was given), and a server that could not bind is started again on another port.
        """
        self.token = secrets.token_hex(8)
        env = {**os.environ, "BENCH_VARIANT": variant, "BENCH_TOKEN": self.token}
        env = {k: v for k, v in env.items() if not k.startswith("CVDIAG_")}
        env["BENCH_BUILD"] = build
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), *([str(ROOT)] if build == "pure" else [])])
        for _ in range(3):
            self.port = _free_port()
            self.log = folder / f"{variant}-{self.port}.log"
            command = [
                *(_pin(0) if wrapper is None else wrapper),
                python, "-m", "uvicorn", "server_app:build", "--factory",
                "--port", str(self.port), "--loop", "uvloop", "--http", "httptools",
                *_logging(variant),
            ]  # fmt: skip
            with open(self.log, "wb") as out:
                self.process = subprocess.Popen(
                    command, stdout=out, stderr=subprocess.PIPE, env=env
                )
            if self._answers(deadline=time.monotonic() + (20 if wrapper is None else 600)):
                return
            errors = self.errors()
            self.stop()
            if "address already in use" not in errors.lower():
                raise SystemExit(f"{variant}: the server did not start: {errors}")
        raise SystemExit(f"{variant}: no free port stayed free for the server")

    def _answers(self, deadline: float) -> bool:
        """Whether this process's server answers with its token before ``deadline`` (callgrind
        starts several times slower); False once the process has exited."""
        request = b"GET /whoami HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n"
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                    sock.sendall(request)
                    answer = b""
                    while chunk := sock.recv(4096):
                        answer += chunk
                if answer.endswith(self.token.encode()):
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def errors(self) -> str:
        if self.process.stderr is None:
            return ""
        return (
            self.process.stderr.read().decode(errors="replace")[-400:]
            if self.process.poll() is not None
            else ""
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _wrk(port: int, route: str, seconds: int, connections: int, folder: Path) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/{route}"
    # wrk takes whole seconds.
    command = [
        *_pin(1),
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, seconds)}s",
        "--latency",
        url,
    ]
    if route == "agent":
        script = folder / "post.lua"
        body = BODY.decode().replace("\\", "\\\\").replace('"', '\\"')
        script.write_text(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            f'wrk.body = "{body}"\n'
        )
        command[-1:-1] = ["-s", str(script)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return _parse(done.stdout)


def _parse(out: str) -> dict[str, float]:
    requests = re.search(r"(\d+) requests in", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if requests is None:
        raise SystemExit(f"wrk printed no request count:\n{out}")
    found = {
        "requests": float(requests.group(1)),
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }
    for name, figure in (("p50", "50%"), ("p99", "99%")):
        match = re.search(rf"{re.escape(figure)}\s+([\d.]+)(us|ms|s)\b", out)
        if match is not None:
            scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[match.group(2)]
            found[f"{name}_ms"] = float(match.group(1)) * scale
    return found


def measure(variant: str, route: str, args: argparse.Namespace, folder: Path) -> dict[str, float]:
    server = Server(variant, folder, build=args.build, python=args.python)
    warm = 0.0
    try:
        if args.warmup:  # imports, caches and the first requests' allocations
            warm = _wrk(server.port, route, args.warmup, args.connections, folder)["requests"]
        # A round that completed no request says nothing (on a starved machine a 1 s round of
        # the suite's tiny size has served none): it is measured again, twice as long each time.
        seconds = args.seconds
        while True:
            before = _cpu_seconds(server.process.pid)
            start = time.perf_counter()
            result = _wrk(server.port, route, seconds, args.connections, folder)
            result["wall_s"] = time.perf_counter() - start
            result["cpu_s"] = _cpu_seconds(server.process.pid) - before
            if result["requests"] or seconds >= 8 * max(1, args.seconds):
                break
            seconds = 2 * max(1, seconds)
    finally:
        server.stop()
    if result["non_2xx"]:
        raise SystemExit(f"{variant} /{route}: {result['non_2xx']:g} responses were not 2xx")
    log = server.log.read_bytes()
    if variant == "accesslog":
        lines = log.count(ACCESS_LINE)
    else:
        lines = log.count(b"\nCVDIAG ") + log.startswith(b"CVDIAG ")
    if variant in ("default", "verbose", "debug", "accesslog") and lines == 0:
        raise SystemExit(f"{variant} /{route}: the server wrote no line")
    result["lines"] = float(lines)
    # The log holds the warm-up's lines too, and the start check's (``/whoami``).
    result["served"] = warm + result["requests"] + 1
    if not result["requests"]:
        raise SystemExit(f"{variant} /{route}: no request completed in {seconds} s")
    result["cpu_us_per_request"] = result["cpu_s"] / result["requests"] * 1e6
    result["requests_per_s"] = result["requests"] / result["wall_s"]
    server.log.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=1, help="seconds of load before measuring")
    parser.add_argument("--only", default=",".join(VARIANTS))
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--build", choices=BUILDS, default="pure", help="which cvdiag to serve")
    parser.add_argument("--python", default=sys.executable, help="the servers' interpreter")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    variants = [v for v in args.only.split(",") if v]
    if "bare" not in variants:
        variants.insert(0, "bare")
    routes = [r for r in args.routes.split(",") if r]
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="cvdiag-server-bench-") as name:
        folder = Path(name)
        for number in range(args.rounds):
            order = variants[number % len(variants) :] + variants[: number % len(variants)]
            for route in routes:
                for variant in order:
                    runs.setdefault((variant, route), []).append(
                        measure(variant, route, args, folder)
                    )
    table = _summarize(runs, variants, routes)
    if args.json:
        print(orjson.dumps(table, option=orjson.OPT_INDENT_2).decode())
    else:
        _print(table, variants, routes)


def _summarize(
    runs: dict[tuple[str, str], list[dict[str, float]]], variants: list[str], routes: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for route in routes:
        bare = runs[("bare", route)]
        for variant in variants:
            mine = runs[(variant, route)]
            ratios = [
                m["cpu_us_per_request"] / b["cpu_us_per_request"]
                for m, b in zip(mine, bare, strict=True)
            ]
            out.setdefault(route, {})[variant] = {
                "cpu_us_per_request": statistics.median(m["cpu_us_per_request"] for m in mine),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "requests_per_s": statistics.median(m["requests_per_s"] for m in mine),
                "p50_ms": statistics.median(m.get("p50_ms", 0.0) for m in mine),
                "p99_ms": statistics.median(m.get("p99_ms", 0.0) for m in mine),
                "lines_per_request": statistics.median(m["lines"] / m["served"] for m in mine),
                "lines": statistics.median(m["lines"] for m in mine),
                "served": statistics.median(m["served"] for m in mine),
                "rounds": len(mine),
            }
    return out


def _print(table: dict[str, Any], variants: list[str], routes: list[str]) -> None:
    print(
        "route   variant      CPU µs/req  ratio (min–max)      req/s    p50 ms  p99 ms  lines/req"
    )
    for route in routes:
        for variant in variants:
            row = table[route][variant]
            print(
                f"{route:<7} {variant:<12} {row['cpu_us_per_request']:>10.1f}  {row['ratio']:.3f}"
                f" ({row['ratio_min']:.2f}–{row['ratio_max']:.2f})  {row['requests_per_s']:>8.0f}"
                f"  {row['p50_ms']:>7.2f} {row['p99_ms']:>7.2f}  {row['lines_per_request']:>8.2f}"
            )


if __name__ == "__main__":
    main()
