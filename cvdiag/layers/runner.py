"""A test runner's own words on when its client left: a JUnit failure text that says the
client's request timed out, read as the client's view when no probe wrote lines.

Only the client's own timeout counts, never the test's (Playwright's "Test timeout of 30000ms
exceeded" is the runner stopping the test, not the client giving up on a request).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from cvdiag.layers.join import Join

_MS: Final = r"(\d{1,9}(?:\.\d+)?)\s?(ms|s)\b"
#: Words of a client timing out, with the timeout where the words give it.
_WORDS: Final = (
    # Playwright's APIRequestContext and page.request: "apiRequestContext.post: Timeout 2000ms
    # exceeded"; its fetch and page waits say the same.
    re.compile(r"(?<![Tt]est )\b[Tt]imeout " + _MS + r" exceeded"),
    # mocha/vitest/jest-style "Timeout of 2000 ms exceeded" (not "Test timeout of ...")
    re.compile(r"(?<![Tt]est )\b[Tt]imeout of " + _MS + r" exceeded"),
    # httpx / httpcore: "ReadTimeout: timed out", "httpx.ReadTimeout", "ConnectTimeout"
    re.compile(r"\b(?:Read|Connect|Write|Pool)Timeout\b"),
    # requests / urllib3: "Read timed out. (read timeout=2.0)"
    re.compile(r"\bread timeout=(\d+(?:\.\d+)?)\)"),
)
#: A timeout named beside httpx's words: ``timeout=2.0`` or ``Timeout(2.0)``.
_NAMED: Final = re.compile(r"[Tt]imeout[=(](\d+(?:\.\d+)?)")


def client_timeout(text: str) -> tuple[float | None, str] | None:
    """``(timeout in ms or None when the words give none, the words)`` when ``text`` says the
    client's request timed out; None when it does not."""
    head = text[:4096]
    for number, pattern in enumerate(_WORDS):
        found = pattern.search(head)
        if found is None:
            continue
        words = found.group(0)
        if number < 2:
            value, unit = float(found.group(1)), found.group(2)
            return (value * 1000.0 if unit == "s" else value), words
        if number == 3:
            return float(found.group(1)) * 1000.0, words
        named = _NAMED.search(head)
        return (float(named.group(1)) * 1000.0 if named else None), words
    return None


def said(timeout_ms: float | None, words: str) -> str:
    """How precise the runner's words are, for a verdict's reason."""
    if timeout_ms is None:
        return f'the runner\'s JUnit says the client timed out ("{words}"), not after how long'
    return (
        f'the runner\'s JUnit says the client timed out after {timeout_ms:.0f} ms ("{words}");'
        " when it sent its request is taken as when the backend got it, so the time it left is"
        " known to the network's latency"
    )


#: Test id → what its attempt's runner said of a client timing out: (timeout ms or None, words).
Words = dict[str, tuple[float | None, str]]


def words_of(attempts: Iterable[tuple[Sequence[str], str, str]]) -> Words:
    """Every failed attempt's test ids whose failure text says the client timed out, from
    ``(test ids, outcome, failure text)`` per attempt (``cvdiag.runs`` reads them)."""
    found: Words = {}
    for test_ids, outcome, failure in attempts:
        if outcome != "failed" or not failure:
            continue
        said = client_timeout(failure)
        if said is not None:
            for test_id in test_ids:
                found.setdefault(test_id, said)
    return found


def tell(join: Join, words: Words, test_id: str) -> None:
    """Hand ``join`` what the runner said of ``test_id``, if anything."""
    said = words.get(test_id)
    if said is not None:
        join.runner_said(said[0], said[1])
