from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from hypothesis import given
from hypothesis import strategies as st

from cvdiag.schema.ids import adopt_test_id, new_span_id, new_uuid7, sanitize_slug, uuid7_text

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
JOIN_KEY = re.compile(r"^[a-z0-9._-]{1,128}$")
SLUG = re.compile(r"^[a-z][a-z0-9-]{0,63}$")


def test_minted_ids_are_time_ordered_uuid7() -> None:
    ids = [new_uuid7() for _ in range(100)]
    assert all(UUID7.match(i) for i in ids)
    assert len(set(ids)) == 100
    assert uuid.UUID(ids[0]).version == 7


@given(
    ms=st.integers(0, 2**48 - 1), counter=st.integers(0, 2**12 - 1), rand=st.integers(0, 2**62 - 1)
)
def test_an_id_is_formatted_byte_by_byte_as_the_uuid_of_its_bits(
    ms: int, counter: int, rand: int
) -> None:
    """Each byte is formatted from its own bits: the text is the standard library's for the
    128-bit value RFC 9562 lays out (its edges included: all zeros, all ones)."""
    value = (ms << 80) | (0x7 << 76) | (counter << 64) | (0b10 << 62) | rand
    text = uuid7_text(ms, counter, rand)
    assert text == str(uuid.UUID(int=value))
    assert UUID7.match(text)


def _stamp_ms(value: str) -> int:
    return int(value.replace("-", "")[:12], 16)


def test_minted_ids_keep_to_the_wall_clock_at_any_rate() -> None:
    # uuid6 2025.0.1 ran one millisecond ahead per id minted in the same millisecond: 200,000
    # ids in a second ended minutes in the future. RFC 9562's counter keeps the stamp true.
    before = time.time_ns() // 1_000_000
    ids = [new_uuid7() for _ in range(200_000)]
    after = time.time_ns() // 1_000_000
    assert before <= _stamp_ms(ids[0])
    assert _stamp_ms(ids[-1]) <= after + 1000
    assert ids == sorted(ids)  # time-ordered, within a millisecond too
    assert len(set(ids)) == len(ids)
    parsed = uuid.UUID(ids[-1])
    assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)


def test_minted_ids_are_unique_across_threads() -> None:
    with ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(lambda _: [new_uuid7() for _ in range(20_000)], range(4)))
    minted = [i for batch in batches for i in batch]
    assert len(set(minted)) == len(minted)
    assert all(batch == sorted(batch) for batch in batches)


def test_span_ids() -> None:
    spans = {new_span_id() for _ in range(1000)}
    assert len(spans) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{16}", s) and s != "0" * 16 for s in spans)


def test_uuid7_adopted_as_is_lowercased() -> None:
    raw = "01A20162-2DC3-73C2-BD91-A4BC72607C4D"
    assert adopt_test_id(f"  {raw} ") == raw.lower()


def test_harness_ids_become_join_keys() -> None:
    assert adopt_test_id("d4-Agentic-Chat-run7") == "d4-agentic-chat-run7"
    assert adopt_test_id(b"abc/def ghi\x00jkl") == "abcdefghijkl"
    assert adopt_test_id("x" * 1000) == "x" * 128


def test_nothing_usable_mints() -> None:
    for raw in (None, "", "   ", "!!!", "\u00e9\u00e8", b"\xff\xfe"):
        assert UUID7.match(adopt_test_id(raw))


def test_a_credential_sent_as_test_id_is_scrubbed() -> None:
    adopted = adopt_test_id("sk-test-12345")
    assert "sk-test-12345" not in adopted
    assert re.fullmatch(r"redacted-[0-9a-f]{16}", adopted)
    assert adopt_test_id("sk-test-12345") == adopted  # stable: the same id always joins


def test_ids_holding_secrets_stay_distinct() -> None:
    # Scrubbing in place made both "d4-taredacted": two tests' envelopes sharing one join key.
    secret = "sk-proj-" + "Ab1" * 10
    ids = [f"d4-{secret}-run-{n}" for n in range(50)]
    adopted = {adopt_test_id(i) for i in ids}
    assert len(adopted) == 50
    assert not any("sk-proj" in a or "ab1ab1ab1" in a for a in adopted)


def test_identifiers_that_look_like_secret_prefixes_are_kept() -> None:
    for raw in ("d4-task-agent-run-7", "d4-task-agent-run-8", "risk-assessment-2024", "kiosk-1"):
        assert adopt_test_id(raw) == raw
        assert sanitize_slug(raw) == raw.rstrip("0123456789-") or sanitize_slug(raw) == raw
    assert adopt_test_id("d4-task-agent-run-7") != adopt_test_id("d4-task-agent-run-8")


def test_a_slug_holding_a_secret_becomes_a_distinct_placeholder() -> None:
    one = sanitize_slug("ghp_" + "Ab1" * 12)
    two = sanitize_slug("ghp_" + "Ab2" * 12)
    assert one is not None
    assert two is not None
    assert one != two
    assert SLUG.match(one)
    assert SLUG.match(two)
    assert one.startswith("redacted-")


@given(st.one_of(st.none(), st.text(max_size=300), st.binary(max_size=300)))
def test_adoption_always_yields_a_join_key(raw: str | bytes | None) -> None:
    adopted = adopt_test_id(raw)
    assert JOIN_KEY.match(adopted)


@given(st.uuids(version=4).map(str))
def test_uuid4_is_not_taken_as_uuid7_but_still_joins(raw: str) -> None:
    assert adopt_test_id(raw) == raw  # hex and dashes survive sanitizing unchanged


def test_slugs() -> None:
    assert sanitize_slug("Agentic Chat") == "agentic-chat"
    assert sanitize_slug("  langgraph-python ") == "langgraph-python"
    assert sanitize_slug("123abc") == "abc"
    assert sanitize_slug("") is None
    assert sanitize_slug("---") is None
    assert sanitize_slug(None) is None


@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_slug_is_valid_or_none(raw: str | bytes) -> None:
    slug = sanitize_slug(raw)
    assert slug is None or SLUG.match(slug)
