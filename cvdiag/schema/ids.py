"""Identifiers: minted UUIDv7 test and trace ids, span ids, and adoption of inbound ids."""

from __future__ import annotations

import os
import re
import threading
import time
from random import getrandbits
from typing import Final

from cvdiag.scrubbing.redact import placeholder, scrub_identifier

_UUID7: Final = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", re.IGNORECASE
)
_NOT_JOIN_KEY: Final = re.compile(r"[^a-z0-9._-]+")
_NOT_SLUG: Final = re.compile(r"[^a-z0-9-]+")
_SLUG: Final = re.compile(r"[a-z][a-z0-9-]{0,63}")
#: Each byte value's two lowercase hex digits. An id is put together from these in one string
#: build: compiled, that is a third of what ``%``-formatting its five groups costs (each ``%x``
#: of an ``int`` makes a string of its own), and a request mints one.
_HEX: Final = tuple(f"{byte:02x}" for byte in range(256))
TEST_ID_MAX: Final = 128
#: Inbound values longer than this are not read as ids (a 1 MB header costs no more than a short
#: one): cut, their end could hold part of a credential no rule recognises any more, and the key
#: shown can come from anywhere in them (what is not a join-key character is dropped). Such a
#: value becomes its digest placeholder instead, so it is never cut before it is scrubbed.
_INBOUND_MAX: Final = 1024
#: Characters of an over-long inbound value hashed into its placeholder (with its length).
_DIGESTED: Final = 65_536
#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round).
_time_ns: Final = time.time_ns
_getrandbits: Final = getrandbits


_mint_lock = threading.Lock()
#: The last id's millisecond and its 12-bit counter (RFC 9562 §6.2, method 1).
_last_ms = 0
_counter = 0


def new_uuid7() -> str:
    """A fresh UUIDv7 in its canonical lowercase form (RFC 9562).

    48 bits of Unix milliseconds, then ``rand_a`` as a 12-bit counter seeded at random below
    2048 each millisecond (so ids minted in one millisecond stay ordered, with room for 2048 more),
    then 62 random bits. Only past 4096 ids in one millisecond does the stamp borrow the next
    one, so it stays on the wall clock at any rate Python can mint; a clock stepped back keeps
    the last stamp, so ids stay ordered. About 1 µs (uuid6's ``uuid7()`` takes 3–6 µs).
    """
    global _last_ms, _counter
    ms = _time_ns() // 1_000_000
    with _mint_lock:
        if ms > _last_ms:
            counter = _getrandbits(11)
        else:
            ms = _last_ms
            counter = _counter + 1
            if counter > 0xFFF:
                ms += 1
                counter = _getrandbits(11)
        _last_ms, _counter = ms, counter
    return uuid7_text(ms, counter, _getrandbits(62))


def uuid7_text(ms: int, counter: int, rand: int) -> str:
    """The canonical text of the UUIDv7 of 48-bit ``ms``, 12-bit ``counter`` and 62-bit
    ``rand``, a byte at a time: the millisecond's six bytes, the version and the counter, the
    variant and ``rand``'s top 14 bits, then its low six bytes. No 128-bit integer is built:
    every value here fits a machine word, so compiled, each byte is a shift, a mask and a lookup."""
    h = _HEX
    version = 0x7000 | counter
    variant = 0x8000 | rand >> 48
    return (
        f"{h[ms >> 40 & 255]}{h[ms >> 32 & 255]}{h[ms >> 24 & 255]}{h[ms >> 16 & 255]}"
        f"-{h[ms >> 8 & 255]}{h[ms & 255]}-{h[version >> 8]}{h[version & 255]}"
        f"-{h[variant >> 8]}{h[variant & 255]}-{h[rand >> 40 & 255]}{h[rand >> 32 & 255]}"
        f"{h[rand >> 24 & 255]}{h[rand >> 16 & 255]}{h[rand >> 8 & 255]}{h[rand & 255]}"
    )


def new_span_id() -> str:
    """16 lowercase hex digits, never all zero (OpenTelemetry treats zero as invalid).

    ``%`` rather than an f-string's format spec: half the cost, pure or compiled."""
    return "%016x" % (_getrandbits(64) or 1)


def _reset_after_fork() -> None:
    global _mint_lock
    _mint_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _text(raw: str | bytes | None) -> str:
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        return raw.decode("latin-1")
    return raw


def _over_long(raw: str | bytes | None) -> str | None:
    """An over-long inbound value's placeholder: distinct for distinct values (its length and
    first ``_DIGESTED`` characters), the same for the same one. None for a value short enough."""
    if raw is None or len(raw) <= _INBOUND_MAX:
        return None
    head = raw[:_DIGESTED]
    text = head.decode("latin-1") if isinstance(head, bytes) else head
    return placeholder(f"{len(raw)}:{text}")


def adopt_test_id(raw: str | bytes | None) -> str:
    """Adopt an inbound test id: a UUIDv7 as-is (lowercased), else a sanitized join key.

    The join key keeps harness ids such as ``d4-<slug>-<run>`` joinable; it is scrubbed first,
    so a credential sent as a test id cannot reach an envelope: such an id becomes its stable
    ``redacted-<digest>`` placeholder, distinct for distinct ids (never one shared "redacted",
    which would join two tests' envelopes). Nothing usable → a fresh UUIDv7.
    """
    return join_key(raw) or new_uuid7()


def join_key(raw: str | bytes | None) -> str | None:
    """The test id ``adopt_test_id`` makes of ``raw``, or None when it would mint one: the
    command line normalises an id it is given so, and finds the envelopes of the id sent."""
    long = _over_long(raw)
    if long is not None:
        return long
    text = _text(raw).strip()
    if len(text) == 36 and _UUID7.fullmatch(text):
        return text.lower()
    return _NOT_JOIN_KEY.sub("", scrub_identifier(text).lower())[:TEST_ID_MAX] or None


def sanitize_slug(raw: str | bytes | None) -> str | None:
    """A slug matching ``^[a-z][a-z0-9-]{0,63}$``, or None when nothing usable is left.

    A value holding a credential is never copied: it becomes its ``redacted-<digest>``
    placeholder (a valid slug, the same for the same value, distinct for distinct ones).
    """
    long = _over_long(raw)
    if long is not None:
        return long
    text = _text(raw).strip()
    scrubbed = scrub_identifier(text)
    if scrubbed != text:
        return scrubbed
    text = _NOT_SLUG.sub("-", text.lower()).lstrip("-0123456789")[:64].rstrip("-")
    return text if _SLUG.fullmatch(text) else None
