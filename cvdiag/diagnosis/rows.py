"""A test id's ``ls`` row — class, requests, status, duration, LLM calls, first seen — folded into
a few bytes (``pertest``). ``cvdiag ls`` and ``cvdiag report`` list test ids with it."""

from __future__ import annotations

import math
import struct
from typing import Any, Final

from cvdiag.diagnosis.classify import FROM_ABSENCE, classify, lacking
from cvdiag.diagnosis.facts import Facts
from cvdiag.diagnosis.timeline import Clock


def status(facts: Facts) -> str:
    """What the client got: the first abort, else the worst completion, else nothing yet."""
    if facts.aborts:
        return f"aborted {facts.aborts[0].termination}"
    done = facts.error_status or facts.failed or facts.last_completion
    if done is None:
        # Work outside any request (a run whose request sent no test id) has no terminal to miss.
        return "background run" if facts.run is not None and not facts.ingresses else "no terminal"
    status = f"HTTP {done.status:g}" if done.status is not None else done.outcome
    return status if done.outcome == "ok" else f"{status} {done.outcome}"


#: The figures of a row after its sort key: requests, envelopes, duration (NaN for none), LLM
#: calls, and the class, status, slug, log tier, caveat ("" for none) and the class where the
#: log reports drops as indexes into ``Rows.texts``.
_FIGURES: Final = struct.Struct(">QQdIIIIIII")


class Rows:
    """``ls`` rows folded into one ``bytes`` each (``pertest``), about 100 bytes a test id.

    A row starts with its sort key: the first ts (UTF-8), the first ``mono_ns`` and the order in
    which the test id appeared, big-endian, so rows sort as bytes exactly as the tuples did. Its
    last byte is the length of the ts. Texts repeat (classes, statuses, slugs): each is kept once.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        #: Set once the log is read, if it reports drops: a row whose story visibly lacks
        #: envelopes is then ``incomplete`` (the drop reports come after the stories they cut,
        #: so a row is folded before they are known: it keeps both classes).
        self.drops_reported = False
        self.texts: list[str] = []
        self._index: dict[str, int] = {}

    def _text(self, value: str) -> int:
        index = self._index.get(value)
        if index is None:
            index = self._index[value] = len(self.texts)
            self.texts.append(value)
        return index

    def fold(self, order: int, slug: str, facts: Facts) -> bytes:
        verdict = classify(facts, first_token_timeout=self.timeout)
        cut = verdict.flap_class in FROM_ABSENCE and lacking(facts)
        first, last = facts.first, facts.last
        duration = None
        if first is not None and last is not None:  # from the first request's start
            clock = Clock(first)
            duration = clock.offset_ms(last) + facts.lead_ms(clock)
        ts = (first[0] if first is not None else "").encode()
        mono = first[1] if first is not None else 0
        return b"".join(
            (
                ts,
                (mono + 2**63).to_bytes(9, "big"),  # any 64-bit mono_ns, signed or not
                order.to_bytes(4, "big"),
                _FIGURES.pack(
                    facts.requests,
                    facts.count,
                    round(duration, 3) if duration is not None else math.nan,
                    len(facts.calls),
                    self._text(verdict.flap_class),
                    self._text(status(facts)),
                    self._text(slug),
                    self._text(verdict.log_tier),
                    # Kept whole, not as a flag: a caveat's words depend only on the log's tier
                    # and the classes it could not check, so few distinct texts are interned.
                    self._text(verdict.caveat or ""),
                    self._text("incomplete" if cut else verdict.flap_class),
                ),
                bytes((len(ts),)),
            )
        )

    def restore(self, row: bytes) -> tuple[int, str]:
        """The order and slug a row was folded with."""
        size = row[-1]
        order = int.from_bytes(row[size + 9 : size + 13], "big")
        slug: int = _FIGURES.unpack_from(row, size + 13)[6]
        return order, self.texts[slug]

    def first_seen(self, row: bytes) -> str:
        return row[: row[-1]].decode()

    def flap_class(self, row: bytes) -> str:
        figures = _FIGURES.unpack_from(row, row[-1] + 13)
        index: int = figures[9] if self.drops_reported else figures[4]
        return self.texts[index]

    def row(self, test_id: str, row: bytes) -> dict[str, Any]:
        size = row[-1]
        requests, count, duration, calls, flap_class, said, slug, tier, caveat, if_cut = (
            _FIGURES.unpack_from(row, size + 13)
        )
        return {
            "test_id": test_id,
            "flap_class": self.texts[if_cut if self.drops_reported else flap_class],
            "requests": requests,
            "status": self.texts[said],
            "duration_ms": None if math.isnan(duration) else duration,
            "first_seen": row[:size].decode() or None,
            "slug": self.texts[slug],
            "log_tier": self.texts[tier],
            "envelopes": count,
            "llm_calls": calls,
            # What ``classify`` says beside the class: earlier classes the log's tier could
            # not rule out (a default-tier client-abort may be a stalled backend).
            "caveat": self.texts[caveat] or None,
        }
