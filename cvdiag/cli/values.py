"""The value types of ``cvdiag``'s options: each checks and normalises one word of the command
line, and says in one line what it should have been (``argparse`` turns the ``ArgumentTypeError``
into the command's usage error, exit 2).

Kept apart from the parsers that use them (``arguments.py``): these are the rules a word must
follow, those are the layout of each command. The schema is imported by the types that check
against it when they first run (``--boundary``, ``--outcome``, ``--tier``), so ``cvdiag grep
--test-id`` starts without it.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import math
import re
import textwrap
from functools import cache

from cvdiag.diagnosis.classes import CLASSES
from cvdiag.logs.times import parse_time

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Final

    from cvdiag.schema.vocabulary import Tier

__all__ = [
    "boundaries",
    "boundary",
    "count",
    "flap_class",
    "moment",
    "outcome",
    "seconds",
    "slug",
    "test_id",
    "tier",
]

_TEST_ID: Final = re.compile(r"[a-z0-9._-]{1,128}")


def test_id(value: str) -> str:
    """The test id the middleware stores for ``value`` sent as ``x-test-id`` (``My Test #1`` →
    ``mytest1``), so the id a user sent finds its envelopes. An id already in that form
    (lowercase ``[a-z0-9._-]``, at most 128 characters) is taken as it is, without the scrubber
    the middleware also runs (100 ms, five times a ``grep`` on a cached log): only a lowercase
    credential used as a test id differs (its envelopes carry its ``redacted-`` placeholder)."""
    text = value.strip()
    if _TEST_ID.fullmatch(text):
        return text
    from cvdiag.schema.ids import join_key

    key = join_key(value)
    if key is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a test id: it holds no ASCII letter, digit, '.', '_' or '-', all the"
            " middleware keeps of an x-test-id (it mints a UUID for such a one)"
        )
    return key


def slug(value: str) -> str:
    """Slugs are lowercase on the wire (``^[a-z][a-z0-9-]{0,63}$``): case-folded like ids."""
    return value.strip().lower()


@cache
def boundaries() -> tuple[str, ...]:
    """Every boundary name the packaged schema allows."""
    from cvdiag.schema.vocabulary import packaged_schema

    return tuple(packaged_schema()["properties"]["boundary"]["enum"])


def outcome(value: str) -> str:
    from cvdiag.schema.vocabulary import OUTCOMES

    text = value.strip().lower()
    if text not in OUTCOMES:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an outcome (choose from {', '.join(sorted(OUTCOMES))})"
        )
    return text


def flap_class(value: str) -> str:
    text = value.strip().lower()
    if text not in CLASSES:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a class (choose from {', '.join(CLASSES)})"
        )
    return text


def tier(value: str) -> Tier:
    from cvdiag.schema.vocabulary import Tier

    try:
        return Tier[value.strip().upper()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a tier (choose from default, verbose, debug)"
        ) from None


def moment(value: str) -> datetime.datetime:
    parsed = parse_time(value)
    if parsed is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO-8601 date or date-time (e.g. 2026-11-22T03:00:00Z)"
        )
    return parsed


def seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of seconds")
    return number


def count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count (0 or more)")
    return number


def boundary(value: str) -> str:
    """A boundary name, or a glob (``backend.llm.*``) that names at least one."""
    text = value.strip().lower()
    if not any(fnmatch.fnmatchcase(name, text) for name in boundaries()):
        raise argparse.ArgumentTypeError(
            f"{value!r} names no boundary (e.g. backend.request.ingress, backend.llm.*)"
        )
    return text


class WholeWords(argparse.RawDescriptionHelpFormatter):
    """Option help wrapped between words only: a class name (``edge-interference``) is never
    cut at its hyphen, so it can be read and copied whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)
