"""``validate`` and ``stats`` reading a large file in ranges must say what one read says.

The commands run as a user runs them (a subprocess), once sequentially and once with the
parallel threshold lowered to nothing and ranges of a few hundred bytes, so a small log is cut
into many ranges; stdout, stderr and the exit code must be the same bytes. Each parallel run
also records how many ranges it read, so a run that silently fell back to one read fails.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cvdiag.logs import ranges
from cvdiag.logs.reading import Input
from cvdiag.stats import figures as stats
from tests.support.stories import STORIES

# Lowers the thresholds (argv[1:5]), counts the ranges read (appended to argv[5]), runs the
# command (argv[6:]). ``CRASH``/``FAIL`` in the environment break the worker of a later range;
# ``ROTATE`` gives the log's name to a new file once it is open.
_RUNNER = """
import os, signal, sys
from cvdiag.logs import ranges, reading
minimum, size, max_line, seen = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ranges.PARALLEL_MIN, ranges.RANGE_SIZE = int(minimum), int(size)
reading.MAX_LINE = int(max_line)
run, opened = ranges.run, ranges.open_range

def counted(job, source, spans, **kw):
    with open(seen, "a") as f:
        f.write(f"{len(spans)}\\n")
    if os.environ.get("ROTATE"):  # the log rotated after it was opened, before it is read
        os.rename(source.name, source.name + ".1")
        with open(source.name, "wb") as f:
            f.write(b"a new log\\n" * 100000)
    return run(job, source, spans, **kw)

def broken(name, start, end):
    if start and os.environ.get("CRASH"):
        os.kill(os.getpid(), signal.SIGKILL)
    source, newlines = opened(name, start, end)
    if start and os.environ.get("FAIL"):
        source.stream.read1 = lambda size: (_ for _ in ()).throw(OSError(5, "Input/output error"))
    return source, newlines

ranges.run, ranges.open_range = counted, broken
from cvdiag.cli import main
sys.exit(main(sys.argv[5:]))
"""

MAX_LINE = 3000


def _run(
    args: list[str], *, parallel: bool, tmp: Path, size: int = 400, **env: str
) -> tuple[int, str, str, list[int]]:
    seen = tmp / "ranges-seen"
    seen.write_text("")
    minimum = "0" if parallel else str(1 << 40)
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, minimum, str(size), str(MAX_LINE), str(seen), *args],
        capture_output=True,
        timeout=120,
        env={**_environ(), **env},
    )
    counts = [int(n) for n in seen.read_text().split()]
    return done.returncode, done.stdout.decode(), done.stderr.decode(), counts


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CRASH", "FAIL", "ROTATE")}


def _envelopes() -> list[str]:
    lines = []
    for index, make in enumerate(STORIES.values()):
        story = make()
        for env, line in zip(story.envelopes, story.lines(), strict=True):
            env["slug"] = f"slug-{index % 3}"
            lines.append("CVDIAG " + json.dumps(env, separators=(",", ":")) if index else line)
    return lines


_GOOD = _envelopes()
_KINDS = [
    "good",
    "good",
    "good",
    "noise",
    "noise",
    "prefixed",
    "crlf",
    "extra-metadata",
    "bad-shape",
    "bad-json",
    "set-aside",
    "too-long",
    "empty",
]


def _line(kind: str, rng: random.Random) -> str:
    good = rng.choice(_GOOD)
    if kind == "good":
        return good
    if kind == "noise":
        return f'INFO:     127.0.0.1:{rng.randrange(65536)} - "POST /chat HTTP/1.1" 200 OK'
    if kind == "prefixed":
        return "web-1  | 2026-11-22T03:00:00.123Z " + good
    if kind == "crlf":
        return good + "\r"
    if kind == "extra-metadata":  # valid JSON, readable, but not what the schema allows
        return good.replace('"metadata":{', '"metadata":{"bogus":1,', 1)
    if kind == "bad-shape":  # unreadable for stats, invalid for validate
        return 'CVDIAG {"test_id":7,"boundary":"backend.request.ingress"}'
    if kind == "bad-json":
        return good[: rng.randrange(10, len(good) - 1)]
    if kind == "set-aside":
        return "hello " + good
    if kind == "too-long":
        return "CVDIAG {" + "x" * (MAX_LINE + rng.randrange(1, 600))
    return ""


def _log(rng: random.Random, kinds: list[str], *, newline_at_end: bool) -> bytes:
    text = "\n".join(_line(kind, rng) for kind in kinds)
    return (text + "\n" if newline_at_end else text).encode()


def _same(args: list[str], tmp: Path, size: int = 400) -> list[int]:
    one = _run(args, parallel=False, tmp=tmp)
    many = _run(args, parallel=True, tmp=tmp, size=size)
    assert one[0] in (0, 1), one[2]
    assert many[:3] == one[:3]
    assert one[3] == []
    return many[3]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two logs with every kind of line, more problems than validate lists, the second
    without a final newline; and a gzip one, which is always read in one process."""
    root = tmp_path_factory.mktemp("parallel")
    rng = random.Random(11)
    first = root / "a.log"
    first.write_bytes(_log(rng, [rng.choice(_KINDS) for _ in range(900)], newline_at_end=True))
    second = root / "b.log"
    second.write_bytes(_log(rng, [rng.choice(_KINDS) for _ in range(300)], newline_at_end=False))
    packed = root / "c.log.gz"
    packed.write_bytes(gzip.compress(_log(rng, ["good"] * 50, newline_at_end=True)))
    return [str(first), str(second), str(packed)]


def test_validate_in_ranges_says_what_one_read_says(logs: list[str], tmp_path: Path) -> None:
    counts = _same(["validate", *logs], tmp_path)
    assert len(counts) == 2
    assert min(counts) > 10
    out = _run(["validate", *logs], parallel=False, tmp=tmp_path)[1]
    # The log holds every kind of problem, and more than validate lists.
    for words in ("malformed: invalid JSON", "set aside", "bytes, skipped", "more not shown"):
        assert words in out


def test_validate_in_ranges_numbers_lines_past_the_first_range(
    logs: list[str], tmp_path: Path
) -> None:
    # Only problems: every line of the log is listed, the last lines far past the first range.
    rng = random.Random(5)
    path = tmp_path / "bad.log"
    path.write_bytes(_log(rng, ["noise", "bad-json"] * 30, newline_at_end=True))
    _same(["validate", str(path)], tmp_path, size=100)
    out = _run(["validate", str(path)], parallel=True, tmp=tmp_path, size=100)[1]
    assert [line.split(":")[1] for line in out.splitlines()[:-1]] == [
        str(n) for n in range(2, 61, 2)
    ]


@pytest.mark.parametrize("form", [["--json"], []])
def test_stats_in_ranges_says_what_one_read_says(
    logs: list[str], tmp_path: Path, form: list[str]
) -> None:
    counts = _same(["stats", *form, *logs], tmp_path)
    assert len(counts) == 2
    assert min(counts) > 10


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kinds=st.lists(st.sampled_from(_KINDS), min_size=1, max_size=120),
    seed=st.integers(0, 1000),
    size=st.integers(1, 3000),
    newline_at_end=st.booleans(),
)
def test_random_logs_read_in_ranges_say_what_one_read_says(
    tmp_path: Path, kinds: list[str], seed: int, size: int, newline_at_end: bool
) -> None:
    path = tmp_path / "random.log"
    path.write_bytes(_log(random.Random(seed), kinds, newline_at_end=newline_at_end))
    for args in (["validate", str(path)], ["stats", "--json", str(path)]):
        one = _run(args, parallel=False, tmp=tmp_path)
        many = _run(args, parallel=True, tmp=tmp_path, size=size)
        assert many[:3] == one[:3]
        assert len(many[3]) == (1 if path.stat().st_size else 0)


@pytest.mark.parametrize("command", [["validate"], ["stats", "--json"]])
@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"CRASH": "1"}, "a worker process reading it ended unexpectedly"),
        ({"FAIL": "1"}, "input/output error"),
    ],
)
def test_a_worker_that_dies_or_cannot_read_gives_one_error_line(
    logs: list[str], tmp_path: Path, command: list[str], env: dict[str, str], reason: str
) -> None:
    code, _, err, _ = _run([*command, logs[0]], parallel=True, tmp=tmp_path, **env)
    assert code == 2
    assert err.splitlines() == [f"cvdiag: error: {command[0]}: cannot read {logs[0]}: {reason}"]


@pytest.mark.parametrize("command", [["validate"], ["stats", "--json"]])
def test_workers_read_the_file_opened_even_when_the_name_moves_on(
    logs: list[str], tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "app.log"
    path.write_bytes(Path(logs[0]).read_bytes())
    one = _run([*command, str(path)], parallel=False, tmp=tmp_path)
    many = _run([*command, str(path)], parallel=True, tmp=tmp_path, ROTATE="1")
    assert many[:3] == one[:3]
    assert path.read_bytes().startswith(b"a new log")  # the rotation happened


# --- the ranges themselves -------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\n\n", b"x" * 50]), max_size=60),
    step=st.integers(1, 80),
)
def test_ranges_cover_the_file_and_start_on_lines(data: list[bytes], step: int) -> None:
    blob = b"".join(data)
    spans = ranges.split(lambda at, count: blob[at : at + count], len(blob), step)
    assert spans[0][0] == 0
    assert spans[-1][1] == len(blob)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    for start, end in spans:
        assert start < end or len(blob) == 0
        assert start == 0 or blob[start - 1 : start] == b"\n"
        # A range ends where the next line begins, not before: at most one edge per step.
        assert end == len(blob) or end - start >= step


def test_gzip_stdin_small_files_and_threaded_hosts_are_read_in_one_process(
    logs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranges, "PARALLEL_MIN", 0)
    monkeypatch.setattr(ranges.threading, "active_count", lambda: 1)  # a test leaves threads
    with open(logs[0], "rb") as f:
        assert ranges.plan(Input(logs[0], f)) is not None
    monkeypatch.setattr(ranges.threading, "active_count", lambda: 2)
    with open(logs[0], "rb") as f:
        assert ranges.plan(Input(logs[0], f)) is None  # forking beside a thread is unsafe
    monkeypatch.setattr(ranges.threading, "active_count", lambda: 1)
    with open(logs[2], "rb") as f:
        assert ranges.plan(Input(logs[2], f)) is None  # gzip
    assert ranges.plan(Input("-", io.BufferedReader(io.BytesIO(b"x\n" * 10)))) is None
    monkeypatch.setattr(ranges, "PARALLEL_MIN", 1 << 40)
    with open(logs[0], "rb") as f:
        assert ranges.plan(Input(logs[0], f)) is None


def test_samples_merged_past_the_reservoir_stay_a_sample_of_both() -> None:
    rng = random.Random(2)
    low, high = stats.Sample(100, rng), stats.Sample(100, rng)
    for n in range(300):
        low.add(float(n))
    for n in range(100):
        high.add(1000.0 + n)
    low.merge(high)
    assert low.count == 400
    assert len(low.values) == 100
    assert set(low.values) <= {float(n) for n in range(300)} | {1000.0 + n for n in range(100)}
    taken = sum(v >= 1000 for v in low.values)
    assert 5 <= taken <= 50  # a quarter of the numbers: about a quarter of the sample
    assert not low.percentiles()["exact"]


def test_two_overflowing_samples_merge_in_proportion() -> None:
    rng = random.Random(4)
    low, high = stats.Sample(100, rng), stats.Sample(100, rng)
    for n in range(300):
        low.add(float(n))
    for n in range(900):
        high.add(1000.0 + n)
    low.merge(high)
    assert low.count == 1200
    assert len(low.values) == 100
    assert 60 <= sum(v >= 1000 for v in low.values) <= 90  # three quarters of the numbers


def test_samples_that_fit_merge_to_exactly_the_numbers_of_one_read() -> None:
    rng = random.Random(4)
    one, two, whole = (stats.Sample(100, rng) for _ in range(3))
    for n in range(60):
        (one if n < 25 else two).add(float(n % 7))
        whole.add(float(n % 7))
    one.merge(two)
    assert one.percentiles() == whole.percentiles()
    assert sorted(one.values) == sorted(whole.values)
