"""The one rule for failures inside cvdiag: count them, say so once on stderr, never raise; and
the one line on stderr that says cvdiag is on."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterable

from cvdiag.core.version import BUILD

_lock = threading.Lock()
_reported: set[str] = set()
#: Process-wide counts of cvdiag's own failures, by kind (``emit``, ``sink``, ``middleware`` …).
failures: Counter[str] = Counter()


def record_failure(kind: str, exc: BaseException | str) -> None:
    """Count a failure of ``kind``; the first of each kind is reported on stderr."""
    with _lock:
        failures[kind] += 1
        if kind in _reported:
            return
        _reported.add(kind)
    say(f"{kind} failed ({_describe(exc)}); counted, further {kind} failures are counted silently")


def say(message: str) -> None:
    """One line on stderr for the operator; a broken stderr is ignored."""
    try:
        sys.stderr.write(f"cvdiag: {message}\n")
        sys.stderr.flush()
    except Exception:  # noqa: S110 - stderr itself is gone; there is nobody left to tell
        pass


def _describe(exc: BaseException | str) -> str:
    from cvdiag.scrubbing.redact import scrub  # late: scrub must stay importable without the guard

    if isinstance(exc, str):
        return scrub(exc)[:200]
    return f"{type(exc).__name__}: {scrub(exc)[:200]}"


_announced = False


def announce_once(tier: str, sinks: Iterable[object]) -> None:
    """Once per process, when the environment turned emission on: the tier, the build (compiled
    or pure Python, docs/installing.md) and the sinks, on stderr (stdout stays envelopes only).
    Off, nothing is said."""
    global _announced
    if _announced:
        return
    _announced = True
    names = ", ".join(_sink_name(sink) for sink in sinks)
    say(f"on at the {tier} tier ({BUILD}), writing to {names}")


def _sink_name(sink: object) -> str:
    name = type(sink).__name__.removesuffix("Sink").lower()
    return {"spanevent": "opentelemetry span events"}.get(name, name)
