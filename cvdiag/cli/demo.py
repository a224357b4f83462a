"""``cvdiag demo``: see ``cvdiag.demo``."""

from __future__ import annotations

import argparse

from cvdiag.cli.output import NOTHING, USAGE, Failure


def demo(args: argparse.Namespace) -> int:
    from cvdiag.demo import DemoFailed, DemoUnavailable, run

    try:
        return run(log=args.log)
    except DemoUnavailable as exc:
        raise Failure(f"demo: {exc}", USAGE) from None
    except DemoFailed as exc:
        raise Failure(f"demo: {exc}", NOTHING) from None
