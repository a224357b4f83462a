"""What ``CVDIAG_OTEL=1`` says on stderr about export, with the real SDK installed: span events
are claimed only when an SDK tracer provider would export them, and with none configured the
first request says, once, that nothing will be exported. Each case is a fresh process (the
global tracer provider can be set only once) with a clean environment (no ``OTEL_*``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cvdiag.core.version import BUILD
from cvdiag.otel.bridge import LATE, NOT_EXPORTING

STARTED = f"cvdiag: on at the default tier ({BUILD}), writing to stdout"
CLAIM = f"{STARTED}, opentelemetry span events"

_SCRIPT = """
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from cvdiag import CvdiagMiddleware, get_emitter

exporter = InMemorySpanExporter()


def set_provider():
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


async def hello(request):
    return PlainTextResponse("hi")


app = Starlette(routes=[Route("/", hello)])
app.add_middleware(CvdiagMiddleware)
when = sys.argv[1]
if when == "before":
    set_provider()
get_emitter()  # cvdiag starts: the startup line
if when == "after-start":
    set_provider()
with TestClient(app) as client:
    for _ in range(2):
        client.get("/")
get_emitter().flush()
print("SPANS", len(exporter.get_finished_spans()), file=sys.stderr)
"""


def _run(tmp_path: Path, when: str) -> list[str]:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "CVDIAG_BACKEND_EMITTER": "1",
        "CVDIAG_OTEL": "1",
        # The cvdiag under test, where a checkout is put ahead of an installed one.
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
    }
    done = subprocess.run(
        [sys.executable, str(script), when],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


@pytest.mark.parametrize(
    ("when", "said", "spans"),
    [
        ("before", [CLAIM], 2),
        ("never", [STARTED, f"cvdiag: {NOT_EXPORTING}"], 0),
        ("after-start", [STARTED, f"cvdiag: {LATE}"], 2),
    ],
)
def test_export_is_claimed_only_when_a_tracer_provider_exports(
    tmp_path: Path, when: str, said: list[str], spans: int
) -> None:
    # "never": the SDK is installed but no provider is set, so the API's proxy is in force.
    assert _run(tmp_path, when) == [*said, f"SPANS {spans}"]
