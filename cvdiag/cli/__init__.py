"""The ``cvdiag`` command."""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """usage: cvdiag <command> [options]

commands (arriving with the CLI release): demo, grep, replay, classify, stats, validate
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Print usage; every command is still to come, so the exit code is 2 (usage error)."""
    args = list(sys.argv[1:] if argv is None else argv)
    stream = sys.stdout if args[:1] in (["-h"], ["--help"]) else sys.stderr
    stream.write(USAGE)
    return 0 if stream is sys.stdout else 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
