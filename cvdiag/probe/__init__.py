"""The client's side of a test: what its httpx and httpx2 clients saw, written as CVDIAG v1
``probe`` lines (``layer: probe``) under the test id each request forwarded in ``x-test-id``.

Holds the writer, one emitter whose line sink is the probe log, so the probe's lines are
closed, scrubbed, capped and serialized as the backend's are, with the state of each test id a
test forwarded (``writer.py``); one request as the client saw it, from its send to its end
(``observed.py``); the SSE events of a response body counted as they arrive (``events.py``);
and the hooks on httpx's and httpx2's ``Client`` and ``AsyncClient`` that hand each request to
the writer (``clients.py``). The pytest plugin (``cvdiag.pytest_plugin``) installs it for a
session; nothing here knows pytest. ``playwright/`` ships the Playwright fixture file
(``cvdiag.ts``) users drop into their project, which writes the same lines from a browser or an
API test; ``python -m cvdiag.probe.playwright`` prints it.

May import: cvdiag.core, cvdiag.pipeline, cvdiag.schema, cvdiag.scrubbing, cvdiag.sinks.
"""

from __future__ import annotations

from cvdiag.probe.clients import install, uninstall
from cvdiag.probe.writer import ProbeWriter

__all__ = ["ProbeWriter", "install", "uninstall"]
