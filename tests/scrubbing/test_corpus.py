"""The scrubber against the project's corpora and its properties: recall, precision,
idempotence at every length, bounded work, and line-safe envelopes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag import MemorySink, Settings, Tier, scrub
from cvdiag.core.context import RequestContext
from cvdiag.pipeline.emitter import Emitter
from cvdiag.schema.vocabulary import BYTE_CAPS
from cvdiag.scrubbing.redact import SCAN_LIMIT, scrub_identifier, scrub_text
from tests.support.corpus import benign, credentials

CREDENTIALS = credentials()
BENIGN = benign()
WRAPPERS = [
    "{}",
    "failed with {} (retrying)",
    '{{"detail": "{}"}}',
    "x={}&y=1",
    "<{}>",
    "'{}'",
    "error:\\n{}\\n",
    "\n{}\n",
]


def test_the_corpora_are_large() -> None:
    assert len(CREDENTIALS) >= 200
    assert len({c.family for c in CREDENTIALS}) >= 100
    assert len(BENIGN) >= 150
    assert len({category for category, _ in BENIGN}) >= 10


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_every_credential_is_redacted(wrapper: str) -> None:
    leaks = {}
    for credential in CREDENTIALS:
        out = scrub(wrapper.format(credential.text))
        if credential.leaked(out):
            leaks[credential.family] = out
    assert leaks == {}


def test_every_benign_string_is_unchanged() -> None:
    changed = {text: scrub(text) for _, text in BENIGN if scrub(text) != text}
    assert changed == {}
    assert [text for _, text in BENIGN if scrub_identifier(text) != text] == []


def test_every_credential_as_an_identifier_becomes_a_distinct_placeholder() -> None:
    ids = [scrub_identifier(f"run {c.text}") for c in CREDENTIALS]
    assert all(i.startswith("redacted-") for i in ids)
    assert len(set(ids)) == len({c.text for c in CREDENTIALS})


# --- properties -------------------------------------------------------------------------------

_SEPARATORS = st.sampled_from(
    ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r", "\n", "\r\n"]
)
_TEXT = st.lists(
    st.one_of(st.text(max_size=40), _SEPARATORS, st.sampled_from([c.text for c in CREDENTIALS])),
    max_size=12,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(_TEXT, st.integers(0, 3 * SCAN_LIMIT), st.sampled_from([64, 300, 2048, SCAN_LIMIT]))
def test_idempotent_and_bounded_at_every_length(text: str, pad: int, limit: int) -> None:
    # Padding moves the text, and the credentials in it, across every cut the scrubber makes.
    padded = "ab " * (pad // 3) + text
    once = scrub_text(padded, limit)
    assert len(once) <= max(limit, 64)
    assert scrub_text(once, limit) == once
    assert scrub(once) == once


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CREDENTIALS), st.integers(0, 600), st.sampled_from([300, 1024, 2048]))
def test_a_cut_never_leaves_a_piece_of_a_credential(
    credential: Any, offset: int, limit: int
) -> None:
    out = scrub_text("w" * offset + " " + credential.text + " tail" * 200, limit)
    assert credential.leaked(out) == []


def test_converting_a_huge_object_to_text_is_bounded() -> None:
    calls = 0

    class Item:
        def __repr__(self) -> str:
            nonlocal calls
            calls += 1
            return "item"

    error = ValueError([Item() for _ in range(100_000)])
    out = scrub(error)
    assert calls <= 64
    assert len(out) <= SCAN_LIMIT
    assert scrub({"key": [Item()] * 100_000}).startswith("{'key': [item, item")


def test_one_envelope_reads_a_bounded_part_of_huge_nested_metadata() -> None:
    converted = 0

    class Value:
        def __str__(self) -> str:
            nonlocal converted
            converted += 1
            return "value"

    sink = MemorySink()
    emitter = Emitter(Settings(enabled=True, tier=Tier.DEBUG), sinks=[sink])
    nested = {f"k{i}": [Value() for _ in range(64)] for i in range(64)}
    emitter.emit("backend.error.caught", metadata={"message_scrubbed": nested})
    assert converted < 64 * 64 // 2  # the budget stopped the walk, not the end of the data
    assert len(sink.lines[-1]) <= BYTE_CAPS[Tier.DEBUG]


@settings(max_examples=150, deadline=None)
@given(_TEXT, _TEXT, st.sampled_from(list(Tier)))
def test_every_envelope_is_one_line_whatever_its_strings_hold(
    value: str, name: str, tier: Tier
) -> None:
    sink = MemorySink()
    emitter = Emitter(Settings(enabled=True, tier=tier), sinks=[sink])
    context = RequestContext(test_id="t", trace_id="r", demo=name[:256])
    edge = {"via": value[:256], "server": name[:256]}
    emitter.emit(
        "backend.response.complete",
        metadata={"http_status": 200, "content_length": 1},
        context=context,
        edge_headers=edge,
    )
    emitter.emit(
        "backend.error.caught",
        metadata={"message_scrubbed": value, "stack_brief": [{"file": name, "line": 1}]},
        context=context,
    )
    for line in sink.lines:
        text = line.decode("utf-8")
        assert text.splitlines() == [text]
        assert len(line) <= BYTE_CAPS[tier]
        orjson.loads(line)
