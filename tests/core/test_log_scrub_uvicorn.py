"""uvicorn run as docs/logging.md says, the scrub filter installed: an app's exception carrying
a key reaches uvicorn's stderr traceback scrubbed. Without the filter it does not (the door is
real). A real uvicorn process on 127.0.0.1, its stderr read once it has ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cvdiag.scrubbing.rules import fake
from tests.support.servers import free_port

KEY = "sk-proj-" + fake("url", 48)

APP = """
import os

import cvdiag
from starlette.applications import Starlette
from starlette.routing import Route

{install}

async def boom(request):
    raise RuntimeError("upstream rejected key " + os.environ["LEAKY_KEY"])

app = Starlette(routes=[Route("/boom", boom)])
app.add_middleware(cvdiag.CvdiagMiddleware)
"""

#: docs/logging.md's --log-config, as a JSON file.
LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"scrub": {"()": "cvdiag.ScrubFilter"}},
    "formatters": {"plain": {"format": "%(levelname)s %(name)s: %(message)s"}},
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
            "filters": ["scrub"],
            "formatter": "plain",
        }
    },
    "loggers": {
        "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"level": "INFO"},
        "uvicorn.access": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
    },
}


def serve_and_fail(tmp_path: Path, install: str, *options: str) -> str:
    """uvicorn serving the app in ``tmp_path``, one request that raises: its stderr at the end."""
    (tmp_path / "leaky.py").write_text(APP.format(install=install), encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "leaky:app", "--port", str(port), *options],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "LEAKY_KEY": KEY, "CVDIAG_BACKEND_EMITTER": "1"},
    )
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            while True:
                try:
                    assert client.get("/boom").status_code == 500
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.communicate()[1].decode()
                    assert time.monotonic() < deadline, "uvicorn did not start"
                    time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert b"[REDACTED]" in out  # cvdiag's own error.caught, scrubbed as ever
    text = err.decode("utf-8", "replace")
    assert "Exception in ASGI application" in text
    assert "Traceback (most recent call last)" in text
    return text


def test_with_the_log_config_the_traceback_is_scrubbed(tmp_path: Path) -> None:
    config = tmp_path / "logging.json"
    config.write_text(json.dumps(LOG_CONFIG), encoding="utf-8")
    err = serve_and_fail(tmp_path, "", "--log-config", str(config))
    assert KEY not in err
    assert "RuntimeError: upstream rejected key [REDACTED]" in err


@pytest.mark.parametrize("install", ["cvdiag.install_scrub_filter()", ""], ids=["one-line", "none"])
def test_the_one_line_in_the_app_module(tmp_path: Path, install: str) -> None:
    err = serve_and_fail(tmp_path, install)
    if install:
        assert KEY not in err
        assert "RuntimeError: upstream rejected key [REDACTED]" in err
    else:  # the leak the filter closes: uvicorn prints the key in full
        assert f"RuntimeError: upstream rejected key {KEY}" in err
