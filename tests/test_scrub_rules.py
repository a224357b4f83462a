"""The rule table: every rule's example is redacted whole, and no rule fires inside a word."""

from __future__ import annotations

import re

import pytest

from cvdiag import scrub
from cvdiag.scrubbing.redact import REDACTED
from cvdiag.scrubbing.rules import VendorRule
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
