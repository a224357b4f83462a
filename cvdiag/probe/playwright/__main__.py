"""``python -m cvdiag.probe.playwright [PATH]``: the fixture file on stdout, or written to PATH
(its folder created), so a project copies the version of its installed cvdiag."""

from __future__ import annotations

import sys
from pathlib import Path

from cvdiag.probe.playwright import fixture_text


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python -m cvdiag.probe.playwright [PATH]", file=sys.stderr)
        return 2
    text = fixture_text()
    if not argv:
        sys.stdout.write(text)
        return 0
    target = Path(argv[0])
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"cvdiag: cannot write {target}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
