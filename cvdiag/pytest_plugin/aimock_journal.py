"""``--cvdiag-aimock URL``: CopilotKit aimock's request journal fetched at the end of the session
and saved as a file every reading command reads beside the backend's log (its entries become
the mock provider's ``aimock.*`` lines: ``cvdiag.logs.aimock``).

The journal is the mock's record of every request it served (``GET /__aimock/journal``), keyed
by the ``x-test-id`` header ``instrument_httpx`` forwards, so each entry joins the test that sent
it. It is saved as aimock wrote it (a JSON array), to ``--cvdiag-aimock-journal`` or beside
``--cvdiag-log``; a mock that cannot be reached is said in one line, never a failed session.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from typing import Final

import pytest

JOURNAL_PATH: Final = "/__aimock/journal"
#: How long the fetch may take: the journal is in the mock's memory, at most a few MiB.
FETCH_TIMEOUT_S: Final = 10.0
#: The most saved: a journal past this is not one session's (aimock keeps 1000 entries).
MAX_BYTES: Final = 64 << 20
DEFAULT_NAME: Final = "aimock-journal.json"


def add_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--cvdiag-aimock",
        metavar="URL",
        default=None,
        help="CopilotKit aimock's base URL: its request journal (GET URL/__aimock/journal) is "
        "saved at the end of the session, for cvdiag to read beside the backend's log",
    )
    group.addoption(
        "--cvdiag-aimock-journal",
        metavar="PATH",
        default=None,
        help="where --cvdiag-aimock saves the journal (default: beside --cvdiag-log, else "
        f"{DEFAULT_NAME})",
    )


def configure(config: pytest.Config) -> None:
    url = config.getoption("cvdiag_aimock", default=None)
    if url and not hasattr(config, "workerinput"):  # one fetch, by the controller
        config.pluginmanager.register(Fetcher(config, str(url)), "cvdiag-aimock")


def journal_url(base: str) -> str:
    """The journal's address under aimock's base URL (a ``/v1`` suffix and slashes ignored)."""
    base = base.rstrip("/")
    base = base.removesuffix("/v1")
    return base + JOURNAL_PATH


def fetch(base: str, timeout: float = FETCH_TIMEOUT_S) -> bytes:
    """The journal's JSON as aimock sends it; ``OSError`` when it cannot be had."""
    url = journal_url(base)
    if not url.startswith(("http://", "https://")):
        raise OSError(f"not an http(s) URL: {base!r}")
    request = urllib.request.Request(url, headers={"accept": "application/json"})  # noqa: S310 (http(s) only, checked above)
    with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 (http only)
        data: bytes = answer.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise OSError(f"the journal is over {MAX_BYTES >> 20} MiB")
    if not data.lstrip().startswith(b"["):
        raise OSError("the answer is not a journal (a JSON array)")
    return data


class Fetcher:
    """Fetches and saves the journal once the session's tests have run."""

    def __init__(self, config: pytest.Config, url: str) -> None:
        self.config = config
        self.url = url
        self.said: str | None = None

    def path(self) -> str:
        config = self.config
        given = config.getoption("cvdiag_aimock_journal", default=None)
        log = config.getoption("cvdiag_log", default=None)
        if given:
            name = str(given)
        elif log:
            name = os.path.join(os.path.dirname(str(log)), DEFAULT_NAME)
        else:
            name = DEFAULT_NAME
        return os.path.normpath(config.invocation_params.dir / os.path.expanduser(name))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        where = self.path()
        try:
            data = fetch(self.url)
            os.makedirs(os.path.dirname(where) or ".", exist_ok=True)
            with open(where, "wb") as out:
                out.write(data)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            self.said = f"cvdiag: aimock's journal not saved ({journal_url(self.url)}): {exc}"
            return
        self.said = f"cvdiag: aimock's journal saved to {where}"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.said:
            terminalreporter.write_line(self.said)


__all__ = ["Fetcher", "add_options", "configure", "fetch", "journal_url"]
