"""A runner's own words on a client that timed out: the client's timeout read from JUnit
failure texts, never the test's own timeout."""

from __future__ import annotations

import pytest

from cvdiag.layers.runner import client_timeout, words_of


@pytest.mark.parametrize(
    ("text", "timeout"),
    [
        ("apiRequestContext.post: Timeout 2000ms exceeded.\nCall log:\n  - → POST /chat", 2000.0),
        ("Error: page.waitForResponse: Timeout 1500ms exceeded.", 1500.0),
        ("Error: Timeout of 2000 ms exceeded.", 2000.0),
        ("httpx.ReadTimeout: timed out", None),
        ("E   httpx.ReadTimeout: timed out (client Timeout(2.5))", 2500.0),
        ("requests.exceptions.ReadTimeout: Read timed out. (read timeout=3.0)", 3000.0),
    ],
)
def test_a_client_timeout_is_read_with_its_timeout(text: str, timeout: float | None) -> None:
    said = client_timeout(text)
    assert said is not None
    assert said[0] == timeout


@pytest.mark.parametrize(
    "text",
    [
        "Test timeout of 30000ms exceeded.",  # the runner stopped the test: not the client
        "Error: expect(received).toBe(expected)\n Expected: 200\n Received: 500",
        "",
    ],
)
def test_other_failures_say_nothing_of_the_client(text: str) -> None:
    assert client_timeout(text) is None


def test_only_failed_attempts_count_for_their_test_ids() -> None:
    words = words_of(
        [
            (["t-1", "t-2"], "failed", "apiRequestContext.post: Timeout 2000ms exceeded."),
            (["t-3"], "passed", "apiRequestContext.post: Timeout 2000ms exceeded."),
            (["t-4"], "failed", "AssertionError"),
        ]
    )
    assert set(words) == {"t-1", "t-2"}
    assert words["t-1"][0] == 2000.0
