"""The showcase face: the names the CopilotKit showcase's integrations import from their own
``agents/_cvdiag_backend.py``, so that file becomes ``from cvdiag.showcase import *``.

A thin face over cvdiag's one middleware, one emit path and one scrubber, never a second
implementation: ``CvdiagBackendMiddleware`` (``middleware.py``), ``_RequestCtx``
(``context.py``), ``emit_agent_enter``, ``emit_agent_exit`` and ``LlmCallScope``
(``agents.py``), and ``scrub``. The shared bootstrap is ``cvdiag.showcase.bootstrap``
(``setup``, ``emit_cvdiag``, ``current_tier``). docs/showcase.md lists every difference from the
showcase's own emitter.

It sits on top, beside the package's face: no part imports it.

May import: cvdiag.asgi, cvdiag.core, cvdiag.pipeline, cvdiag.schema, cvdiag.scopes,
cvdiag.scrubbing, cvdiag.sinks.
"""

from __future__ import annotations

from cvdiag.scrubbing.redact import scrub
from cvdiag.showcase.agents import LlmCallScope, emit_agent_enter, emit_agent_exit
from cvdiag.showcase.context import _RequestCtx
from cvdiag.showcase.middleware import CvdiagBackendMiddleware

__all__ = [
    "CvdiagBackendMiddleware",
    "LlmCallScope",
    "_RequestCtx",
    "emit_agent_enter",
    "emit_agent_exit",
    "scrub",
]
