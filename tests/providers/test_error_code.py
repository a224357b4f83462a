"""The provider's error code on ``backend.llm.call.response``: a closed set of characters,
bounded, whatever the body holds; and which codes and messages say a mock matched no fixture."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from cvdiag.diagnosis.mock import is_mismatch
from cvdiag.providers.usage import ERROR_MESSAGE_MAX, ResponseFacts, error_detail

CODE = re.compile(r"[a-z0-9_.-]{1,64}")


def test_the_code_of_each_shape_of_error() -> None:
    assert error_detail(
        {"error": {"code": "no_fixture_match", "message": "No fixture matched"}}
    ) == (
        "no_fixture_match",
        "No fixture matched",
    )
    assert error_detail({"error": {"type": "Overloaded_Error"}}) == ("overloaded_error", None)
    failed: dict[str, object] = {
        "type": "response.failed",
        "response": {"error": {"code": "server_error"}},
    }
    assert error_detail(failed) == ("server_error", None)
    assert error_detail({"type": "error", "code": "rate_limit_exceeded"}) == (
        "rate_limit_exceeded",
        None,
    )
    # A code with other characters (a space, a key, markup) is not written at all.
    assert error_detail({"error": {"code": "sk-live key=abc def", "type": "<b>"}}) == (None, None)


@given(st.dictionaries(st.sampled_from(["code", "type", "message"]), st.text(max_size=300)))
def test_whatever_the_body_says_the_code_is_closed_and_bounded(error: dict[str, str]) -> None:
    facts = ResponseFacts()
    facts.absorb({"error": error})
    if facts.error_code is not None:
        assert CODE.fullmatch(facts.error_code)
    if facts.error_message is not None:
        assert len(facts.error_message) <= ERROR_MESSAGE_MAX


def test_which_codes_and_messages_are_a_mock_without_a_fixture() -> None:
    assert is_mismatch("no_fixture_match", None)
    assert is_mismatch("NO_FIXTURE_MATCHED", None)
    assert is_mismatch(None, "Error code: 404 - {'error': {'message': 'No fixture matched'}}")
    assert not is_mismatch("not_found", "The model does not exist")
    assert not is_mismatch(None, None)
