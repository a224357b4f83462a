"""The rule table: every rule's example is redacted whole, and no rule fires inside a word."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cvdiag import scrub
from cvdiag.scrubbing.passes import redact
from cvdiag.scrubbing.redact import REDACTED
from cvdiag.scrubbing.rules import EMPTY_VALUES, SCHEME_PROSE, VendorRule
from cvdiag.scrubbing.vendors import VENDOR_RULES

CONTEXTS = ["{}", "key: {}", "({})", '"{}"', "x={}&y", "{}.", "\\n{}", "Authorization: {}"]


def test_the_table_covers_a_hundred_vendor_families() -> None:
    vendors = {rule.family.split("-")[0] for rule in VENDOR_RULES}
    assert len(VENDOR_RULES) >= 100
    assert len(vendors) >= 100


@pytest.mark.parametrize("rule", VENDOR_RULES, ids=lambda rule: rule.family)
def test_each_rule_redacts_its_example_whole(rule: VendorRule) -> None:
    assert re.fullmatch(rule.pattern, rule.example), "the example has the rule's shape"
    for context in CONTEXTS:
        out = scrub(context.format(rule.example))
        assert REDACTED in out
        pieces = {rule.example[i : i + 8] for i in range(len(rule.example) - 7)}
        assert [p for p in pieces if p in out] == [], (context, out)


@pytest.mark.parametrize("rule", VENDOR_RULES, ids=lambda rule: rule.family)
def test_a_prefix_inside_a_word_is_not_a_token(rule: VendorRule) -> None:
    # "task-agent" holds "sk-", "risk_agent" holds "sk_": a prefix counts at a token start only.
    glued = "word" + rule.example
    if not rule.example[0].isalnum():
        pytest.skip("the example starts with punctuation: it is its own boundary")
    # The token itself is kept whole; a token inside it at its own boundary (a JWT after a dot)
    # may still be redacted.
    assert scrub(glued).startswith(glued[:7])


# --- issue 37: the showcase's shapes, the words beside them, the rules a text wakes -----------

_EXAMPLES = [rule.example for rule in VENDOR_RULES]


@settings(max_examples=150)
@given(
    st.lists(st.sampled_from(_EXAMPLES), min_size=1, max_size=3),
    st.lists(st.text(max_size=30), min_size=4, max_size=4),
)
def test_the_rules_a_text_wakes_find_what_every_rule_finds(
    examples: list[str], fillers: list[str]
) -> None:
    # The prefilter runs only the vendor rules whose hints the text holds (FEW_RULES or fewer):
    # the same result as the whole table.
    text = "".join(
        f"{filler} {example} " for filler, example in zip(fillers, examples, strict=False)
    )
    assert redact(text) == redact(text, prefilter=False)


_LOWER = st.from_regex(r"[a-z][a-z0-9]{7,23}", fullmatch=True).filter(
    lambda word: word not in SCHEME_PROSE and word not in EMPTY_VALUES
)


@given(st.sampled_from(["Bearer", "Basic", "Token", "ApiKey"]), _LOWER)
def test_a_lower_case_token_after_a_capitalised_scheme_word_is_redacted(
    scheme: str, word: str
) -> None:
    assert scrub(f"auth {scheme} {word}") == f"auth {scheme} {REDACTED}"


@given(st.from_regex(r"[a-z]{1,20}", fullmatch=True))
def test_a_word_after_a_scheme_word_in_prose_stays(word: str) -> None:
    # Lower-case scheme words are prose ("use basic authentication"), and so are short words
    # after a capitalised one ("Bearer token expired").
    assert scrub(f"missing bearer {word} today") == f"missing bearer {word} today"
    short = word[:7]
    assert scrub(f"Bearer {short} expired") == f"Bearer {short} expired"


@given(
    st.from_regex(r"[A-Z0-9]{16}", fullmatch=True).filter(
        lambda body: any(c.isdigit() for c in body)
    ),
    st.from_regex(r"[A-Z]{1,12}", fullmatch=True),
)
def test_an_asia_name_that_runs_on_in_capitals_stays(body: str, tail: str) -> None:
    name = f"ASIA{body}{tail}"
    assert scrub(name) == name
    assert scrub(f"AKIA{body}{tail}") == REDACTED  # a long-term key id glued to text still goes
