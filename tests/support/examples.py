"""``python -m examples NAME``, run once per session in a subprocess of its own.

tests/project/test_examples_offline.py checks what each run wrote and printed;
tests/project/test_docs_snippets.py runs the READMEs' ``python -m examples NAME`` lines: both read
the same run, so the suite pays for each example's offline run once.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class OfflineRun:
    name: str
    cwd: Path  # where it ran: its log is here
    returncode: int
    stdout: str
    stderr: str

    @property
    def log(self) -> Path:
        return self.cwd / f"{self.name}.log"

    def commands(self) -> list[str]:
        """The ``cvdiag`` command lines it printed, for the reader to run."""
        return [line[2:] for line in self.stdout.splitlines() if line.startswith("$ cvdiag ")]


@functools.cache
def offline_run(name: str) -> OfflineRun:
    """The example run as its README says, from a directory of its own (the repository root on
    ``PYTHONPATH`` stands in for running from the root), with cvdiag's variables cleared."""
    cwd = Path(tempfile.mkdtemp(prefix=f"cvdiag-offline-{name}-"))
    atexit.register(shutil.rmtree, cwd, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "examples", name],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return OfflineRun(name, cwd, done.returncode, done.stdout, done.stderr)
