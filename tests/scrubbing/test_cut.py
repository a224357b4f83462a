"""Scrub before cut: wherever cvdiag shortens a value, no fragment of a credential the cut splits
is kept, not even one too short for any rule to recognise (issue 25).

The scrubber reads a seam (``SEAM``) past every cut and keeps only what the cut head and that
wider window agree on; an over-long inbound test id or slug becomes its digest placeholder. The
properties run every credential of the corpus across every cut point; the end-to-end test sends
an over-long ``x-test-id`` (and edge headers) ending in a token to a real uvicorn server and reads
the lines really written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from cvdiag import CvdiagMiddleware, MemorySink, Settings, Tier, configure
from cvdiag.schema.ids import adopt_test_id, sanitize_slug
from cvdiag.scrubbing.redact import SEAM, scrub, scrub_head, scrub_text
from cvdiag.scrubbing.rules import fake
from tests.support.corpus import Credential, credentials
from tests.support.servers import serve_uvicorn

CREDENTIALS = credentials()
#: Tokens: the credentials whose whole text is the secret (no key name or scheme around it).
TOKENS = [c for c in CREDENTIALS if c.secrets == (c.text,) and " " not in c.text]
#: What a token follows: punctuation that starts a token, never whitespace (no clean cut there).
_BEFORE = st.sampled_from(["/", "=", ":", "-", ",", ";", "!", "("])


def _no_piece(credential: Credential, out: str) -> None:
    assert credential.leaked(out) == [], (credential.family, out)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TOKENS), st.integers(0, 200), _BEFORE, st.integers(8, 300))
def test_a_head_never_keeps_a_fragment_of_a_token_it_splits(
    credential: Credential, offset: int, before: str, keep: int
) -> None:
    # The token starts anywhere around the cut, glued to the text before it by punctuation
    # (where the scrubber recognises it so glued even uncut: ``-key-…`` is no Mailgun key).
    assume(credential.leaked(scrub("w" * offset + before + credential.text + "/tail")) == [])
    text = "w" * offset + before + credential.text + "/tail" * 50
    _no_piece(credential, scrub_head(text, keep))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CREDENTIALS), st.integers(0, 700), _BEFORE, st.sampled_from([300, 1024]))
def test_a_marked_cut_never_keeps_a_fragment_without_whitespace(
    credential: Credential, offset: int, before: str, limit: int
) -> None:
    # No whitespace in the padding: the scrubber's cut cannot fall back to a word's end.
    # The property is about the cut: a credential the scrubber does not recognise glued this
    # way even uncut (``-password x`` is no netrc line) is the scrubber's, not the cut's.
    assume(credential.leaked(scrub("w" * offset + before + credential.text + "/tail")) == [])
    text = "w" * offset + before + credential.text + "/tail" * 400
    out = scrub_text(text, limit)
    _no_piece(credential, out)
    assert scrub_text(out, limit) == out  # still idempotent


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(TOKENS), st.integers(0, 64))
def test_an_object_whose_text_is_cut_keeps_no_fragment(credential: Credential, pad: int) -> None:
    class Opaque:
        def __str__(self) -> str:
            return "x" * (200 + pad) + "/" + credential.text + "/" * 4000

    _no_piece(credential, scrub(ValueError(Opaque()), limit=256))
    _no_piece(credential, scrub(ValueError([Opaque()]), limit=256))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(TOKENS), st.integers(0, 1100), st.sampled_from(["!", " ", "%", "/"]))
def test_an_over_long_test_id_or_slug_keeps_no_fragment(
    credential: Credential, junk: int, filler: str
) -> None:
    # Characters a join key or slug drops, before the token: the id shown comes from the token.
    raw = filler * junk + credential.text
    for value in (raw, raw.encode("latin-1")):
        _no_piece(credential, adopt_test_id(value))
        _no_piece(credential, sanitize_slug(value) or "")


def test_over_long_ids_stay_distinct_and_stable() -> None:
    a = "run-" + "a" * 2000 + "-1"
    b = "run-" + "a" * 2000 + "-2"
    assert adopt_test_id(a) != adopt_test_id(b)
    assert adopt_test_id(a) == adopt_test_id(a.encode()) == adopt_test_id(a)
    assert adopt_test_id(a).startswith("redacted-")
    assert sanitize_slug(a) != sanitize_slug(b)
    assert adopt_test_id("d4-task-agent-run-7") == "d4-task-agent-run-7"


def test_the_seam_holds_what_every_rule_needs() -> None:
    # A URL's user:password@ is the longest run a rule needs to see; at its bounds it is seen
    # whole within the seam, so one split by a cut just before its '@' is still dropped.
    url = "https://" + fake("an", 256) + ":" + fake("an", 256) + "@host/"
    assert len(url) < SEAM
    for keep in (12, 200, 400, 515):
        assert fake("an", 256)[-8:] not in scrub_head("x " + url, keep)


# --- through the real doors --------------------------------------------------------------------


async def plain(request: Request) -> Response:
    return PlainTextResponse("ok")


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, MemorySink]]:
    sink = MemorySink(maxlen=None)
    configure(
        Settings(enabled=True, tier=Tier.DEBUG, debug_max_envelopes=10**9, debug_max_seconds=1e9),
        sinks=[sink],
    )
    app = Starlette(routes=[Route("/plain", plain)])
    app.add_middleware(CvdiagMiddleware)
    try:
        with serve_uvicorn(app) as url:
            yield url, sink
    finally:
        configure(Settings(), sinks=[MemorySink()])


def _lines(sink: MemorySink, since: int) -> str:
    return b"\n".join(list(sink.lines)[since:]).decode("utf-8")


_TERMINALS = (b'"backend.response.complete"', b'"backend.sse.aborted"')


def _settled(sink: MemorySink) -> int:
    """Where the sink stands once every request so far has its terminal: a client has its
    response before the server writes the terminal, so an earlier test's last line can land
    after this test's mark unless the mark waits for it."""
    for _ in range(500):
        lines = list(sink.lines)
        ingresses = sum(b'"backend.request.ingress"' in line for line in lines)
        terminals = sum(any(t in line for t in _TERMINALS) for line in lines)
        if terminals >= ingresses:
            return len(lines)
        time.sleep(0.01)
    raise AssertionError(f"{ingresses - terminals} request(s) never wrote a terminal")


@pytest.mark.parametrize("junk", [1010, 1024 - 20, 120, 250])
def test_an_over_long_test_id_ending_in_a_token_leaks_nothing(
    server: tuple[str, MemorySink], junk: int
) -> None:
    url, sink = server
    leaks: dict[str, list[str]] = {}
    with httpx.Client(base_url=url, timeout=10) as client:
        for credential in TOKENS:
            since = len(sink.lines)
            header = "!" * junk + credential.text
            edge = "a" * junk + "/" + credential.text
            response = client.get(
                "/plain",
                headers={"x-test-id": header, "x-aimock-context": header, "via": edge},
            )
            assert response.status_code == 200
            written = _lines(sink, since)
            assert '"backend.request.ingress"' in written  # the doors were really knocked on
            found = credential.leaked(written)
            if found:
                leaks[credential.family] = found
    assert leaks == {}


def test_a_long_test_id_still_joins(server: tuple[str, MemorySink]) -> None:
    url, sink = server
    since = _settled(sink)
    test_id = "d4-" + "long-run-" * 20
    with httpx.Client(base_url=url, timeout=10) as client:
        client.get("/plain", headers={"x-test-id": test_id})
    envelopes: list[dict[str, Any]] = [orjson.loads(line) for line in list(sink.lines)[since:]]
    assert {e["test_id"] for e in envelopes} == {test_id[:128]}
