"""The Playwright fixture (``cvdiag/probe/playwright/cvdiag.ts``) in a real Playwright run.

docs/ci.md's recipe as written: a project made of the fixture file (copied by
``python -m cvdiag.probe.playwright``), the documented ``playwright.config.ts`` (``webServer``
starts a real uvicorn backend with cvdiag's middleware, its stdout in a file, stopped with
SIGTERM), real ``@playwright/test`` (pinned in ``tests/probe/playwright/package.json``, installed
once into its ``node_modules/``) and Debian's Chromium. One run holds every scenario; the tests
read what it wrote: the probe's lines, the backend's, the JUnit XML.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from cvdiag.runs import read_junit
from cvdiag.schema.vocabulary import packaged_schema
from cvdiag.scrubbing.vendors import VENDOR_RULES
from tests.conftest import REFERENCE
from tests.schema_check import UUID7
from tests.support.cli import cvdiag
from tests.support.client_layers import joined, report, verdict
from tests.support.client_layers import text as said
from tests.support.corpus import benign, credentials
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "playwright"
CHROMIUM = Path("/usr/bin/chromium")
#: The extension keys docs/envelope.md lists for the probe lines ("+" in the contract).
EXTENSIONS = {
    "probe.start": {"runner", "test"},
    "probe.message.send": {"method", "url", "timeout_ms"},
    "probe.network.response": {"message_index"},
    "probe.sse.event": {"message_index"},
    "probe.sse.aborted": {"message_index", "timeout_ms", "cause"},
    "probe.network.error": {"message_index", "timeout_ms", "cause"},
    "probe.exit": {"test_outcome", "requests"},
}
#: The test's overlay on the documented config: Debian's Chromium (no browser download here).
LOCAL_CONFIG = """import config from "./playwright.config";

export default {
  ...config,
  use: {
    ...config.use,
    launchOptions: {
      executablePath: "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"],
    },
  },
};
"""
#: The fixture's scrubber over the corpora, in the same run (Node 20 cannot run TypeScript alone).
SCRUB_SPEC = """import { readFileSync, writeFileSync } from "node:fs";
import { test } from "@playwright/test";
import { cvdiagScrub } from "./cvdiag";

test("scrub", () => {
  const texts: string[] = JSON.parse(readFileSync(process.env.CVDIAG_SCRUB_IN!, "utf8"));
  const out = texts.map((text) => cvdiagScrub(text, 4096));
  writeFileSync(process.env.CVDIAG_SCRUB_OUT!, JSON.stringify(out));
});
"""


def _missing() -> str | None:
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no {CHROMIUM}"
    return None


def _install() -> Path:
    """``npm install`` once into tests/probe/playwright/node_modules (ignored by git), again only
    when package.json changes; one process at a time (a lock beside it)."""
    manifest = (PROJECT / "package.json").read_bytes()
    stamp = PROJECT / "node_modules" / ".cvdiag-installed"
    wanted = hashlib.sha256(manifest).hexdigest()
    with open(PROJECT / ".npm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == wanted):
            try:
                done = subprocess.run(
                    ["npm", "install", "--no-audit", "--no-fund", "--no-package-lock"],
                    cwd=PROJECT,
                    env={**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"},
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
            except subprocess.TimeoutExpired:
                pytest.skip("playwright tests skipped: npm install took over 300 s (no registry?)")
            if done.returncode:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                pytest.skip(f"playwright tests skipped: npm install failed ({last})")
            stamp.write_text(wanted)
    return PROJECT / "node_modules"


@dataclass
class Run:
    folder: Path
    exit_code: int
    output: str
    probe: list[dict[str, Any]]
    backend: list[dict[str, Any]]

    def by_test(self, title: str) -> list[list[dict[str, Any]]]:
        """Each attempt's probe lines of the test ``title``, in the order the attempts started."""
        ids = [
            line["test_id"]
            for line in self.probe
            if line["boundary"] == "probe.start" and line["metadata"]["test"].endswith(title)
        ]
        return [[line for line in self.probe if line["test_id"] == i] for i in ids]

    def backend_of(self, test_id: str) -> list[dict[str, Any]]:
        return [line for line in self.backend if line["test_id"] == test_id]


def _envelopes(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line[7:]) for line in lines if line.startswith("CVDIAG {")]


def _scrub_inputs() -> list[str]:
    shapes = (REFERENCE / "secret-shapes.txt").read_text(encoding="utf-8").splitlines()
    return [
        *(line for line in shapes if line and not line.startswith("#")),
        *(rule.example for rule in VENDOR_RULES),
        *(credential.text for credential in credentials()),
        *(text for _, text in benign()),
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    missing = _missing()
    if missing:
        pytest.skip(f"playwright tests skipped: {missing}")
    modules = _install()
    folder = tmp_path_factory.mktemp("playwright-project")
    (folder / "tests").mkdir()
    for name in ("playwright.config.ts", "app.py"):
        shutil.copy(PROJECT / name, folder / name)
    for spec in (PROJECT / "tests").glob("*.spec.ts"):
        shutil.copy(spec, folder / "tests" / spec.name)
    (folder / "node_modules").symlink_to(modules)
    (folder / "playwright.local.config.ts").write_text(LOCAL_CONFIG)
    (folder / "tests" / "scrub.spec.ts").write_text(SCRUB_SPEC)
    (folder / "scrub-in.json").write_text(json.dumps(_scrub_inputs()))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "BACKEND_PORT": str(free_port()),
        "CVDIAG_SCRUB_IN": str(folder / "scrub-in.json"),
        "CVDIAG_SCRUB_OUT": str(folder / "scrub-out.json"),
        "CI": "1",
    }
    # The fixture file as docs/ci.md copies it: from the installed package.
    subprocess.run(
        [sys.executable, "-m", "cvdiag.probe.playwright", "tests/cvdiag.ts"],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
    )
    cli = modules / "@playwright" / "test" / "cli.js"
    done = subprocess.run(
        ["node", str(cli), "test", "-c", "playwright.local.config.ts", "--workers", "2"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    artifacts = folder / "artifacts"
    assert (artifacts / "cvdiag-probe.log").exists(), output[-3000:]
    return Run(
        folder,
        done.returncode,
        output,
        _envelopes(artifacts / "cvdiag-probe.log"),
        _envelopes(artifacts / "backend.log"),
    )


@cache
def _validators() -> tuple[Draft202012Validator, Draft202012Validator]:
    reference = json.loads((REFERENCE / "cvdiag-schema-v1.json").read_text())
    return Draft202012Validator(reference), Draft202012Validator(packaged_schema())


def _boundaries(lines: list[dict[str, Any]]) -> list[str]:
    return [line["boundary"] for line in lines]


def _one(lines: list[dict[str, Any]], boundary: str) -> dict[str, Any]:
    found = [line for line in lines if line["boundary"] == boundary]
    assert len(found) == 1, (boundary, _boundaries(lines))
    return found[0]


def test_the_run_fails_exactly_the_tests_that_should(run: Run) -> None:
    assert run.exit_code == 1, run.output[-3000:]
    assert "5 failed" in run.output, run.output[-3000:]
    assert "4 passed" in run.output, run.output[-3000:]


def test_every_probe_line_is_v1_with_the_documented_extensions_only(run: Run) -> None:
    reference, packaged = _validators()
    v1_keys = json.loads((REFERENCE / "cvdiag-schema-v1.json").read_text())["$defs"][
        "boundary_metadata_keys"
    ]
    assert len(run.probe) > 30
    for line in run.probe:
        errors = [e.message for e in reference.iter_errors(line)]
        errors += [e.message for e in packaged.iter_errors(line)]
        allowed = set(v1_keys[line["boundary"]]) | EXTENSIONS.get(line["boundary"], set())
        errors += [f"metadata key {k!r}" for k in line["metadata"] if k not in allowed]
        assert not errors, (errors, line)
        assert line["layer"] == "probe"
        assert line["parent_span_id"] is None
        assert line["trace_id"] == line["test_id"]
        assert UUID7.match(line["test_id"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])


def test_every_attempt_starts_and_exits_once_and_the_junit_names_its_id(run: Run) -> None:
    ids = {line["test_id"] for line in run.probe}
    assert len(ids) == 9  # eight tests, the slow one retried
    [[*crashed]] = run.by_test("the worker dies mid-request")
    for test_id in ids:
        lines = [line for line in run.probe if line["test_id"] == test_id]
        assert _boundaries(lines).count("probe.start") == 1
        # The killed worker wrote no exit: its teardown never ran.
        assert _boundaries(lines).count("probe.exit") == (test_id != crashed[0]["test_id"])
    cases = read_junit(str(run.folder / "artifacts" / "results.xml"))
    junit_ids = {i for case in cases for attempt in case.attempts for i in attempt.test_ids}
    assert ids - {crashed[0]["test_id"]} <= junit_ids


def test_an_api_call_that_completes(run: Run) -> None:
    [lines] = run.by_test("the chat answers")
    assert _boundaries(lines) == [
        "probe.start",
        "probe.message.send",
        "probe.network.response",
        "probe.exit",
    ]
    send = _one(lines, "probe.message.send")["metadata"]
    assert send == {
        "message_index": 0,
        "char_count": 0,
        "demo": "api",
        "method": "GET",
        "url": "/api/chat?message",  # the key stays, its value ("hi") never
        "timeout_ms": None,
    }
    assert _one(lines, "probe.network.response")["metadata"]["status"] == 200
    exit_ = _one(lines, "probe.exit")["metadata"]
    assert exit_["terminal_outcome"] == "ok"
    assert exit_["test_outcome"] == "passed"
    assert exit_["requests"] == 1
    backend = run.backend_of(lines[0]["test_id"])
    assert "backend.response.complete" in _boundaries(backend)


def test_an_api_call_past_its_timeout_each_attempt_with_its_own_id(run: Run) -> None:
    attempts = run.by_test("a slow LLM call outlives the client's timeout")
    assert len(attempts) == 2
    assert attempts[0][0]["test_id"] != attempts[1][0]["test_id"]
    for lines in attempts:
        assert _one(lines, "probe.message.send")["metadata"]["timeout_ms"] == 2000
        error = _one(lines, "probe.network.error")
        assert error["outcome"] == "timeout"
        assert error["metadata"]["cause"] == "client-timeout"
        assert error["metadata"]["timeout_ms"] == 2000
        assert error["metadata"]["error_class"] == "TimeoutError"
        exit_ = _one(lines, "probe.exit")["metadata"]
        assert (exit_["terminal_outcome"], exit_["test_outcome"]) == ("err", "failed")
        # The backend's late lines, written after its client left (the graceful stop waited).
        backend = _boundaries(run.backend_of(lines[0]["test_id"]))
        assert "backend.llm.call.response" in backend, backend
        assert backend[-1] in {"backend.response.complete", "backend.sse.aborted"}
    junit = (run.folder / "artifacts" / "results.xml").read_text()
    assert "apiRequestContext.post: Timeout 2000ms exceeded" in junit  # the runner's own words


def test_a_call_cut_by_the_tests_own_timeout(run: Run) -> None:
    [lines] = run.by_test("a call outlives the test's own timeout")
    assert _one(lines, "probe.message.send")["metadata"]["timeout_ms"] is None
    error = _one(lines, "probe.network.error")
    assert error["metadata"]["cause"] == "client-timeout"
    assert error["metadata"]["timeout_ms"] == 1500  # the test's timeout: the client's wait
    exit_ = _one(lines, "probe.exit")["metadata"]
    assert exit_["terminal_outcome"] == "timeout"
    assert exit_["test_outcome"] == "failed"


def test_a_page_that_streams_its_answer(run: Run) -> None:
    [lines] = run.by_test("the page streams its answer")
    start = _one(lines, "probe.start")["metadata"]
    assert start["viewport"] == "1280x720"
    assert start["url"].startswith("http://127.0.0.1:")
    token = _one(lines, "probe.dom.firsttoken")["metadata"]
    assert token["text_length"] > 0
    first = _one(lines, "probe.sse.event")["metadata"]  # the first one only, at verbose
    assert first["sequence_num"] == 0
    assert first["event_type"] == "message"
    exit_ = _one(lines, "probe.exit")["metadata"]
    assert exit_["first_token_delta_ms"] == token["delta_ms_from_start"]
    assert exit_["sse_event_count"] == 7  # six tokens and the closing event
    # The page closes its EventSource on the last event: the browser may cancel the request
    # before it has read the body's end, a stream left on purpose, never a failure.
    for line in lines:
        if line["boundary"] in {"probe.sse.aborted", "probe.network.error"}:
            assert line["metadata"]["cause"] == "left-early"


def test_a_page_that_receives_the_stream_and_renders_nothing(run: Run) -> None:
    [lines] = run.by_test("the page renders the streamed answer")
    assert "probe.dom.firsttoken" not in _boundaries(lines)
    assert "probe.dom.container.mount" in _boundaries(lines)
    assert _one(lines, "probe.sse.event")["metadata"]["payload_size_bytes"] > 0
    errors = [line["metadata"] for line in lines if line["boundary"] == "probe.console.error"]
    by_level = {error["level"]: error for error in errors}
    assert "[REDACTED]" in by_level["error"]["message_scrubbed"]
    assert by_level["pageerror"]["message_scrubbed"] == "TypeError: answer.render is not a function"
    assert "Fake0Xmpl" not in json.dumps(run.probe)
    exit_ = _one(lines, "probe.exit")["metadata"]
    assert exit_["test_outcome"] == "failed"
    assert exit_["sse_event_count"] == 4


def test_a_page_left_once_its_assertion_held(run: Run) -> None:
    [lines] = run.by_test("the page leaves once it has what it needs")
    aborted = _one(lines, "probe.sse.aborted")
    assert aborted["metadata"]["cause"] == "left-early"
    assert aborted["outcome"] == "info"
    assert aborted["metadata"]["message_index"] == 1  # the stream, after the page itself
    assert aborted["metadata"]["termination_kind"] == "fin_premature"  # as the pytest probe says
    assert _one(lines, "probe.exit")["metadata"]["terminal_outcome"] == "ok"
    backend = _boundaries(run.backend_of(lines[0]["test_id"]))
    assert "backend.sse.aborted" in backend  # the backend saw its client go


def test_chromiums_own_favicon_request_carries_the_test_id(run: Run) -> None:
    browser_ids = {
        line["test_id"]
        for line in run.probe
        if line["boundary"] == "probe.start" and line["metadata"]["viewport"]
    }
    favicons = [
        line
        for line in run.backend
        if line["boundary"] == "backend.request.ingress"
        and line["metadata"]["path"] == "/favicon.ico"
    ]
    assert favicons
    assert {line["test_id"] for line in favicons} <= browser_ids
    # The page never sees it as a request; Chromium logs its 404 as the page's console error.
    notes = [
        line["metadata"]
        for line in run.probe
        if line["boundary"] == "probe.console.error"
        and (line["metadata"]["source_file"] or "").endswith("/favicon.ico")
    ]
    assert notes
    assert "404" in notes[0]["message_scrubbed"]


def test_every_request_the_probe_sent_reached_the_backend_under_its_id(run: Run) -> None:
    for test_id in {line["test_id"] for line in run.probe}:
        sent = [
            line["metadata"]["url"].split("?")[0]
            for line in run.probe
            if line["test_id"] == test_id and line["boundary"] == "probe.message.send"
        ]
        reached = [
            line["metadata"]["path"]
            for line in run.backend_of(test_id)
            if line["boundary"] == "backend.request.ingress"
        ]
        assert sent
        assert set(sent) <= set(reached), (sent, reached)


def test_the_fixtures_scrubber_redacts_every_secret_shape_and_keeps_ids(run: Run) -> None:
    inputs = _scrub_inputs()
    outputs = json.loads((run.folder / "scrub-out.json").read_text())
    scrubbed = dict(zip(inputs, outputs, strict=True))
    shapes = (REFERENCE / "secret-shapes.txt").read_text(encoding="utf-8").splitlines()
    for shape in (line for line in shapes if line and not line.startswith("#")):
        assert scrubbed[shape] != shape  # redacted, or a query value dropped
    assert "hunter2" not in scrubbed["https://user:hunter2@db.internal.example/path"]
    missed = [rule.family for rule in VENDOR_RULES if "[REDACTED]" not in scrubbed[rule.example]]
    assert not missed
    leaks = {
        c.family: c.leaked(scrubbed[c.text]) for c in credentials() if c.leaked(scrubbed[c.text])
    }
    assert not leaks
    # A probe's free text leans to redaction: query values go by design (two benign URLs), and
    # three long base64 and hex runs of no secret; every other benign text stays as it was.
    changed = [text for _, text in benign() if scrubbed[text] != text]
    assert len(changed) <= 5, changed
    for text in (
        "task-agent-10",
        "sk-learn-pipeline",
        "ASIAPACIFICSOUTHEAST2",
        "ssh://git@github.com/org/repo.git",
    ):
        assert scrubbed[text] == text


def test_the_fixture_type_checks_in_a_strict_project_without_the_dom_library(run: Run) -> None:
    """A project whose CI runs ``tsc --noEmit`` (strict, no ``DOM`` in its ``lib``) keeps passing
    with the fixture in it: the page's side brings its own DOM types."""
    config = {
        "compilerOptions": {
            "strict": True,
            "noEmit": True,
            "target": "ES2022",
            "module": "commonjs",
            "types": ["node"],
        },
        "files": ["tests/cvdiag.ts", "tests/api.spec.ts", "tests/browser.spec.ts"],
    }
    (run.folder / "tsconfig.json").write_text(json.dumps(config))
    tsc = run.folder / "node_modules" / "typescript" / "bin" / "tsc"
    done = subprocess.run(
        ["node", str(tsc), "-p", "tsconfig.json"],
        cwd=run.folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_docs_show_the_tested_config_and_the_command() -> None:
    docs = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    config = (PROJECT / "playwright.config.ts").read_text(encoding="utf-8")
    assert config.strip() in docs
    assert "cvdiag report artifacts/backend.log artifacts/cvdiag-probe.log" in docs
    assert "python -m cvdiag.probe.playwright tests/cvdiag.ts" in docs


# --- what cvdiag reads of the run: each cause named, each control healthy (issue 45) ---------


def _verdict(run: Run, title: str, attempt: int = 0) -> dict[str, Any]:
    """The verdict on one attempt's test id, read over the backend's log and the probe's as two
    files and as one log: both ways must say the same."""
    artifacts = run.folder / "artifacts"
    backend, probe = artifacts / "backend.log", artifacts / "cvdiag-probe.log"
    one = run.folder / "one.log"
    if not one.exists():
        joined(backend, probe, one)
    return verdict(run.by_test(title)[attempt][0]["test_id"], backend, probe, one)


def test_cvdiag_reads_the_api_call_that_completes_as_healthy(run: Run) -> None:
    found = _verdict(run, "the chat answers")
    assert found["flap_class"] == "healthy", said(found)


@pytest.mark.parametrize("attempt", [0, 1])
def test_cvdiag_reads_the_client_timeout_under_a_slow_call_as_slow_first_token(
    run: Run, attempt: int
) -> None:
    found = _verdict(run, "a slow LLM call outlives the client's timeout", attempt)
    assert found["flap_class"] == "slow-first-token", said(found)
    reason, evidence = found["reason"], found["evidence"]
    assert "the client gave up on POST /api/slow" in reason
    assert "its own 2 s timeout" in reason
    assert re.search(r"the call answered at \+\d+ ms", reason)
    assert evidence["client_timeout_ms"] == 2000
    assert evidence["call_took_ms"] > evidence["client_timeout_ms"]


def test_cvdiag_reads_the_tests_own_timeout_as_the_clients(run: Run) -> None:
    found = _verdict(run, "a call outlives the test's own timeout")
    assert found["flap_class"] == "slow-first-token", said(found)
    assert "its own 1.5 s timeout" in found["reason"]


def test_cvdiag_keeps_the_backends_class_for_its_own_error(run: Run) -> None:
    found = _verdict(run, "the backend fails")
    assert found["flap_class"] == "backend-error", said(found)
    assert "RuntimeError" in said(found)


def test_cvdiag_reads_a_killed_worker_as_a_runner_crash(run: Run) -> None:
    found = _verdict(run, "the worker dies mid-request")
    assert found["flap_class"] == "probe-runner-crash", said(found)
    assert "never wrote its exit" in found["reason"]
    assert "POST /api/slow" in found["reason"]


def test_cvdiag_reads_a_streamed_page_and_its_favicon_as_healthy(run: Run) -> None:
    """Chromium's favicon request (a 404 under the test id, no send of the page's, and its
    console line "Failed to load resource") is no failure and no page error."""
    found = _verdict(run, "the page streams its answer")
    assert found["flap_class"] == "healthy", said(found)


def test_cvdiag_reads_a_page_that_rendered_nothing_as_frontend_hydration(run: Run) -> None:
    found = _verdict(run, "the page renders the streamed answer")
    assert found["flap_class"] == "frontend-hydration", said(found)
    reason = found["reason"]
    assert "the backend completed ok" in reason  # the backend's side
    assert "SSE reached the client, yet no first token appeared in the page" in reason
    assert "console error" in reason
    assert "Fake0Xmpl" not in reason
    # The page's own errors count; Chromium's line for its favicon's 404 does not.
    [lines] = run.by_test("the page renders the streamed answer")
    errors = [line["metadata"] for line in lines if line["boundary"] == "probe.console.error"]
    own = [e for e in errors if not (e["source_file"] or "").endswith("/favicon.ico")]
    assert found["evidence"]["console_errors"] == len(own) == 2


def test_cvdiag_reads_a_page_left_after_what_it_needed_as_healthy(run: Run) -> None:
    found = _verdict(run, "the page leaves once it has what it needs")
    assert found["flap_class"] == "healthy", said(found)
    assert "closed its stream on purpose" in found["reason"]


def test_cvdiag_flakes_takes_each_attempts_outcome_from_its_probe(run: Run) -> None:
    """Without JUnit: the passing pages (a favicon's 404, a stream left on purpose) pass, the
    page that rendered nothing after a healthy backend fails."""
    artifacts = run.folder / "artifacts"
    done = cvdiag(
        "flakes", "--json", str(artifacts / "backend.log"), str(artifacts / "cvdiag-probe.log")
    )
    assert done.returncode in (0, 1), done.stderr
    failures = {test["test"]: test["failures"] for test in json.loads(done.stdout)}
    for title, failed in (
        ("the chat answers", 0),
        ("the page streams its answer", 0),
        ("the page leaves once it has what it needs", 0),
        ("the page renders the streamed answer", 1),
        ("the backend fails", 1),
        ("the worker dies mid-request", 1),
    ):
        [[first, *_]] = run.by_test(title)
        assert failures[first["test_id"]] == failed, title


def test_cvdiag_reports_the_run_with_the_clients_lane(run: Run) -> None:
    artifacts = run.folder / "artifacts"
    page = report(
        artifacts / "backend.log", artifacts / "cvdiag-probe.log", into=run.folder / "page.html"
    )
    assert "the test (its probe)" in page
