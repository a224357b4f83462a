"""``python -m examples NAME``: run one example offline, with one command (see offline.py).

python -m examples fastapi_openai
python -m examples fastapi_openai --log /tmp/openai.log
python -m examples                     # lists the examples
"""

from __future__ import annotations

import argparse
import importlib
import sys

from examples.offline import Example, Unavailable, run

NAMES = ("fastapi_openai", "starlette_sse", "websocket_chat", "sync_worker", "otel_collector")


def example(name: str) -> Example:
    found: Example = importlib.import_module(f"examples.{name}.offline").EXAMPLE
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples",
        description="Run an example offline: its app with cvdiag on, against bundled fakes,"
        " driven by real clients through a healthy visit and its failures; then the cvdiag"
        " commands that read its log. Run from the repository root.",
    )
    parser.add_argument("name", nargs="?", choices=NAMES, metavar="NAME", help=", ".join(NAMES))
    parser.add_argument("--log", help="where the log goes (default: NAME.log here)")
    args = parser.parse_args(argv)
    if args.name is None:
        for name in NAMES:
            print(f"python -m examples {name:<16}  {example(name).summary}")
        return 0
    try:
        return run(example(args.name), log=args.log)
    except Unavailable as exc:
        print(f"python -m examples {args.name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the example's server has been stopped on the way out
        return 130


if __name__ == "__main__":
    sys.exit(main())
