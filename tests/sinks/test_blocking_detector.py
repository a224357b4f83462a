"""A blocking-call detector on the event loop (issue 36): blockbuster refuses ``os.write`` on a
blocking descriptor, which stdout is when it is a regular file. The lines then go through the
writer thread, none is dropped, and stderr says once which way is used. On a pipe cvdiag writes
a non-blocking descriptor of its own, which the detector lets through: nothing to say."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
COUNT = 300
HOST = textwrap.dedent(
    f"""
    import asyncio
    from blockbuster import blockbuster_ctx
    from cvdiag import Settings, configure, emit, flush

    configure(Settings(enabled=True))

    async def main():
        with blockbuster_ctx():
            for i in range({COUNT}):
                emit("backend.error.caught", metadata={{"message_scrubbed": str(i)}})
                if i % 50 == 0:
                    await asyncio.sleep(0.02)  # the loop drains a burst (or is refused)
            await asyncio.sleep(0.05)

    asyncio.run(main())
    flush()
    """
)
SAID = "cvdiag: writing from the writer thread: the event loop's write was refused (BlockingError)"


def _run(stdout: int) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-c", HOST],
        stdout=stdout,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=True,
    )


def _messages(out: bytes) -> list[str]:
    lines = [orjson.loads(line[7:]) for line in out.splitlines()]
    return [line["metadata"]["message_scrubbed"] for line in lines]


@pytest.mark.parametrize("kind", ["file", "pipe"])
def test_a_refused_loop_write_goes_through_the_thread_and_nothing_is_lost(
    kind: str, tmp_path: Path
) -> None:
    if kind == "file":
        with open(tmp_path / "out", "wb") as out:
            done = _run(out.fileno())
        written = (tmp_path / "out").read_bytes()
    else:
        done = _run(subprocess.PIPE)
        written = done.stdout
    assert _messages(written) == [str(i) for i in range(COUNT)]
    said = [line for line in done.stderr.decode().splitlines() if "writer thread" in line]
    assert said == ([f"{SAID}; nothing is dropped"] if kind == "file" else [])
    assert "not written" not in done.stderr.decode()
