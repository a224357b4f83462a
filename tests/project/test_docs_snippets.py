"""Every code block of README.md, docs/*.md and examples/**/README.md runs: the docs cannot rot.

Each page is one test. Its blocks (fenced, indented inside a list item or not) run in order in a
fresh working directory, so a block may use what an earlier one made (``app.py``, a log file, a
running server). What a block's language means:

``python``
    Saved as ``app.py`` and executed in a fresh namespace (not as ``__main__``: an
    ``if __name__ == "__main__":`` part, which would start a server, is not run), with cvdiag
    on at the debug tier into memory. Top-level ``await`` and ``async with`` are allowed, as in
    ``python -m asyncio``: such a block runs as a coroutine. If it defines an ASGI ``app``, the
    app is served on uvicorn and hit once (its first plain route, required query parameters set
    to ``hi``, with an ``x-test-id``): the answer must not be a 5xx and the request must end with
    a terminal envelope — unless a later ``uvicorn app:app`` line of the page serves it anyway.
    Every envelope captured must be valid; a block that configures cvdiag itself is undone
    afterwards. A block that defines ``test_*`` functions is a test
    file instead: saved as ``test_<page>_<line>.py`` and run by the page's ``pytest`` line, or by
    ``pytest`` at the end of the page. A block annotated ``<!-- example: NAME -->`` is one of the
    complete programs of docs/agents-and-llm-calls.md, run (and checked in detail) by
    tests/scopes/test_docs.py.
``bash`` / ``sh`` / ``shell``
    One command per line (``\\`` continues a line, ``#`` starts a comment, ``&&`` chains), with
    optional ``NAME=value`` prefixes. Each kind of command is handled explicitly; any other
    command fails the test.

    - ``pip install SPEC...`` is checked, not run: ``cvdiag`` or ``.`` (this checkout, with
      ``-e``) with extras that pyproject.toml defines, or a package pyproject.toml depends on.
    - ``cvdiag ...`` runs in the working directory (in-process through ``cvdiag.cli.main``, or
      through bash when it has pipes or ``;``) and must exit 0. A log it names that the page did
      not write is provided: ``backend.log`` is written by the instrumented server of
      tests/cli/test_real.py (the log docs/cli.md describes), ``broken.log`` by hand. A
      ``<test-id>`` placeholder becomes the first test id of the log. ``cvdiag demo`` runs once
      per session as a subprocess.
    - ``uvicorn MODULE:app`` and ``python PATH/app.py`` start a server in the background
      (``| tee FILE`` or ``> FILE`` keeps its stdout), on a free loopback port: ``--port`` is
      added for uvicorn, ``PORT`` is set for ``app.py``. ``curl`` lines (``-N -s -H -d -X``, and
      ``-m`` / ``--max-time``: the client hangs up that long after the first bytes) and
      ``python PATH/client.py`` lines are sent to it (``localhost:8000`` rewritten). It is
      stopped by the next server, a ``cvdiag`` line or the end of the page — after one generic
      hit if nothing was sent to it. Its stdout must then hold only valid envelopes and, if
      ``CVDIAG_BACKEND_EMITTER`` was on, a terminal envelope for every ``x-test-id`` sent.
    - ``pytest ARGS`` runs the page's test blocks in a subprocess and must pass. The README
      Quickstart's bare ``pytest`` is this test suite: .ci/run runs that exact line.

    - ``python -m examples NAME`` (an example's one offline command) runs as a subprocess once
      per session (tests/support/examples.py, shared with
      tests/project/test_examples_offline.py) and must exit 0; the log it wrote, ``NAME.log``,
      is then in the working directory.

    Paths and modules under ``examples/`` resolve against the repository root. The OpenAI and
    Anthropic SDKs are always pointed at a local fake provider (``OPENAI_BASE_URL``,
    ``ANTHROPIC_BASE_URL``; a block's own value is overridden), and a server started with
    ``OTEL_*`` or ``CVDIAG_OTEL`` set exports to a local OTLP receiver
    (``OTEL_EXPORTER_OTLP_ENDPOINT`` overridden), which must receive something: nothing reaches
    the network.
``console``
    A transcript: ``$ COMMAND`` lines (``cvdiag`` commands, handled as above; one with ``;``,
    such as ``; echo "exit $?"``, may exit non-zero and shows it) each followed by a sample of
    its output — stderr included, since a terminal shows both. Every sample line must match a
    line of the real output, in order, once numbers, ids, spaces and waterfall bars are
    ignored; a sample line ending in ``…`` matches by prefix, a line of just ``…`` elides.
    The sample of ``cvdiag demo`` and of ``python -m examples NAME`` (handled as above) runs to
    the end of its block: both print ``$`` lines.
``text``
    An output sample or a diagram: not executed.
``json``
    A configuration file: it must parse; one annotated ``<!-- recipe: NAME -->`` is run by
    tests/e2e/test_langgraph_server.py.

A block that truly cannot run is annotated ``<!-- snippet: skip REASON -->`` on the line before
it; such skips are listed and counted by ``test_skips_are_rare_and_justified``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import functools
import gc
import inspect
import io
import json
import os
import re
import runpy
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cvdiag.pytest_plugin import CvdiagEvents

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before 3.11
    import tomli as tomllib

from cvdiag import Tier, get_emitter
from cvdiag.cli import main as cvdiag_main
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.schema_check import assert_valid
from tests.support.examples import offline_run
from tests.support.servers import free_port, serve_uvicorn

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_NAMES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/offline.py"))
#: Commands whose console sample runs to the end of its block: they print ``$`` lines.
RUNS_TO_THE_END = {"cvdiag demo", *(f"python -m examples {name}" for name in EXAMPLE_NAMES)}
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("**/README.md")),
]
#: ``<!-- snippet: skip REASON -->`` annotations across all pages: keep them rare.
EXPECTED_SKIPS = 0
SHELLS = {"bash", "sh", "shell"}
LANGUAGES = {"python", "console", "text", "json", *SHELLS}
TERMINALS = {"backend.response.complete", "backend.sse.aborted", "backend.error.caught"}
#: A fenced block, also indented (inside a list item): its lines lose that indent.
FENCE = re.compile(r"^([ \t]*)```([\w-]*)[^\n]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
NOTE = re.compile(r"<!--\s*(.*?)\s*-->\s*\Z", re.S)
FASTAPI_DOC_ROUTES = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


# --- reading the pages ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    note: str | None  # the HTML comment right before the fence, if any

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        if self.note and self.note.startswith("snippet: skip"):
            return self.note[len("snippet: skip") :].strip()
        return None

    @property
    def example(self) -> str | None:
        if self.note and self.note.startswith("example:"):
            return self.note[len("example:") :].strip()
        return None

    @property
    def recipe(self) -> str | None:
        if self.note and self.note.startswith("recipe:"):
            return self.note[len("recipe:") :].strip()
        return None


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        indent, lang, code = match.groups()
        before = text[: match.start()].rstrip("\n")
        note = NOTE.search(before.splitlines()[-1].strip() + "\n") if before else None
        if indent:
            code = "".join(line.removeprefix(indent) for line in code.splitlines(keepends=True))
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, lang, code, note.group(1) if note else None))
    return found


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# --- shapes: comparing a sample of output with the real thing -------------------------------

#: Ids: UUIDs, span ids, and what ``cut`` leaves of them (a hex run holding a digit).
_ID = re.compile(r"(?<!\w)(?=[0-9a-f-]*\d)[0-9a-f][0-9a-f-]{5,}(?!\w)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


#: What a client-abort story says of an LLM call still in flight when the client left
#: (cvdiag/diagnosis/waiting.py): whether its first token had come yet depends on how the
#: machine scheduled the app, the provider and the client, not on the code. On a busy machine
#: the sample's "was streaming (first token at +51 ms)" came out as "had begun only 7ms before,
#: unanswered". The call's label, the class and the rest of the reason are still compared.
_IN_FLIGHT = re.compile(
    r"(LLM call \S+) (?:was streaming(?: \(first token at \+\d+ ms\))?"
    r"|had begun only \S+ before, unanswered)"
)


def shape(line: str) -> str:
    """A line with what changes from run to run taken out: ids, numbers, spaces, bar lengths,
    and how far an LLM call in flight had got when a client left."""
    line = _IN_FLIGHT.sub(r"\1 <in-flight>", line)
    line = _ID.sub("<id>", line)
    line = _NUMBER.sub("9", line)
    line = re.sub("█+", "█", line)
    return re.sub(r"\s+", "", line)


def assert_same_shape(sample: list[str], output: str, where: str) -> None:
    real = [shape(line) for line in output.splitlines()]
    position = -1
    for line in sample:
        if not line.strip() or line.strip() == "…":
            continue
        prefix = line.rstrip().endswith("…")
        want = shape(line.rstrip().removesuffix("…"))

        def matches(index: int, want: str = want, prefix: bool = prefix) -> bool:
            return real[index].startswith(want) if prefix else real[index] == want

        if position >= 0 and matches(position):
            continue  # a repeated line (heartbeats): the real run may have fewer of them
        following = (i for i in range(position + 1, len(real)) if matches(i))
        position = next(following, -2)
        if position == -2:
            pytest.fail(
                f"{where}: the sample line\n  {line}\nis not in the real output (in order):\n"
                f"{output}",
                pytrace=False,
            )


# --- what the pages may install ------------------------------------------------------------


@functools.cache
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def extras() -> set[str]:
    return set(pyproject()["project"]["optional-dependencies"])


def known_packages() -> set[str]:
    """Every package pyproject.toml depends on, in any extra."""
    project = pyproject()["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return {canonicalize_name(Requirement(spec).name) for spec in specs}


def wheel_name() -> str:
    """The file name ``pip wheel --no-deps -w dist .`` gives this checkout (.ci/run builds it)."""
    return f"dist/cvdiag-{pyproject()['project']['version']}-py3-none-any.whl"


def check_pip(args: list[str], where: str) -> None:
    """A documented ``pip`` command must work against this repository as written: install this
    checkout or the wheel built from it, never the published name, which nothing serves yet."""
    if args[:1] == ["wheel"]:
        assert args[1:] == ["--no-deps", "-w", "dist", "."], f"{where}: build with {args}?"
        return
    assert args[:1] == ["install"], f"{where}: only `pip install` is documented: {args}"
    defined = extras()
    specs = [arg for arg in args[1:] if not arg.startswith("-")]
    assert specs, f"{where}: pip install of nothing"
    for spec in specs:
        if spec.partition("[")[0].endswith(".whl"):
            path, _, rest = spec.partition("[")
            assert path == wheel_name(), f"{where}: the built wheel is {wheel_name()}, not {path}"
            wanted = {e.strip() for e in rest.rstrip("]").split(",") if e.strip()}
            assert wanted <= defined, f"{where}: unknown extras {wanted - defined}"
            continue
        if spec.startswith("."):
            path, _, rest = spec.partition("[")
            assert "-e" in args, f"{where}: install this checkout editable: pip install -e {spec}"
            assert (ROOT / path).resolve() == ROOT, f"{where}: {spec} is not this checkout"
            wanted = {e.strip() for e in rest.rstrip("]").split(",") if e.strip()}
            assert wanted <= defined, f"{where}: unknown extras {wanted - defined}"
            continue
        requirement = Requirement(spec)
        assert canonicalize_name(requirement.name) != "cvdiag", (
            f"{where}: `pip install {spec}` needs a release on PyPI that does not exist yet; "
            "install this checkout (pip install -e .) or the wheel built from it"
        )
        assert canonicalize_name(requirement.name) in known_packages(), (
            f"{where}: {spec} is not a package pyproject.toml knows"
        )


# --- what the pages run against ------------------------------------------------------------


BROKEN_LOG = (
    'CVDIAG {"schema_versi\n'  # a cut line: malformed
    'CVDIAG {"schema_version": 1}\n'  # an envelope missing every other field
)


class Resources:
    """Made at most once per session, and only when a page needs them."""

    def __init__(self, tmp: Path, provider_url: str, stack: contextlib.ExitStack) -> None:
        self.tmp = tmp
        self.provider_url = provider_url
        self._stack = stack

    @functools.cached_property
    def backend_log(self) -> bytes:
        """The log docs/cli.md describes: the scenarios of tests/cli/test_real.py, one request
        per flap class, written by a real instrumented uvicorn server."""
        from tests.cli.test_real import write_backend_log

        return write_backend_log(self.tmp / "backend.log").read_bytes()

    @functools.cached_property
    def demo_dir(self) -> Path:
        return Path(self._stack.enter_context(tempfile.TemporaryDirectory()))

    @functools.cached_property
    def demo(self) -> subprocess.CompletedProcess[str]:
        """The demo, run in a directory of its own: it writes cvdiag-demo.log there."""
        return subprocess.run(
            [sys.executable, "-m", "cvdiag", "demo"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env=clean_env(),
            cwd=self.demo_dir,
        )

    @functools.cached_property
    def otlp(self) -> OtlpReceiver:
        receiver = OtlpReceiver()
        receiver.url = self._stack.enter_context(serve_uvicorn(receiver.app))
        return receiver

    def log(self, name: str) -> bytes | None:
        if name == "backend.log":
            return self.backend_log
        if name == "broken.log":
            return BROKEN_LOG.encode()
        if name == "cvdiag-demo.log":  # what `cvdiag demo` wrote: its suggestions read it
            assert self.demo.returncode == 0, self.demo.stderr
            return (self.demo_dir / name).read_bytes()
        return None

    def provider_env(self) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": f"{self.provider_url}/v1",
            "OPENAI_API_KEY": "sk-test-not-a-key",
            "ANTHROPIC_BASE_URL": self.provider_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
        }


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess: nothing of cvdiag's from the outer one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CVDIAG_")}
    env.update(extra)
    return env


class OtlpReceiver:
    """Takes whatever an OTLP/HTTP exporter posts, and counts it: a stand-in collector."""

    def __init__(self) -> None:
        self.url = ""
        self.posts: list[str] = []

        async def receive(request: Request) -> Response:
            await request.body()
            self.posts.append(request.url.path)
            return Response(b"", media_type="application/x-protobuf")

        self.app = Starlette(routes=[Route("/{path:path}", receive, methods=["POST"])])


@pytest.fixture(scope="module")
def resources(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Resources]:
    with contextlib.ExitStack() as stack:
        provider_url = stack.enter_context(serve_fake_provider(FakeProvider()))
        yield Resources(tmp_path_factory.mktemp("snippet-resources"), provider_url, stack)


# --- running a page ------------------------------------------------------------------------


@dataclasses.dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    stdout: Path
    stderr: Path
    env: dict[str, str]
    where: str
    app: Any  # the ASGI app it serves, when known here (for its routes)
    test_ids: list[str] = dataclasses.field(default_factory=list)
    requests: int = 0
    otlp: tuple[OtlpReceiver, int] | None = None  # the receiver, and its posts before


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


class Page:
    """Runs the blocks of one page in order, in one working directory."""

    def __init__(
        self,
        page: Path,
        workdir: Path,
        resources: Resources,
        cvdiag_events: CvdiagEvents,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        self.page = page
        self.workdir = workdir
        self.resources = resources
        self.capture = cvdiag_events
        self.monkeypatch = monkeypatch
        self.server: Server | None = None
        self.app: Any = None  # the ASGI app of the latest python block
        self.test_files: list[Path] = []
        self.tests_ran = False
        self.blocks = blocks(page)

    # -- blocks -------------------------------------------------------------------------------

    def run(self) -> None:
        for key, value in self.resources.provider_env().items():
            self.monkeypatch.setenv(key, value)
        self.monkeypatch.chdir(self.workdir)
        try:
            for block in self.blocks:
                if block.skip_reason is not None:
                    continue
                assert block.lang in LANGUAGES, (
                    f"{block.where}: a block of language {block.lang or '(none)'!r}: label it"
                    f" ({', '.join(sorted(LANGUAGES))}), or teach {Path(__file__).name}"
                )
                if block.lang == "python":
                    self.python(block)
                elif block.lang in SHELLS:
                    for command in shell_commands(block.code):
                        self.command(command, block)
                elif block.lang == "console":
                    self.console(block)
                elif block.lang == "json":
                    self.json(block)
            self.stop_server()
            if self.test_files and not self.tests_ran:
                self.pytest(["pytest"], self.blocks[-1])
        finally:
            self.stop_server(check=False)

    def json(self, block: Block) -> None:
        """A configuration file: valid JSON, and a recipe's run by its test."""
        json.loads(block.code)
        if block.recipe is not None:
            from tests.e2e.test_frameworks import RECIPES

            assert block.recipe in RECIPES, f"{block.where}: recipe not run by its test"

    def python(self, block: Block) -> None:
        if block.example is not None:
            from tests.scopes.test_docs import examples

            assert block.example in examples(), f"{block.where}: example not run by its test"
            return
        if block.recipe is not None:
            from tests.e2e.test_frameworks import RECIPES

            assert block.recipe in RECIPES, f"{block.where}: recipe not run by its test"
            return
        if re.search(r"^(async )?def test_", block.code, re.M):
            path = self.workdir / f"test_{self.page.stem.replace('-', '_')}_{block.line}.py"
            path.write_text(block.code, encoding="utf-8")
            self.test_files.append(path)
            return
        path = self.workdir / "app.py"
        path.write_text(block.code, encoding="utf-8")
        sink = self.capture(Tier.DEBUG)
        namespace: dict[str, Any] = {"__name__": "docs_snippet", "__file__": str(path)}
        code = compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if inspect.iscoroutine(result):
            asyncio.run(result)
        self.app = namespace.get("app")
        if self.app is not None and not self.served_later(block):
            with serve_uvicorn(self.app) as url:
                test_id = self.hit(url, block)
                ended = wait_until(lambda: terminal_for(list(sink.envelopes), test_id))
                assert ended, f"{block.where}: no terminal envelope for the request it served"
        for env in list(sink.envelopes):
            assert_valid(env)
        gc.collect()  # whatever the block left behind is finalized here, not in a later test
        emitter = get_emitter()
        if sink not in emitter.sinks:  # the block configured cvdiag itself: undo it
            emitter.close()
            for own in emitter.sinks:
                own.close()

    def served_later(self, block: Block) -> bool:
        later = [b for b in self.blocks if b.line > block.line and b.lang in SHELLS]
        return any(re.search(r"\buvicorn app:app\b", b.code) for b in later)

    def console(self, block: Block) -> None:
        lines = block.code.splitlines()
        groups: list[tuple[str, list[str]]] = []
        for line in lines:
            if line.startswith("$ ") and not (groups and groups[-1][0] in RUNS_TO_THE_END):
                groups.append((line[2:].strip(), []))
            else:
                assert groups, f"{block.where}: a transcript starts with a `$ ` line"
                groups[-1][1].append(line)
        for command, sample in groups:
            if command.startswith("python -m examples "):
                code, output = self.offline(command, block)
            else:
                assert command.startswith("cvdiag "), f"{block.where}: unhandled command {command}"
                code, output = self.cvdiag(command, block)
            if ";" not in command:
                assert code == 0, f"{block.where}: `{command}` exited {code}:\n{output}"
            assert_same_shape(sample, output, f"{block.where}: `{command}`")

    # -- commands -----------------------------------------------------------------------------

    def command(self, command: str, block: Block) -> None:
        words = shlex.split(command)
        env: dict[str, str] = {}
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        assert words, f"{block.where}: an empty command"
        if words == ["python3", "-m", "venv", ".venv"]:
            return  # the Quickstart's own environment: this suite already runs in one
        # `.venv/bin/cvdiag` is `cvdiag` from the environment the line before made.
        words[0] = words[0].removeprefix(".venv/bin/")
        command = shlex.join([*(f"{k}={v}" for k, v in env.items()), *words])
        program = words[0]
        if program == "pip":
            check_pip(words[1:], block.where)
        elif program == "cvdiag":
            assert not env, f"{block.where}: cvdiag takes no environment"
            code, output = self.cvdiag(command, block)
            assert code == 0, f"{block.where}: `{command}` exited {code}:\n{output}"
        elif program == "python" and words[1:3] == ["-m", "examples"]:
            assert not env, f"{block.where}: python -m examples takes no environment"
            code, output = self.offline(command, block)
            assert code == 0, f"{block.where}: `{command}` exited {code}:\n{output}"
        elif program == "uvicorn" or (program == "python" and words[1].endswith("app.py")):
            self.start_server(words, env, block)
        elif program == "curl":
            self.curl(words[1:], block)
        elif program == "python" and words[1].endswith(".py"):
            self.script(words, env, block)
        elif program == "pytest":
            self.pytest(words, block)
        else:
            pytest.fail(f"{block.where}: unhandled command {command!r}", pytrace=False)

    def offline(self, command: str, block: Block) -> tuple[int, str]:
        """``python -m examples NAME``: the session's run of it; its log lands here."""
        self.stop_server()
        words = shlex.split(command)
        assert len(words) == 4, f"{block.where}: only `python -m examples NAME` is handled"
        run = offline_run(words[3])
        if run.log.exists():
            (self.workdir / run.log.name).write_bytes(run.log.read_bytes())
        return run.returncode, run.stdout + run.stderr

    def cvdiag(self, command: str, block: Block) -> tuple[int, str]:
        """Run a cvdiag command line in the working directory: (exit code, stdout + stderr)."""
        self.stop_server()
        words = shlex.split(command)
        if words[1:2] == ["demo"]:
            done = self.resources.demo
            return done.returncode, done.stdout + done.stderr
        logs = re.findall(r"[\w.-]+\.log\b", command)
        for log in logs:
            if not (self.workdir / log).exists():
                data = self.resources.log(log)
                if data is not None:
                    (self.workdir / log).write_bytes(data)
        if "<test-id>" in command:
            log = logs[0]
            first = next(
                line for line in (self.workdir / log).read_text().splitlines() if "CVDIAG {" in line
            )
            test_id = json.loads(first[first.index("{") :])["test_id"]
            command = command.replace("<test-id>", test_id)
            words = shlex.split(command)
        if re.search(r"[|;&<>$`]", command):
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=self.workdir,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=60,
                env=clean_env(
                    PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
                ),
            )
            return done.returncode, done.stdout
        out, err = io.BytesIO(), io.StringIO()
        stdout = io.TextIOWrapper(out, encoding="utf-8")
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
            code = cvdiag_main(words[1:])
            stdout.flush()
        return code, out.getvalue().decode("utf-8") + err.getvalue()

    def start_server(self, words: list[str], env: dict[str, str], block: Block) -> None:
        self.stop_server()
        target: Path | None = None
        if "|" in words:
            at = words.index("|")
            words, tail = words[:at], words[at + 1 :]
            assert tail[:1] == ["tee"], f"{block.where}: only `| tee FILE` is handled"
            target = self.workdir / tail[-1]
        elif ">" in words:
            at = words.index(">")
            words, target = words[:at], self.workdir / words[at + 1]
        port = free_port()
        if words[0] == "uvicorn":
            argv = [sys.executable, "-m", "uvicorn", *words[1:], "--host", "127.0.0.1"]
            argv += ["--port", str(port)]
        else:
            argv = [sys.executable, str(self.resolve(words[1])), *words[2:]]
        full_env = clean_env(**{**env, "PORT": str(port), **self.resources.provider_env()})
        otlp = None
        if any(key.startswith("OTEL_") for key in env) or _truthy(env.get("CVDIAG_OTEL")):
            otlp = self.resources.otlp
            full_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp.url
            otlp_posts = len(otlp.posts)
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
        )
        stdout = target or self.workdir / f".server-{block.line}.out"
        stderr = self.workdir / f".server-{block.line}.err"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = subprocess.Popen(argv, cwd=self.workdir, stdout=out, stderr=err, env=full_env)
        self.server = Server(process, port, stdout, stderr, env, block.where, self.app_of(words))
        if otlp is not None:
            self.server.otlp = (otlp, otlp_posts)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(
                    f"{block.where}: the server did not start:\n{stderr.read_text()}",
                    pytrace=False,
                )
            time.sleep(0.05)

    def app_of(self, words: list[str]) -> Any:
        """The app a server command serves, for its routes: an example's, or the page's."""
        target = words[1]
        if target.startswith("examples."):
            target = target.split(":")[0].replace(".", "/") + ".py"
        if target.startswith("examples/"):
            return runpy.run_path(str(ROOT / target), run_name="docs_example").get("app")
        return self.app

    def resolve(self, path: str) -> Path:
        if path.startswith("examples/"):
            return ROOT / path
        return self.workdir / path

    def stop_server(self, *, check: bool = True) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        try:
            if check and not server.requests:
                self.hit(f"http://127.0.0.1:{server.port}", None, server)
        finally:
            server.process.send_signal(signal.SIGINT)
            try:
                server.process.wait(15)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait()
        if not check:
            return
        output = server.stdout.read_text(encoding="utf-8")
        envelopes = [
            json.loads(line[line.index("CVDIAG {") + len("CVDIAG ") :])
            for line in output.splitlines()
            if "CVDIAG {" in line
        ]
        for env in envelopes:
            assert_valid(env)
        if server.otlp is not None:
            receiver, before = server.otlp
            assert len(receiver.posts) > before, f"{server.where}: nothing was exported"
        if not _truthy(server.env.get("CVDIAG_BACKEND_EMITTER")):
            assert not envelopes, f"{server.where}: envelopes while cvdiag was off"
            return
        for test_id in server.test_ids:
            assert terminal_for(envelopes, test_id), (
                f"{server.where}: no terminal envelope for {test_id}:\n{output}"
                f"\n{server.stderr.read_text()}"
            )

    def hit(self, url: str, block: Block | None, server: Server | None = None) -> str:
        """One request to the app's first plain route; returns its test id."""
        method, path, params = first_route(server.app if server else self.app)
        where = block.where if block else server.where if server else "?"
        test_id = f"snippet-{self.page.stem}-{block.line if block else 'server'}".lower()
        response = httpx.request(
            method,
            url + path,
            params=params,
            headers={"x-test-id": test_id},
            json={} if method in ("POST", "PUT", "PATCH") else None,
            timeout=30,
        )
        assert response.status_code < 500, f"{where}: {method} {path}: {response.status_code}"
        if server is not None:
            server.requests += 1
            server.test_ids.append(test_id)
        return test_id

    def curl(self, args: list[str], block: Block) -> None:
        server = self.server
        assert server is not None, f"{block.where}: curl, but no server is running"
        method, url, data, max_time = None, None, None, None
        headers: dict[str, str] = {}
        words = iter(args)
        for word in words:
            if word in ("-N", "--no-buffer", "-s", "--silent", "-S", "--show-error", "-sS"):
                continue
            if word in ("-H", "--header"):
                key, _, value = next(words).partition(":")
                headers[key.strip().lower()] = value.strip()
            elif word in ("-d", "--data", "--data-raw"):
                data = next(words)
            elif word in ("-X", "--request"):
                method = next(words)
            elif word in ("-m", "--max-time"):
                max_time = float(next(words))
            elif word.startswith("-"):
                pytest.fail(f"{block.where}: curl option {word} is not handled", pytrace=False)
            else:
                url = word
        assert url is not None, f"{block.where}: curl without a URL"
        parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        assert parts.hostname in ("localhost", "127.0.0.1"), f"{block.where}: curl {url}"
        url = parts._replace(netloc=f"127.0.0.1:{server.port}").geturl()
        if data is not None:
            headers.setdefault("content-type", "application/x-www-form-urlencoded")
        method = method or ("POST" if data is not None else "GET")
        # --max-time counts from the stream's first bytes, not from the connection as curl's
        # does: on a busy machine curl's 0.1 s can pass before the app has sent anything, and
        # the client then leaves at the first byte, a story other than the page's (a client
        # leaving mid-stream).
        deadline: float | None = None
        with httpx.stream(method, url, headers=headers, content=data, timeout=30) as response:
            assert 200 <= response.status_code < 300, f"{block.where}: curl {url}: {response}"
            for _ in response.iter_raw():
                if deadline is None:
                    deadline = time.monotonic() + (max_time if max_time is not None else 30)
                if time.monotonic() > deadline:
                    assert max_time is not None, f"{block.where}: curl {url} took too long"
                    break  # --max-time: the client gives up, as curl does
        server.requests += 1
        if "x-test-id" in headers:
            server.test_ids.append(headers["x-test-id"])

    def script(self, words: list[str], env: dict[str, str], block: Block) -> None:
        server = self.server
        assert server is not None, f"{block.where}: {words[1]}, but no server is running"
        done = subprocess.run(
            [sys.executable, str(self.resolve(words[1])), *words[2:]],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(**{**env, "PORT": str(server.port), **self.resources.provider_env()}),
        )
        assert done.returncode == 0, f"{block.where}: {words[1]}:\n{done.stdout}{done.stderr}"
        server.requests += 1
        if "TEST_ID" in env:
            server.test_ids.append(env["TEST_ID"])

    def pytest(self, words: list[str], block: Block) -> None:
        quickstart = "&& .venv/bin/pytest\n" in block.code
        if self.page == ROOT / "README.md" and quickstart and words == ["pytest"]:
            # The Quickstart's test command is this very suite: .ci/run runs it as written.
            ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
            assert "## Quickstart" in ci, ".ci/run no longer runs the README's test command"
            return
        assert self.test_files, f"{block.where}: pytest, but the page defines no test"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *words[1:]],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(),
        )
        assert done.returncode == 0, f"{block.where}: pytest failed:\n{done.stdout}{done.stderr}"
        self.tests_ran = True


def shell_commands(code: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        commands += [part.strip() for part in line.split(" && ")]
    return commands


def first_route(app: Any) -> tuple[str, str, dict[str, str]]:
    """The first route a plain request can reach: (method, path, required query parameters)."""
    for route in getattr(app, "routes", []):
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if not path or not methods or "{" in path or path in FASTAPI_DOC_ROUTES:
            continue
        method = "GET" if "GET" in methods else sorted(methods)[0]
        dependant = getattr(route, "dependant", None)
        params = {
            field.alias: "hi"
            for field in getattr(dependant, "query_params", [])
            if field.field_info.is_required()
        }
        return method, path, params
    return "GET", "/", {}


def terminal_for(envelopes: list[Mapping[str, Any]], test_id: str) -> bool:
    return any(e["test_id"] == test_id and e["boundary"] in TERMINALS for e in envelopes)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# --- the tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_of_the_page_runs(
    page: Path,
    tmp_path: Path,
    resources: Resources,
    cvdiag_events: CvdiagEvents,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Page(page, tmp_path, resources, cvdiag_events, monkeypatch).run()


def test_every_block_declares_a_language_this_test_knows() -> None:
    unknown = [f"{b.where} ({b.lang or 'none'})" for b in all_blocks() if b.lang not in LANGUAGES]
    assert not unknown


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_fence_is_missed(page: Path) -> None:
    fences = re.findall(r"^[ \t]*```", page.read_text(encoding="utf-8"), re.M)
    assert len(fences) == 2 * len(blocks(page))


def test_skips_are_rare_and_justified() -> None:
    skips = [(b.where, b.skip_reason) for b in all_blocks() if b.skip_reason is not None]
    assert all(reason for _, reason in skips), skips
    assert len(skips) == EXPECTED_SKIPS, skips


#: ``pip …`` in inline code, in running text: it must work as written, like a block's.
INLINE_PIP = re.compile(r"`(pip (?:install|wheel) [^`]+)`")


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_inline_install_line_works_against_this_repository(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for command in INLINE_PIP.findall(text):
        check_pip(shlex.split(command)[1:], f"{page.relative_to(ROOT)}: `{command}`")


def test_the_install_check_refuses_what_would_not_work() -> None:
    for command in (
        "pip install cvdiag",
        "pip install 'cvdiag[otel]'",
        "pip install dist/cvdiag-0.0.0-py3-none-any.whl",
        "pip install -e '.[nope]'",
    ):
        with pytest.raises(AssertionError):
            check_pip(shlex.split(command)[1:], "here")
    check_pip(shlex.split(f"pip install '{wheel_name()}[demo]'")[1:], "here")


def test_the_readme_quickstart_is_exactly_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^## Quickstart\s*^```bash\n(.*?)^```", text, re.M | re.S)
    assert block is not None
    # Two lines for a fresh machine, each making its own environment with only the extras its
    # command needs: the demo needs uvicorn, httpx and websockets, not mypy or the LLM SDKs.
    assert block.group(1).splitlines() == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[demo]' && .venv/bin/cvdiag demo",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/pytest",
    ]


def test_the_shape_comparison_catches_a_wrong_sample() -> None:
    output = "test id run-1: 3 envelopes over 2.5 ms\n  class     healthy\n"
    assert_same_shape(["test id run-1: 11 envelopes over 10 ms", "  class  healthy"], output, "ok")
    assert_same_shape(["test id run-1: 9 env …"], output, "prefix")
    with pytest.raises(pytest.fail.Exception):
        assert_same_shape(["  class     stalled-backend"], output, "wrong")
    with pytest.raises(pytest.fail.Exception):
        assert_same_shape(
            ["  class     healthy", "test id a1: 3 envelopes over 2.5 ms"], output, "order"
        )


def test_the_shape_comparison_ignores_only_the_timing_of_a_client_abort() -> None:
    """The failure a newcomer's busy machine gave: the same story, the LLM call caught at
    another moment. It matches; a wrong class or a wrong end of the stream still does not."""
    sample = [
        "class     client-abort",
        "reason    the client ended the stream (rst/client_disconnect after 156 bytes) at +103"
        " ms; LLM call fake/fake-chat-1 was streaming (first token at +51 ms)",
    ]
    busy = (
        "class     client-abort\n"
        "reason    the client ended the stream (rst/client_disconnect after 156 bytes) at +98"
        " ms; LLM call fake/fake-chat-1 had begun only 7ms before, unanswered\n"
    )
    assert_same_shape(sample, busy, "busy")
    for wrong in (
        busy.replace("client-abort", "stalled-backend"),
        busy.replace("client ended the stream", "client was found gone"),
        busy.replace("LLM call fake/fake-chat-1", "LLM call fake/other-model"),
        busy.replace(
            "LLM call fake/fake-chat-1 had begun only 7ms before, unanswered",
            "its LLM call had answered",
        ),
    ):
        with pytest.raises(pytest.fail.Exception):
            assert_same_shape(sample, wrong, "wrong")
