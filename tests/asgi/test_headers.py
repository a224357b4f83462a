"""The response head as cvdiag reads it: whatever the case of a header's name, and whichever
names are passed over unread (``response_facts`` lowercases only names of a length it reads)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cvdiag.asgi.headers import (
    CONTENT_ENCODING,
    CONTENT_LENGTH,
    CONTENT_TYPE,
    EDGE,
    response_facts,
    with_header,
)

#: Names read, names of the same lengths that are not, and names of other lengths.
NAMES = (
    CONTENT_TYPE,
    CONTENT_ENCODING,
    CONTENT_LENGTH,
    *EDGE,
    b"cf-mitigates",
    b"x-railway-edgy",
    b"servers",
    b"cache-control",
    b"x-accel-buffering",
    b"connection",
    b"x-test-id",
    b"x-test-ix",
)


def _any_case(name: bytes) -> st.SearchStrategy[bytes]:
    def cased(upper: list[bool]) -> bytes:
        return bytes(
            c - 32 if up and 97 <= c <= 122 else c for c, up in zip(name, upper, strict=True)
        )

    return st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(cased)


HEADERS = st.lists(
    st.tuples(st.sampled_from(NAMES).flatmap(_any_case), st.binary(max_size=12)), max_size=8
)


def _read_everything(headers: list[tuple[bytes, bytes]]) -> tuple[Any, Any, Any, Any]:
    """What ``response_facts`` must answer: every name lowercased, none passed over."""
    facts: dict[bytes, bytes] = {}
    edge: dict[str, bytes] = {}
    for name, value in headers:
        lower = name.lower()
        if lower in (CONTENT_TYPE, CONTENT_ENCODING, CONTENT_LENGTH):
            facts[lower] = value  # the last one, as response_facts keeps it
        elif lower in EDGE:
            edge.setdefault(EDGE[lower], value)  # the first one
    return facts.get(CONTENT_TYPE), facts.get(CONTENT_ENCODING), facts.get(CONTENT_LENGTH), edge


@given(HEADERS)
def test_every_header_read_is_found_in_any_case(headers: list[tuple[bytes, bytes]]) -> None:
    content_type, encoding, length, edge = response_facts(headers)
    expected_type, expected_encoding, expected_length, expected_edge = _read_everything(headers)
    assert (content_type, encoding, length) == (expected_type, expected_encoding, expected_length)
    found = {key: value for key, value in (edge or {}).items() if value is not None}
    assert found.keys() == expected_edge.keys()


@given(HEADERS)
def test_an_app_s_own_test_id_header_wins_in_any_case(headers: list[tuple[bytes, bytes]]) -> None:
    message = {"type": "http.response.start", "status": 200, "headers": headers}
    answered = with_header(message, b"x-test-id", b"minted")
    if any(name.lower() == b"x-test-id" for name, _ in headers):
        assert answered is message
    else:
        assert answered["headers"] == [*headers, (b"x-test-id", b"minted")]
        assert message["headers"] == headers  # the app's own message stays unchanged
