"""Envelope times: ``ts`` as a sortable UTC key, and back.

A merge of several logs orders envelopes by this key (then ``mono_ns``), so it must sort as
time does whatever offset or fraction a writer used.
"""

from __future__ import annotations

import datetime
import re

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from typing import Final

CANONICAL_TS: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def ts_key(value: str) -> str | None:
    """``value`` as a sortable UTC string with microseconds, or None when it is not a date-time.

    cvdiag writes ``YYYY-MM-DDTHH:MM:SS.mmmZ``, which takes the fast path; other ISO-8601 forms
    (offsets, other fractions) are converted, and a time without an offset is taken as UTC.
    """
    if CANONICAL_TS.fullmatch(value):
        return value[:23] + "000Z"
    parsed = parse_time(value)
    return None if parsed is None else format_key(parsed)


def parse_time(value: str) -> datetime.datetime | None:
    """An aware UTC datetime from an ISO-8601 date or date-time, or None."""
    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.astimezone(datetime.timezone.utc)


def format_key(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_KEY: Final = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})T([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])\.([0-9]{6})Z"
)
_EPOCH_DAY: Final = datetime.date(1970, 1, 1).toordinal()
#: Days since the epoch of the dates seen: a log spans few of them.
_days: dict[str, int] = {}


def key_millis(key: str) -> float:
    """Milliseconds since the epoch of a ``ts_key`` string."""
    found = _KEY.fullmatch(key)
    if found is not None:
        # ``strptime`` costs 30 microseconds and runs for most envelopes of ``ls``: the same
        # figure from integers, divided as ``timedelta.total_seconds`` divides.
        date, hour, minute, second, micros = found.groups()
        day = _days.get(date)
        if day is None:
            try:
                day = datetime.date.fromisoformat(date).toordinal() - _EPOCH_DAY
            except ValueError:
                day = None
            if day is not None and len(_days) < 4096:
                _days[date] = day
        if day is not None:
            seconds = day * 86400 + int(hour) * 3600 + int(minute) * 60 + int(second)
            return (seconds * 1_000_000 + int(micros)) / 1_000_000 * 1000.0
    moment = datetime.datetime.strptime(key, "%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000.0
