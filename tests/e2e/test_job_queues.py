"""The job queues' recipes of docs/frameworks.md, run as users run them: real workers, real Redis.

A FastAPI route (uvicorn, a process of its own, stdout kept as ``web.log``) enqueues an agent
job and answers ``202`` with a small JSON body; a Celery worker (its defaults: the prefork pool,
stdout redirected into its logger), an arq worker, an RQ worker (a work horse forked per job) or
a Dramatiq worker (stdout kept as ``worker.log``) runs it
against the local fake provider. The recipes' files are written from the page as they are;
the test adds one thing around the web app, an inner middleware that holds the response's last
body message until the worker's log shows the job's LLM call begun, and the provider answers
only once the web's log shows the request's terminal: so the job's call is outstanding as the
request ends and answers after it, every time, as it does in production whenever the job is
quick to start.

Per queue, one worker and one web server shared by the tests: a job whose call answers, one
whose call times out, one whose call the provider fails; each judged by ``cvdiag classify`` over
both logs, with the job's envelopes under the request's test id and trace. For Celery, every
envelope is a whole line of the worker's stdout, stderr says once which path is taken, and
Celery's own log records are untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cvdiag.logs.reading import split_envelope
from examples.fake_provider import FakeProvider, serve_fake_provider
from tests.e2e.test_frameworks import missing, recipe_code
from tests.support.cli import cvdiag
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
REDIS = shutil.which("redis-server")

#: The recipes each queue runs, by the file the page names.
FILES = {
    "celery": {"tasks.py": "celery-tasks", "web.py": "celery-web"},
    "arq": {"jobs.py": "arq-jobs", "web.py": "arq-web"},
    "rq": {"jobs.py": "rq-jobs", "web.py": "rq-web"},
    "dramatiq": {"actors.py": "dramatiq-actors", "web.py": "dramatiq-web"},
}
QUEUES = list(FILES)
#: Each worker as its page says to run it (Dramatiq on one process and one thread: the tests
#: send one job at a time, and the machine is shared).
WORKER = {
    "celery": [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--loglevel=INFO"],
    "arq": [sys.executable, "-m", "arq", "jobs.WorkerSettings"],
    "rq": [str(Path(sys.executable).with_name("rq")), "worker"],
    "dramatiq": [
        *(str(Path(sys.executable).with_name("dramatiq")), "actors"),
        *("--processes", "1", "--threads", "1"),
    ],
}
#: What a worker writes once it takes jobs (on its stdout or its stderr).
READY = {
    "celery": "ready.",
    "arq": "Starting worker",
    "rq": "Listening on",
    "dramatiq": "ready for action",
}

#: Around the recipe's web app, innermost: the response's last body message waits until the
#: worker's log shows the job's LLM call begun (see the module docstring).
HELD = """
import asyncio
import os

from starlette.middleware import Middleware

from web import app


class HoldLastBody:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        test_id = dict(scope["headers"]).get(b"x-test-id", b"").decode()
        needle = f'"test_id":"{test_id}"'

        async def held(message):
            if message["type"] == "http.response.body" and not message.get("more_body"):
                for _ in range(2000):
                    with open(os.environ["WORKER_LOG"], encoding="utf-8") as log:
                        if any(
                            needle in line and "backend.llm.call.start" in line for line in log
                        ):
                            break
                    await asyncio.sleep(0.01)
            await send(message)

        await self.app(scope, receive, held)


app.user_middleware.append(Middleware(HoldLastBody))
"""


def _absent(queue: str) -> str | None:
    if REDIS is None:
        return "redis-server not installed"
    lacking = sorted({d for recipe in FILES[queue].values() for d in missing(recipe)})
    return f"{', '.join(lacking)} not installed" if lacking else None


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@contextlib.contextmanager
def _process(
    args: list[str], cwd: Path, env: dict[str, str], out: Path, err: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=stdout, stderr=stderr, start_new_session=True
        )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if REDIS is None:
        pytest.skip("redis-server not installed")
    port = free_port()
    where = tmp_path_factory.mktemp("redis")
    args = [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    with _process(args, where, dict(os.environ), where / "out", where / "err"):
        _wait(lambda: _listening(port), "redis-server")
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider(reply="A summary from the fake provider", stall_limit=20.0)
    with serve_fake_provider(fake) as base_url:
        fake.base_url = base_url  # type: ignore[attr-defined]
        yield fake


class Deployment:
    """One queue's web server and worker, their logs, and the requests sent to them."""

    def __init__(self, queue: str, where: Path, url: str, provider: FakeProvider) -> None:
        self.queue = queue
        self.where = where
        self.url = url
        self.provider = provider
        self.web_log = where / "web.log"
        self.worker_out = where / "worker.out"
        self.worker_err = where / "worker.err"
        #: Dramatiq's command sends its worker processes' stdout to its own stderr (the
        #: page says so): that is its worker's log.
        self.worker_log = self.worker_err if queue == "dramatiq" else self.worker_out

    def lines(self, log: Path) -> list[str]:
        return log.read_text(encoding="utf-8", errors="replace").splitlines()

    def envelopes(self, log: Path, test_id: str) -> list[dict[str, Any]]:
        found = []
        for line in self.lines(log):
            text, aside = split_envelope(line.encode())
            assert not aside, f"{log.name}: a line set aside: {line!r}"
            if text is not None:
                envelope = json.loads(text)
                if envelope["test_id"] == test_id:
                    found.append(envelope)
        return found

    def enqueue(self, test_id: str, text: str) -> dict[str, Any]:
        """Send the request, wait for the job's agent to exit; the 202's body."""
        self.provider.first_byte_when = lambda: any(
            '"backend.response.complete"' in line and test_id in line
            for line in self.lines(self.web_log)
        )
        response = httpx.post(
            f"{self.url}/summaries",
            json={"text": text},
            headers={"x-test-id": test_id},
            timeout=30,
        )
        assert response.status_code == 202, response.text
        _wait(
            lambda: any(
                e["boundary"] == "backend.agent.exit"
                for e in self.envelopes(self.worker_log, test_id)
            ),
            f"the job of {test_id} to end",
        )
        body: dict[str, Any] = response.json()
        return body

    def classify(self, test_id: str) -> dict[str, Any]:
        done = cvdiag("classify", "--json", test_id, str(self.web_log), str(self.worker_log))
        assert done.returncode == 0, done.stderr
        verdict: dict[str, Any] = json.loads(done.stdout)
        return verdict


@pytest.fixture(scope="module", params=QUEUES)
def deployment(
    request: pytest.FixtureRequest,
    redis_url: str,
    provider: FakeProvider,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    queue: str = request.param
    absent = _absent(queue)
    if absent is not None:
        pytest.skip(f"{queue} recipes: {absent}")
    where = tmp_path_factory.mktemp(queue)
    for name, recipe in FILES[queue].items():
        (where / name).write_text(recipe_code(recipe), encoding="utf-8")
    (where / "held.py").write_text(HELD, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(where)]),
        "CVDIAG_BACKEND_EMITTER": "1",
        "CVDIAG_VERBOSE": "1",
        "REDIS_URL": redis_url,
        "OPENAI_BASE_URL": f"{provider.base_url}/v1",  # type: ignore[attr-defined]
        "OPENAI_API_KEY": "sk-test-job-queues",
        "LLM_TIMEOUT": "1",
    }
    for name in ("PYTHONUNBUFFERED", "CVDIAG_DEBUG", "CVDIAG_FILE"):
        env.pop(name, None)
    deploy = Deployment(queue, where, "", provider)
    deploy.worker_out.touch()
    deploy.worker_err.touch()
    worker = [*WORKER[queue], *(["--url", redis_url] if queue == "rq" else [])]

    def ready() -> bool:
        said = deploy.worker_err.read_text(errors="replace")
        return READY[queue] in said + deploy.worker_out.read_text(errors="replace")

    with _process(worker, where, env, deploy.worker_out, deploy.worker_err) as process:
        _wait(lambda: ready() or process.poll() is not None, f"the {queue} worker")
        assert process.poll() is None, deploy.worker_err.read_text(errors="replace")
        port = free_port()
        web = [sys.executable, "-m", "uvicorn", "held:app", "--port", str(port)]
        web += ["--host", "127.0.0.1", "--log-level", "warning"]
        web_env = {**env, "WORKER_LOG": str(deploy.worker_log)}
        with _process(web, where, web_env, deploy.web_log, where / "web.err") as server:
            _wait(lambda: _listening(port) or server.poll() is not None, "the web server")
            assert server.poll() is None, (where / "web.err").read_text(errors="replace")
            deploy.url = f"http://127.0.0.1:{port}"
            yield deploy


def _job_joins_its_request(deploy: Deployment, test_id: str, job_id: str) -> None:
    """The job's envelopes carry the request's test id and trace, hang under its ingress span,
    and name the job; the provider got the test id."""
    web = deploy.envelopes(deploy.web_log, test_id)
    ingress = next(e for e in web if e["boundary"] == "backend.request.ingress")
    job = deploy.envelopes(deploy.worker_log, test_id)
    enter = next(e for e in job if e["boundary"] == "backend.agent.enter")
    start = next(e for e in job if e["boundary"] == "backend.llm.call.start")
    assert {e["trace_id"] for e in job} == {ingress["trace_id"]}
    assert enter["parent_span_id"] == ingress["span_id"]
    assert enter["metadata"]["run_id"] == start["metadata"]["run_id"] == job_id.lower()
    assert any(seen.test_id == test_id for seen in deploy.provider.requests)


def test_a_job_whose_call_answers_after_its_request_is_healthy(deployment: Deployment) -> None:
    test_id = f"d4-jobs-{deployment.queue}-answers"
    job_id = deployment.enqueue(test_id, "Summarize this.")["job_id"]
    _job_joins_its_request(deployment, test_id, job_id)
    job = deployment.envelopes(deployment.worker_log, test_id)
    response = next(e for e in job if e["boundary"] == "backend.llm.call.response")
    assert response["outcome"] == "ok"
    web = deployment.envelopes(deployment.web_log, test_id)
    done = next(e for e in web if e["boundary"] == "backend.response.complete")
    assert done["metadata"]["http_status"] == 202
    assert done["ts"] < response["ts"]  # the call outlived the request: the case at issue
    verdict = deployment.classify(test_id)
    assert verdict["flap_class"] == "healthy", verdict
    assert "no byte reached the client" not in verdict["reason"]


def test_a_job_whose_call_times_out_is_a_stalled_backend(deployment: Deployment) -> None:
    test_id = f"d4-jobs-{deployment.queue}-times-out"
    job_id = deployment.enqueue(test_id, "Summarize this. [fake:stall]")["job_id"]
    _job_joins_its_request(deployment, test_id, job_id)
    verdict = deployment.classify(test_id)
    assert verdict["flap_class"] == "stalled-backend", verdict
    assert "no byte reached the client" not in verdict["reason"]
    assert job_id.lower() in verdict["reason"] or "background run" in verdict["reason"]


def test_a_job_whose_call_the_provider_fails_is_a_provider_error(deployment: Deployment) -> None:
    test_id = f"d4-jobs-{deployment.queue}-fails"
    job_id = deployment.enqueue(test_id, "Summarize this. [fake:503]")["job_id"]
    _job_joins_its_request(deployment, test_id, job_id)
    verdict = deployment.classify(test_id)
    assert verdict["flap_class"] == "provider-error", verdict
    assert "no byte reached the client" not in verdict["reason"]


def test_every_command_reads_both_logs_whole(deployment: Deployment) -> None:
    """Run last in the module (the three stories are in the logs): every CVDIAG line of both
    logs is whole and read; ``ls`` and ``report`` given both files tell the three stories."""
    ids = [f"d4-jobs-{deployment.queue}-{case}" for case in ("answers", "times-out", "fails")]
    for log in (deployment.web_log, deployment.worker_log):
        for line in deployment.lines(log):
            if "CVDIAG {" in line:
                text, aside = split_envelope(line.encode())
                assert text is not None, line
                assert not aside, line
                json.loads(text)
    logs = [str(deployment.web_log), str(deployment.worker_log)]
    listed = cvdiag("ls", "--json", *logs)
    assert listed.returncode == 0, listed.stderr
    classes = {row["test_id"]: row["flap_class"] for row in _rows(listed.stdout)}
    assert [classes.get(i) for i in ids] == ["healthy", "stalled-backend", "provider-error"]
    page = deployment.where / "report.html"
    made = cvdiag("report", "-o", str(page), *logs)
    assert made.returncode in (0, 1), made.stderr
    html = page.read_text(encoding="utf-8")
    assert all(i in html for i in ids[1:])


def _rows(stdout: str) -> list[dict[str, Any]]:
    value = json.loads(stdout)
    rows = value["test_ids"] if isinstance(value, dict) else value
    assert isinstance(rows, list)
    return rows


@pytest.mark.parametrize("deployment", ["celery"], indirect=True)
def test_celery_defaults_stdout_into_its_logger_and_every_envelope_still_a_line(
    deployment: Deployment,
) -> None:
    """Celery's default ``worker_redirect_stdouts``: the envelopes are on the worker's own
    stdout, never inside Celery's log records; stderr says so once; Celery's records stand."""
    err = deployment.worker_err.read_text(encoding="utf-8", errors="replace")
    said = [line for line in err.splitlines() if "hands its writes to a logger" in line]
    assert len(said) == 1, said
    assert "CVDIAG {" not in err  # no envelope went through the logger
    assert "ready." in err  # Celery's own records, as Celery writes them
    assert any("Task tasks.summarize[" in line and "succeeded" in line for line in err.splitlines())
    envelopes = [line for line in deployment.lines(deployment.worker_log) if "CVDIAG {" in line]
    assert envelopes
    assert all(line.startswith("CVDIAG {") for line in envelopes)
