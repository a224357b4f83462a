"""Headless Debian Chromium through Selenium, for the report page's browser tests.

The browser is the system's (``apt-get install chromium chromium-driver``; .ci/run installs it):
Selenium is handed the driver's path and the binary's, so Selenium Manager never looks for, nor
downloads, a browser of its own. The network is closed here, so Chromium is started with every
background service off (no update check, no sync, no QUIC probe): a request in its performance
log can then only be the page's own.

``require()`` skips, with one clear message, only when a piece is missing; a browser that is
installed but does not start is an error, never a skip.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
import tempfile
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

CHROMIUM: Final = Path("/usr/bin/chromium")
CHROMEDRIVER: Final = Path("/usr/bin/chromedriver")
NO_BROWSER: Final = "no browser: apt-get install chromium chromium-driver (.ci/run does)"

#: Headless, and nothing that would reach for the (closed) network on its own.
ARGUMENTS: Final = (
    "--headless=new",
    "--no-sandbox",  # as root in a container, Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # a container's /dev/shm is often too small for the renderer
)


def missing() -> list[str]:
    """What the browser tests need and this machine lacks."""
    absent = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if importlib.util.find_spec("selenium") is None:
        absent.append("selenium (pip install -e '.[dev]')")
    return absent


def require() -> None:
    """Skip the calling test (or module, at import) when the browser cannot be had."""
    absent = missing()
    if absent:
        pytest.skip(f"{NO_BROWSER}; missing: {', '.join(absent)}", allow_module_level=True)


@contextmanager
def chromium(*, javascript: bool = True, width: int = 1280, height: int = 900) -> Iterator[Chrome]:
    """A headless Chromium with a fresh profile (removed after), whose console (``browser``)
    and network events (``performance``: the DevTools ``Network.*`` messages) can be read.
    ``javascript=False`` turns the page's scripts off (WebDriver's own still run)."""
    require()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="cvdiag-chromium-")
    options = webdriver.ChromeOptions()
    for argument in ARGUMENTS:
        options.add_argument(argument)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    if not javascript:
        options.add_argument("--blink-settings=scriptEnabled=false")
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    # An alert left open must stay visible to the test (which asserts there is none), not be
    # dismissed by the driver on the next command.
    options.unhandled_prompt_behavior = "ignore"
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def log(driver: Chrome, kind: str) -> list[dict[str, Any]]:
    """The ``browser`` (console) or ``performance`` entries since the last call (reading
    empties the log)."""
    entries: list[dict[str, Any]] = driver.get_log(kind)  # type: ignore[no-untyped-call]
    return entries


def requests(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The DevTools ``Network.requestWillBeSent`` parameters among ``performance`` entries."""
    found = []
    for entry in entries:
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            found.append(message["params"])
    return found


class Png:
    """A screenshot, decoded with zlib and struct alone (8-bit RGB or RGBA, not interlaced:
    what Chromium writes), to tell a drawn page from a blank one."""

    def __init__(self, data: bytes) -> None:
        assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
        chunks: dict[bytes, list[bytes]] = {}
        at = 8
        while at < len(data):
            (size,) = struct.unpack(">I", data[at : at + 4])
            chunks.setdefault(data[at + 4 : at + 8], []).append(data[at + 8 : at + 8 + size])
            at += 12 + size
        header = chunks[b"IHDR"][0]
        self.width, self.height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
        assert depth == 8, depth
        assert colour in (2, 6), colour
        assert not interlace
        self.channels = 3 if colour == 2 else 4
        self._raw = zlib.decompress(b"".join(chunks[b"IDAT"]))

    def rows(self) -> Iterator[bytes]:
        """Each row of pixels, its filter undone (PNG's five, by the specification)."""
        step, width = self.channels, self.width * self.channels
        prior = bytearray(width)
        for y in range(self.height):
            start = y * (width + 1)
            kind, line = self._raw[start], bytearray(self._raw[start + 1 : start + 1 + width])
            if kind == 1:
                for i in range(step, width):
                    line[i] = (line[i] + line[i - step]) & 0xFF
            elif kind == 2:
                line = bytearray((a + b) & 0xFF for a, b in zip(line, prior, strict=True))
            elif kind == 3:
                for i in range(width):
                    left = line[i - step] if i >= step else 0
                    line[i] = (line[i] + (left + prior[i]) // 2) & 0xFF
            elif kind == 4:
                for i in range(width):
                    a = line[i - step] if i >= step else 0
                    b, c = prior[i], (prior[i - step] if i >= step else 0)
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[i] = (
                        line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)
                    ) & 0xFF
            yield bytes(line)
            prior = line

    def colours(self) -> tuple[int, float]:
        """How many distinct colours, and the share of pixels not of the commonest one (the
        background)."""
        counts: Counter[bytes] = Counter()
        step = self.channels
        for line in self.rows():
            counts.update(line[i : i + step] for i in range(0, len(line), step))
        total = self.width * self.height
        return len(counts), 1 - counts.most_common(1)[0][1] / total
