"""Issue 26: the page ``cvdiag report`` writes, opened in a real browser (headless Chromium).

Every page here is written by the real command (``python -m cvdiag report``, a subprocess) from
a log written by real servers: ``cvdiag demo`` (uvicorn, SSE and WebSocket conversations), the
Starlette SSE example with a client that hangs up mid-stream, the WebSocket chat example with a
client that drops its connection, an agent-framework recipe of docs/frameworks.md when its extra
is installed; and a hostile log, hand-written with the suite's envelope factory, whose test ids,
paths, error messages and metadata are markup, URLs and control characters.

What the page is held to: it loads without a console error and without any request but its own
file; every test id is listed with the class ``cvdiag classify`` gives; each drawn waterfall has
a lane per request, agent scope and LLM call of the log; a hostile log runs nothing and shows its
strings as text; filtering, keys and zoom work; a desktop and a phone screenshot are drawn; and
without JavaScript the page is whole, its controls hidden.

One browser with scripts and one without serve the whole module (each start costs a second).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import runpy
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import httpx
import pytest

from cvdiag import FileSink, MemorySink, Settings, Tier, configure, flush
from tests.support import browser
from tests.support.cli import cvdiag
from tests.support.servers import serve_uvicorn
from tests.support.stories import Story, write_log

if TYPE_CHECKING:
    from selenium.webdriver import Chrome
    from selenium.webdriver.remote.webelement import WebElement

pytestmark = pytest.mark.browser

ROOT: Final = Path(__file__).resolve().parents[2]
EXAMPLES: Final = ROOT / "examples"
TERMINALS: Final = ("backend.response.complete", "backend.sse.aborted")
#: The logs each page is written from (``Case``), in the order the tests take them.
NAMES: Final = ("demo", "sse", "websocket", "framework", "hostile")

#: Strings a hostile log carries. Each would run script were it written into the page as markup
#: or followed as a link; none is longer than the shortest field it is put in is shown (40).
HOSTILE: Final = {
    "script": "</script><script>window.__pwned=1</script>",
    "attribute": '"><img src=x onerror="window.__pwned=1">',
    "url": "javascript:window.__pwned=1",
    "svg": "'><svg/onload=alert(1)>",
}
#: Control characters and a right-to-left override: the page shows each as a ``\\u`` escape
#: (a NUL too, in the fields that can carry one: no command line can hold it in a test id).
CONTROLS: Final = "\x1b[31m\x07\u202e\x7f"


def shown(value: str) -> str:
    """``value`` as the page must show it: the invisible characters this module uses, escaped."""
    return re.sub("[\x00\x07\x1b\x7f\u202e]", lambda m: f"\\u{ord(m.group()):04x}", value)


Envelope = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Case:
    """A log, the page ``cvdiag report`` wrote from it, and how it was asked to."""

    name: str
    log: Path
    page: Path
    #: ``--first-token-timeout`` given to report and classify alike (None: the default).
    timeout: float | None
    #: ``--all``: every test id drawn, not only the failed ones.
    every: bool

    @functools.cached_property
    def envelopes(self) -> list[Envelope]:
        """The log's envelopes, read here with json (not with cvdiag's reader)."""
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line[len("CVDIAG ") :]) for line in lines if line.startswith("CVDIAG {")]

    @functools.cached_property
    def test_ids(self) -> set[str]:
        return {e["test_id"] for e in self.envelopes if not e["boundary"].startswith("cvdiag.")}

    @functools.cached_property
    def by_shown(self) -> dict[str, str]:
        """Each test id by the form the page shows (and keeps in ``data-id``)."""
        return {shown(test_id): test_id for test_id in self.test_ids}

    def options(self) -> list[str]:
        return [] if self.timeout is None else ["--first-token-timeout", f"{self.timeout:g}"]

    @functools.cached_property
    def classes(self) -> dict[str, str]:
        """Each test id's class, by ``cvdiag classify ID LOG --json`` as a user runs it."""
        found = {}
        for test_id in sorted(self.test_ids):
            if not re.fullmatch(r"[a-z0-9._-]{1,128}", test_id):
                # The command normalises an id as the middleware adopts one, so it can name only
                # ids cvdiag writes; a hostile log has others, which the report lists: classified
                # as the command does, through the library.
                found[test_id] = self._classify(test_id)
                continue
            done = cvdiag("classify", test_id, str(self.log), "--json", *self.options())
            assert done.returncode == 0, (test_id, done.stderr)
            found[test_id] = json.loads(done.stdout)["flap_class"]
        return found

    def _classify(self, test_id: str) -> str:
        from cvdiag.diagnosis import classify
        from cvdiag.logs.reading import Input, records

        # Every envelope, then this id's: the reader's own filter searches for the id's bytes
        # as given, which a JSON-escaped id (a quote, a control character) never matches.
        with self.log.open("rb") as file:
            every = records(Input(str(self.log), file), lambda problem: None)
            read = [record for record in every if record.envelope["test_id"] == test_id]
        timeout = classify.DEFAULT_FIRST_TOKEN_TIMEOUT if self.timeout is None else self.timeout
        verdict = classify.classify(classify.gather(test_id, read), first_token_timeout=timeout)
        return verdict.flap_class

    def spans(self, test_id: str, opened: str, closed: tuple[str, ...]) -> int:
        """How many spans of a kind the test id has: those ``opened`` (their own span) and those
        only ``closed`` (an end hangs under the span it ends)."""
        mine = [e for e in self.envelopes if e["test_id"] == test_id]
        return len(
            {e["span_id"] for e in mine if e["boundary"] == opened}
            | {e["parent_span_id"] or e["span_id"] for e in mine if e["boundary"] in closed}
        )

    @property
    def url(self) -> str:
        return self.page.as_uri()


# --- the logs, from real servers -------------------------------------------------------------


@contextlib.contextmanager
def writing(log: Path) -> Iterator[MemorySink]:
    """cvdiag on, at the debug tier, into ``log``; the memory sink says when requests ended."""
    memory = MemorySink()
    configure(Settings(enabled=True, tier=Tier.DEBUG), sinks=[FileSink(log), memory])
    try:
        yield memory
        flush()
    finally:
        configure(Settings(), sinks=[MemorySink()])


def wait_ended(memory: MemorySink, test_ids: list[str]) -> None:
    """A server finishes a request after its client has gone: wait until each test id has a
    terminal, and every agent scope and LLM call it opened has closed."""
    pairs = (
        ("backend.agent.enter", "backend.agent.exit"),
        ("backend.llm.call.start", "backend.llm.call.response"),
    )
    deadline = time.monotonic() + 15
    while True:
        envelopes = list(memory.envelopes)
        left = []
        for test_id in test_ids:
            seen = [e["boundary"] for e in envelopes if e["test_id"] == test_id]
            if not set(TERMINALS) & set(seen) or any(
                seen.count(a) != seen.count(b) for a, b in pairs
            ):
                left.append(test_id)
        if not left:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"requests never ended: {left}")
        time.sleep(0.02)


def example(name: str, **env: str) -> Any:
    """``examples/<name>/app.py``'s app, imported afresh with ``env`` set (read at import)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        return runpy.run_path(str(EXAMPLES / name / "app.py"), run_name=f"example_{name}")["app"]


def demo_log(log: Path) -> None:
    """``cvdiag demo`` as a user runs it: its own uvicorn, five SSE and WebSocket chats."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_")}
    done = subprocess.run(
        [sys.executable, "-m", "cvdiag", "demo", "--log", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=log.parent,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr


def sse_log(log: Path) -> None:
    """The Starlette SSE example: a whole run, a test id with two runs, and a client that hangs
    up after three events (the server's stream is cancelled mid-answer)."""
    app = example("starlette_sse", FAKE_LLM_TOKEN_DELAY="0.05")
    with writing(log) as memory, serve_uvicorn(app) as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            for test_id in ("sse-whole-run", "sse-two-runs", "sse-two-runs"):
                reply = client.get("/agent", headers={"x-test-id": test_id})
                assert reply.status_code == 200
                assert "RUN_FINISHED" in reply.text
            with client.stream("GET", "/agent", headers={"x-test-id": "sse-hung-up"}) as reply:
                events = 0
                for line in reply.iter_lines():
                    events += line.startswith("data:")
                    if events == 3:
                        break  # leaving the block closes the connection mid-stream
        wait_ended(memory, ["sse-whole-run", "sse-two-runs", "sse-hung-up"])


def websocket_log(log: Path) -> None:
    """The WebSocket chat example: two turns then a normal close, and a connection dropped
    (no close frame) after the first token."""
    import socket

    from websockets.sync.client import connect

    app = example("websocket_chat", FAKE_LLM_SECONDS="0.02")
    with writing(log) as memory, serve_uvicorn(app) as base:
        url = base.replace("http://", "ws://") + "/ws"
        with connect(url, additional_headers={"x-test-id": "ws-two-turns"}) as ws:
            for prompt in ("hello", "and again"):
                ws.send(prompt)
                while json.loads(ws.recv(timeout=10))["type"] != "TEXT_MESSAGE_END":
                    pass
        with connect(url, additional_headers={"x-test-id": "ws-dropped"}) as ws:
            ws.send("hello")
            ws.recv(timeout=10)  # the first token: the agent is mid-answer
            ws.socket.shutdown(socket.SHUT_RDWR)
            ws.socket.close()
        wait_ended(memory, ["ws-two-turns", "ws-dropped"])


#: Each recipe of docs/frameworks.md: its route and its request body.
FRAMEWORK_ROUTES: Final[dict[str, tuple[str, Callable[[str], dict[str, Any]]]]] = {
    "pydantic-ai": ("/agui", lambda text: _agui(text)),
    "langgraph": ("/agui", lambda text: _agui(text)),
    "openai-agents": ("/chat", lambda text: {"message": text}),
}


def _agui(text: str) -> dict[str, Any]:
    from tests.e2e.test_frameworks import agui_body

    return agui_body(text)


def framework_log(log: Path, scratch: Path) -> None:
    """The first recipe of docs/frameworks.md whose extra is installed, run as written against
    the local fake provider: two turns answered, one the provider refuses (HTTP 500)."""
    from examples.fake_provider import FakeProvider, serve_fake_provider
    from tests.e2e.test_frameworks import RECIPES, missing
    from tests.e2e.test_frameworks import load as load_recipe

    # The agent frameworks' recipes (docs/frameworks.md also has job queues' recipes, which
    # answer a route with no agent of their own).
    agents = [name for name in RECIPES if name in FRAMEWORK_ROUTES]
    usable = [name for name in agents if not missing(name)]
    if not usable:
        absent = sorted({dist for name in agents for dist in missing(name)})
        pytest.skip(
            f"no agent-framework recipe installed ({', '.join(absent)} missing):"
            " pip install -e '.[frameworks]'"
        )
    recipe = usable[0]
    route, body = FRAMEWORK_ROUTES[recipe]
    provider = FakeProvider(reply="Hello from the fake provider")
    with contextlib.ExitStack() as stack:
        base_url = stack.enter_context(serve_fake_provider(provider))
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("OPENAI_BASE_URL", f"{base_url}/v1")
        patch.setenv("OPENAI_API_KEY", "sk-test-report-browser")
        patch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
        patch.setenv("OPENAI_MAX_RETRIES", "0")
        app = load_recipe(recipe, scratch)["app"]
        memory = stack.enter_context(writing(log))
        url = stack.enter_context(serve_uvicorn(app)) + route
        turns = {"fw-answered-1": "hi", "fw-answered-2": "hi", "fw-refused": "hi [fake:500]"}

        def post(test_id: str) -> int:
            with httpx.Client(timeout=60) as http:
                headers = {"x-test-id": test_id, "accept": "text/event-stream"}
                return http.post(url, json=body(turns[test_id]), headers=headers).status_code

        with ThreadPoolExecutor(len(turns)) as pool:
            statuses = list(pool.map(post, turns))
        assert statuses[:2] == [200, 200], statuses
        wait_ended(memory, list(turns))


def hostile_log(log: Path) -> None:
    """Test ids, paths, error messages and metadata made of markup, ``javascript:`` URLs and
    control characters, as CVDIAG lines a reader reads (the suite's envelope factory)."""
    stories = []
    for index, (name, value) in enumerate([*HOSTILE.items(), ("controls", CONTROLS)]):
        story = Story(f"h-{name}-{value}-end", start_ms=index * 100.0)
        story.ingress()
        story.envelopes[-1]["metadata"]["path"] = f"/{value}"
        agent = story.agent(1, name=value)
        call = story.llm_start(2, agent)
        story.envelopes[-1]["metadata"]["model"] = value
        if index % 2:  # the app failed: its error message carries the string, and a NUL
            story.error(3, agent, exception_type=f"E{index}")
            story.envelopes[-1]["metadata"]["message_scrubbed"] = f"{value}\x00{CONTROLS}"
            story.llm_response(4, call, 2, outcome="err", error_class=value)
            story.agent_exit(5, 1, agent, "err")
            story.complete(6, status=500, events=0, outcome="err")
        else:
            story.llm_response(20, call, 18)
            story.first_byte(21)
            story.events(21, 3)
            story.agent_exit(25, 1, agent)
            story.complete(26)
        stories.append(story)
    write_log(log, stories)


def lone_log(log: Path) -> None:
    """One failed test id whose id JSON escapes (a quote, a control character)."""
    story = Story('h-lone-"quoted"-\x1b-end')
    story.ingress()
    agent = story.agent(1)
    story.error(3, agent)
    story.agent_exit(4, 1, agent, "err")
    story.complete(5, status=500, events=0, outcome="err")
    write_log(log, [story])


@dataclasses.dataclass(frozen=True)
class Source:
    write: Callable[[Path, Path], None]
    timeout: float | None = None
    every: bool = True


SOURCES: Final = {
    # The demo's slow call is slow under its own 1 s first-token timeout; only failed ones drawn.
    "demo": Source(lambda log, scratch: demo_log(log), timeout=1.0, every=False),
    "sse": Source(lambda log, scratch: sse_log(log)),
    "websocket": Source(lambda log, scratch: websocket_log(log)),
    "framework": Source(framework_log),
    "hostile": Source(lambda log, scratch: hostile_log(log)),
    "lone": Source(lambda log, scratch: lone_log(log)),
}


class Cases:
    """Each case's log and page, written the first time a test asks for it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._done: dict[str, Case] = {}
        #: Why a case cannot be had here (a framework not installed): said once per test.
        self._skipped: dict[str, str] = {}

    def __getitem__(self, name: str) -> Case:
        if name in self._skipped:
            pytest.skip(self._skipped[name])
        if name not in self._done:
            source = SOURCES[name]
            scratch = self.folder / name
            scratch.mkdir()
            log = scratch / f"{name}.log"
            try:
                source.write(log, scratch)
            except pytest.skip.Exception as skipped:
                self._skipped[name] = skipped.msg or "skipped"
                raise
            case = Case(name, log, scratch / f"{name}.html", source.timeout, source.every)
            done = cvdiag(
                "report",
                "-o",
                str(case.page),
                *(["--all"] if case.every else []),
                *case.options(),
                str(log),
            )
            assert done.returncode == 0, done.stderr
            assert f"report: wrote {case.page}" in done.stderr
            self._done[name] = case
        return self._done[name]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Cases:
    browser.require()  # no log is worth writing for a browser that is not there
    return Cases(tmp_path_factory.mktemp("report-browser"))


@pytest.fixture(scope="module")
def chrome() -> Iterator[Chrome]:
    with browser.chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def chrome_without_scripts() -> Iterator[Chrome]:
    with browser.chromium(javascript=False) as driver:
        yield driver


# --- reading the page -------------------------------------------------------------------------


def load(driver: Chrome, case: Case) -> None:
    """Open the page afresh, and hold it to a clean load: no console error (a script error, or
    a style or script the page's policy refused, is one), and no request but its own file."""
    driver.get("about:blank")
    browser.log(driver, "browser")
    browser.log(driver, "performance")  # what came before (the start page) is not the page's
    driver.get(case.url)
    errors = [e for e in browser.log(driver, "browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    mine = []
    for request in browser.requests(browser.log(driver, "performance")):
        url = request.get("request", request).get("url", "")
        own = request.get("documentURL", "").split("#")[0] == case.url
        if own or url.split(":")[0] in ("http", "https", "ws", "wss", "ftp"):
            mine.append(url)
    assert mine == [case.url], mine


def script(driver: Chrome, source: str, *args: Any) -> Any:
    return driver.execute_script(source, *args)


def rows(driver: Chrome) -> list[WebElement]:
    return driver.find_elements("css selector", "table.tests tbody tr")


def visible_ids(driver: Chrome) -> list[str]:
    return [row.get_attribute("data-id") or "" for row in rows(driver) if row.is_displayed()]


def press(driver: Chrome, *keys: str) -> None:
    """Keys typed where the focus is, as a person types them."""
    from selenium.webdriver.common.action_chains import ActionChains

    for key in keys:
        ActionChains(driver).send_keys(key).perform()


def selected(driver: Chrome) -> int:
    """The index (among all rows) of the selected overview row, -1 if none."""
    found: int = script(
        driver,
        "return Array.prototype.indexOf.call("
        "document.querySelectorAll('table.tests tbody tr'),"
        " document.querySelector('table.tests tbody tr.selected'))",
    )
    return found


def zoomed(driver: Chrome, section: str) -> str | None:
    box = driver.find_element("css selector", f"section#{section} .waterfall")
    return box.get_attribute("data-zoomed")


def view_boxes(driver: Chrome, section: str) -> set[str]:
    tracks = driver.find_elements("css selector", f"section#{section} .waterfall svg.track")
    return {track.get_dom_attribute("viewBox") or "" for track in tracks}


# --- every page ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_page_loads_clean_and_lists_every_test_id(
    cases: Cases, chrome: Chrome, name: str
) -> None:
    case = cases[name]
    load(chrome, case)
    listed = [
        (row.get_attribute("data-id"), row.get_attribute("data-class")) for row in rows(chrome)
    ]
    assert sorted(test_id or "" for test_id, _ in listed) == sorted(case.by_shown)
    # Failed first: no failed row after a healthy one.
    kinds = [flap_class == "healthy" for _, flap_class in listed]
    assert kinds == sorted(kinds), listed
    sections = chrome.find_elements("css selector", "section.story")
    assert script(chrome, "return document.documentElement.getAttribute('data-ready')") == str(
        len(sections)
    )
    drawn = case.test_ids if case.every else {t for t, c in case.classes.items() if c != "healthy"}
    assert len(sections) == len(drawn)


@pytest.mark.parametrize("name", NAMES)
def test_each_test_id_has_the_class_cvdiag_classify_gives(
    cases: Cases, chrome: Chrome, name: str
) -> None:
    case = cases[name]
    load(chrome, case)
    classes = case.classes
    if name != "hostile":  # the hostile log's classes are chosen; the servers' must be shown
        assert set(classes.values()) - {"healthy"}, f"no failed test id in the {name} log"
    counts: dict[str, int] = {}
    for row in rows(chrome):
        test_id = case.by_shown[row.get_attribute("data-id") or ""]
        flap_class = classes[test_id]
        counts[flap_class] = counts.get(flap_class, 0) + 1
        assert row.get_attribute("data-class") == flap_class, test_id
        assert row.find_element("css selector", "td:first-child").text.endswith(flap_class)
        links = row.find_elements("css selector", "td.id a")
        if flap_class != "healthy" or case.every:  # drawn: its link opens its section
            (link,) = links
            section = chrome.find_element("css selector", link.get_attribute("hash") or "")
            assert section.get_attribute("data-class") == flap_class
            assert section.get_attribute("aria-label") == shown(test_id)
        else:
            assert not links, test_id
    chips = {
        chip.get_attribute("data-class"): int(chip.find_element("css selector", "b").text)
        for chip in chrome.find_elements("css selector", ".chip")
    }
    assert chips == counts


@pytest.mark.parametrize("name", NAMES)
def test_each_waterfall_has_a_lane_per_request_agent_scope_and_llm_call(
    cases: Cases, chrome: Chrome, name: str
) -> None:
    case = cases[name]
    load(chrome, case)
    sections = chrome.find_elements("css selector", "section.story")
    assert sections
    for section in sections:
        test_id = case.by_shown[section.get_attribute("aria-label") or ""]

        def lanes(kind: str, section: WebElement = section) -> int:
            found = section.find_elements("css selector", f".waterfall .lane.k-{kind}")
            tracks = section.find_elements("css selector", f".waterfall .lane.k-{kind} svg.track")
            assert len(tracks) == len(found)  # each lane is drawn
            return len(found)

        requests = case.spans(test_id, "backend.request.ingress", TERMINALS)
        calls = case.spans(test_id, "backend.llm.call.start", ("backend.llm.call.response",))
        agents = case.spans(test_id, "backend.agent.enter", ())
        assert requests >= 1, test_id
        assert (lanes("request"), lanes("agent"), lanes("call")) == (requests, agents, calls), (
            test_id
        )
        # A request a client left is drawn as aborted.
        aborted = any(
            e["test_id"] == test_id and e["boundary"] == "backend.sse.aborted"
            for e in case.envelopes
        )
        marks = section.find_elements("css selector", ".lane.k-request .name small.o-aborted")
        assert bool(marks) == aborted, test_id


@pytest.mark.parametrize("name", NAMES)
def test_without_javascript_the_page_is_whole_and_its_controls_hidden(
    cases: Cases, chrome_without_scripts: Chrome, name: str
) -> None:
    case = cases[name]
    driver = chrome_without_scripts
    load(driver, case)
    # The page's script did not run (WebDriver's own, which reads the page, still does).
    assert script(driver, "return document.documentElement.hasAttribute('data-ready')") is False
    assert sorted(row.get_attribute("data-id") or "" for row in rows(driver)) == sorted(
        case.by_shown
    )
    assert all(row.is_displayed() for row in rows(driver))
    sections = driver.find_elements("css selector", "section.story")
    assert sections
    for section in sections:
        assert section.find_elements("css selector", ".waterfall .lane.k-request svg.track")
        assert section.find_elements("css selector", "table.envelopes tbody tr")
    controls = driver.find_elements("css selector", ".controls, .zoom")
    assert len(controls) == 1 + len(sections)
    assert not any(control.is_displayed() for control in controls)


# --- a hostile log ---------------------------------------------------------------------------


def test_a_hostile_log_runs_nothing_and_shows_its_strings_as_text(
    cases: Cases, chrome: Chrome
) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    case = cases["hostile"]
    load(chrome, case)
    for row in rows(chrome):  # open every section: a link that ran script would run it now
        row.find_element("css selector", "td.id a").click()
    assert script(chrome, "return typeof window.__pwned") == "undefined"
    with pytest.raises(NoAlertPresentException):
        chrome.switch_to.alert.text  # noqa: B018 - reading it is the check
    assert script(chrome, "return document.scripts.length") == 1
    assert not chrome.find_elements("css selector", "img, iframe, object, embed, [onerror]")
    assert not chrome.find_elements("css selector", "[onload], [onclick], [onmouseover]")
    hrefs = [a.get_attribute("href") or "" for a in chrome.find_elements("css selector", "a")]
    assert hrefs
    assert all(href.startswith(case.url + "#") for href in hrefs), hrefs
    # Each string is there as text: in the overview (its test id), on the lane (its path),
    # in the envelopes (its error message), with the invisible characters escaped.
    cells = {
        row.get_attribute("data-id") or "": row.find_element("css selector", "td.id")
        for row in rows(chrome)
    }
    assert sorted(cells) == sorted(case.by_shown)
    assert len(cells) == len(HOSTILE) + 1
    for test_id, cell in cells.items():
        assert cell.text == test_id
    page = chrome.find_element("tag name", "body").text
    for value in [*HOSTILE.values(), CONTROLS]:
        assert f"GET /{shown(value)}" in page or f"POST /{shown(value)}" in page, value
    for value in list(HOSTILE.values())[1::2]:
        assert f"{shown(value)}\\u0000{shown(CONTROLS)}" in page, value
    for char in "\x00\x07\x1b\x7f\u202e":
        assert char not in page
    # The search finds a test id by its hostile text, and runs nothing either.
    search = chrome.find_element("css selector", "#search")
    search.send_keys(HOSTILE["attribute"])
    assert visible_ids(chrome) == [f"h-attribute-{HOSTILE['attribute']}-end"]
    assert chrome.find_element("css selector", "#shown").text == f"1 of {len(cells)} shown"
    assert script(chrome, "return typeof window.__pwned") == "undefined"


def test_a_lone_test_id_that_json_escapes_is_drawn_from_its_envelopes(
    cases: Cases, chrome: Chrome
) -> None:
    case = cases["lone"]
    load(chrome, case)
    (test_id,) = case.test_ids
    (row,) = rows(chrome)
    assert row.get_attribute("data-class") == case.classes[test_id] == "backend-error"
    count = chrome.find_element("css selector", "section#t0 h3 small").text
    assert count == f"({len(case.envelopes)})"


# --- the script: filtering, keys, zoom -------------------------------------------------------


def test_search_class_and_chips_hide_and_show_rows(cases: Cases, chrome: Chrome) -> None:
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    case = cases["demo"]
    load(chrome, case)
    every = [row.get_attribute("data-id") or "" for row in rows(chrome)]
    classes = case.classes
    total = len(every)
    shown_text = chrome.find_element("css selector", "#shown")
    controls = chrome.find_element("css selector", ".controls")
    assert controls.is_displayed()
    assert visible_ids(chrome) == every
    assert shown_text.text == f"{total} of {total} shown"

    search = chrome.find_element("css selector", "#search")
    search.send_keys("ABORT")  # the search ignores case
    wanted = [test_id for test_id in every if "abort" in test_id]
    assert 0 < len(wanted) < total
    assert visible_ids(chrome) == wanted
    assert shown_text.text == f"{len(wanted)} of {total} shown"
    search.send_keys(Keys.BACKSPACE * len("ABORT"))
    assert visible_ids(chrome) == every

    choice = Select(chrome.find_element("css selector", "#class"))
    choice.select_by_value("backend-error")
    wanted = [test_id for test_id in every if classes[test_id] == "backend-error"]
    assert 0 < len(wanted) < total
    assert visible_ids(chrome) == wanted
    assert shown_text.text == f"{len(wanted)} of {total} shown"
    search.send_keys("healthy")  # both at once: nothing is both
    assert visible_ids(chrome) == []
    assert shown_text.text == f"0 of {total} shown"
    search.send_keys(Keys.BACKSPACE * len("healthy"))
    choice.select_by_value("")
    assert visible_ids(chrome) == every

    chip = chrome.find_element("css selector", '.chip[data-class="healthy"]')
    chip.click()
    wanted = [test_id for test_id in every if classes[test_id] == "healthy"]
    assert 0 < len(wanted) < total
    assert visible_ids(chrome) == wanted
    assert choice.first_selected_option.get_attribute("value") == "healthy"
    pressed = {
        c.get_attribute("data-class"): c.get_attribute("aria-pressed")
        for c in chrome.find_elements("css selector", ".chip")
    }
    assert pressed == {name: str(name == "healthy").lower() for name in pressed}
    assert shown_text.text == f"{len(wanted)} of {total} shown"
    chip.click()  # again: every class
    assert visible_ids(chrome) == every
    assert choice.first_selected_option.get_attribute("value") == ""


def test_keys_move_open_and_zoom(cases: Cases, chrome: Chrome) -> None:
    from selenium.webdriver.common.keys import Keys

    case = cases["demo"]
    load(chrome, case)
    every = rows(chrome)
    links = [row.find_elements("css selector", "td.id a") for row in every]
    assert selected(chrome) == 0  # the first row is chosen as the page opens
    press(chrome, "j")
    assert selected(chrome) == 1
    press(chrome, "k")
    assert selected(chrome) == 0
    press(chrome, Keys.ARROW_DOWN, Keys.ARROW_DOWN)
    assert selected(chrome) == 2
    press(chrome, Keys.ARROW_UP, "k")
    assert selected(chrome) == 0
    press(chrome, *["j"] * (len(every) + 1))  # stays on the last
    assert selected(chrome) == len(every) - 1
    press(chrome, *["k"] * (len(every) - 1))
    assert selected(chrome) == 0

    press(chrome, Keys.ENTER)
    target = links[0][0].get_attribute("hash") or ""
    assert target.startswith("#t")
    assert script(chrome, "return location.hash") == target
    section = target[1:]
    assert zoomed(chrome, section) is None
    assert view_boxes(chrome, section) == {"0 0 1000 20"}

    # + zooms the waterfall of the test id in the address (nothing has the focus).
    press(chrome, "+")
    assert zoomed(chrome, section) == "2"
    assert view_boxes(chrome, section) == {"250 0 500 20"}  # every track: the same window
    press(chrome, "+")
    assert zoomed(chrome, section) == "4"
    press(chrome, "-")
    assert zoomed(chrome, section) == "2"
    press(chrome, "0")
    assert zoomed(chrome, section) == "1"
    assert view_boxes(chrome, section) == {"0 0 1000 20"}
    others = [
        s.get_attribute("id") or ""
        for s in chrome.find_elements("css selector", "section.story")
        if s.get_attribute("id") != section
    ]
    assert others
    assert all(zoomed(chrome, other) is None for other in others)

    # A focused waterfall wins over the address.
    chrome.find_element("css selector", f"section#{others[0]} .waterfall").click()
    press(chrome, "+")
    assert zoomed(chrome, others[0]) == "2"
    assert zoomed(chrome, section) == "1"

    # Enter on a row that is listed but not drawn (healthy) opens nothing.
    undrawn = next(index for index, found in enumerate(links) if not found)
    chrome.find_element("css selector", "h1").click()  # the focus off the waterfall
    assert selected(chrome) == 0  # opening and zooming left the selection where it was
    press(chrome, *["j"] * undrawn)
    assert selected(chrome) == undrawn
    press(chrome, Keys.ENTER)
    assert script(chrome, "return location.hash") == target

    # / goes to the search; Enter there opens the first row it shows.
    press(chrome, "/")
    assert script(chrome, "return document.activeElement.id") == "search"
    press(chrome, "abort", Keys.ENTER)
    opened = script(chrome, "return location.hash")
    abort = next(
        i for i, row in enumerate(every) if "abort" in (row.get_attribute("data-id") or "")
    )
    assert opened == links[abort][0].get_attribute("hash")


def test_k_on_the_first_row_keeps_it_selected(cases: Cases, chrome: Chrome) -> None:
    load(chrome, cases["demo"])
    assert selected(chrome) == 0
    press(chrome, "k")
    assert selected(chrome) == 0


# --- screenshots -------------------------------------------------------------------------------


@pytest.mark.parametrize(("width", "height"), [(1280, 900), (390, 844)], ids=["desktop", "phone"])
def test_a_screenshot_is_drawn_at_desktop_and_phone_width(
    cases: Cases, chrome: Chrome, width: int, height: int, tmp_path: Path
) -> None:
    case = cases["demo"]
    chrome.set_window_size(width, height)
    try:
        load(chrome, case)
        inner: list[int] = script(chrome, "return [innerWidth, innerHeight, devicePixelRatio]")
        assert inner[0] == width
        # The page fits the width: nothing pushes it sideways (wide tables scroll in their box).
        assert script(chrome, "return document.documentElement.scrollWidth") <= width
        png = chrome.get_screenshot_as_png()
        (tmp_path / f"report-{width}.png").write_bytes(png)
        picture = browser.Png(png)
        assert (picture.width, picture.height) == (width * inner[2], inner[1] * inner[2])
        colours, share = picture.colours()
        assert colours >= 16, colours  # text, badges, bars: never a blank page
        assert share >= 0.01, share  # a hundredth of the pixels differ from the background
        narrow = script(
            chrome,
            "return getComputedStyle(document.querySelector('table.tests thead')).display",
        )
        assert (narrow == "none") == (width <= 640)  # the phone layout: cards, no header
        # ...and no column left out: each cell of a row shows (issue 38).
        hidden = script(
            chrome,
            "return Array.from(document.querySelectorAll('table.tests tbody tr:first-child td'))"
            ".filter(td => getComputedStyle(td).display === 'none').length",
        )
        assert hidden == 0
    finally:
        chrome.set_window_size(1280, 900)
