"""``ScrubFilter``, ``install_scrub_filter`` and ``scrub_log_event``: the host's own log lines
scrubbed with cvdiag's scrubber, read back as a handler (and pytest's capture) formats them."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cvdiag
from cvdiag.scrubbing.rules import fake

KEY = "sk-proj-" + fake("url", 48)


@pytest.fixture
def logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own with one handler writing to a buffer, as uvicorn's ``default`` does."""
    log = logging.getLogger(f"cvdiag.test.scrub.{id(object())}")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log, stream
    log.removeHandler(handler)
    log.filters.clear()


def raise_with_key() -> None:
    raise RuntimeError(f"upstream rejected key {KEY}")


def test_an_exception_with_a_key_is_scrubbed_in_the_traceback(
    logger: tuple[logging.Logger, io.StringIO],
) -> None:
    log, stream = logger
    cvdiag.install_scrub_filter(log)
    try:
        raise_with_key()
    except RuntimeError:
        log.exception("Exception in ASGI application")
    out = stream.getvalue()
    assert KEY not in out
    assert "RuntimeError: upstream rejected key [REDACTED]" in out
    assert "Traceback (most recent call last)" in out  # the traceback itself is kept
    assert "raise_with_key" in out


def test_without_the_filter_the_key_is_printed(logger: tuple[logging.Logger, io.StringIO]) -> None:
    # The door the filter closes is real: the same record, unfiltered, carries the key.
    log, stream = logger
    try:
        raise_with_key()
    except RuntimeError:
        log.exception("Exception in ASGI application")
    assert KEY in stream.getvalue()


def test_message_and_arguments_keep_their_format(
    logger: tuple[logging.Logger, io.StringIO],
) -> None:
    log, stream = logger
    cvdiag.install_scrub_filter(log)
    log.info("%s - %d requests, key %s", "client", 3, KEY)
    log.info("auth %(header)s for %(user)s", {"header": "Bearer secrettoken", "user": "bob"})
    log.info("plain %s %d %.1f", "words", 7, 2.5)
    log.info(f"inline key {KEY}")
    lines = stream.getvalue().splitlines()
    assert lines == [
        f"INFO {log.name}: client - 3 requests, key [REDACTED]",
        f"INFO {log.name}: auth Bearer [REDACTED] for bob",
        f"INFO {log.name}: plain words 7 2.5",
        f"INFO {log.name}: inline key [REDACTED]",
    ]


def test_arguments_without_a_secret_are_the_same_objects() -> None:
    # uvicorn's access formatter unpacks record.args: they stay a tuple of the same values.
    args = ("127.0.0.1:5000", "GET", "/chat?page=2", "1.1", 200)
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, "%s %s %s %s %d", args, None
    )
    assert cvdiag.ScrubFilter().filter(record)
    assert record.args == args
    assert all(a is b for a, b in zip(record.args, args, strict=True))


def test_pytest_capture_sees_the_scrubbed_record(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("cvdiag.test.scrub.captured")
    scrub_filter = cvdiag.install_scrub_filter(log)
    try:
        with caplog.at_level(logging.ERROR, logger=log.name):
            try:
                raise_with_key()
            except RuntimeError:
                log.exception("failed")
        assert KEY not in caplog.text
        assert "[REDACTED]" in caplog.text
    finally:
        log.removeFilter(scrub_filter)


@given(
    st.text(max_size=60).filter(lambda t: "%" not in t),
    st.sampled_from([KEY, "Bearer secrettoken", "https://user:hunter2@db.example/x"]),
    st.lists(st.one_of(st.integers(), st.text(max_size=20), st.none()), max_size=4),
)
def test_a_secret_anywhere_in_a_record_never_reaches_the_line(
    text: str, secret: str, others: list[Any]
) -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep()
    handler.addFilter(cvdiag.ScrubFilter())
    template = text + " %s" + " %r" * len(others)
    for record in (
        logging.LogRecord("x", logging.WARNING, __file__, 1, template, (secret, *others), None),
        logging.LogRecord("x", logging.WARNING, __file__, 1, f"{text} {secret}", None, None),
    ):
        handler.handle(record)
    fragment = secret.split()[-1].split(":")[-1].split("@")[0]  # the key, token, or password
    assert len(lines) == 2  # never a record dropped
    assert not [line for line in lines if fragment in line]


def test_a_record_that_fails_to_format_is_kept() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%d items", ("not a number",), None)
    assert cvdiag.ScrubFilter().filter(record)


def test_the_structlog_processor_scrubs_values_and_the_exception() -> None:
    try:
        raise_with_key()
    except RuntimeError as exc:
        event = cvdiag.scrub_log_event(
            None, "error", {"event": f"call failed: {KEY}", "status": 401, "exc_info": exc}
        )
    assert event["event"] == "call failed: [REDACTED]"
    assert event["status"] == 401
    assert "exc_info" not in event
    assert "RuntimeError: upstream rejected key [REDACTED]" in event["exception"]
    assert KEY not in repr(event)


def test_public_names() -> None:
    assert {"ScrubFilter", "install_scrub_filter", "scrub_log_event"} <= set(cvdiag.__all__)
    assert issubclass(cvdiag.ScrubFilter, logging.Filter)
