"""The hand-written stories (tests/support/stories.py) are envelopes the backend could write: each
is held to the packaged schema."""

from __future__ import annotations

import pytest

from tests.schema_check import assert_valid
from tests.support.stories import STORIES


@pytest.mark.parametrize("name", sorted(STORIES))
def test_stories_are_envelopes_the_backend_could_write(name: str) -> None:
    for envelope in STORIES[name]().envelopes:
        assert_valid(envelope)
