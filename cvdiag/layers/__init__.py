"""The joining of layers: one test id's records split by layer (``probe``, ``backend``,
``aimock``), the clock offset between a probe and its backend bounded from pairs of envelopes
(a send and its ingress, an answer and what the backend sent first), the client's view of the
test id on the backend's clock (each request sent, its head, its first event, how it ended; the
probe's start and exit; a page's first token and console errors), probe records shifted onto
the backend's clock for the commands that draw them, and a test runner's own words on when the
client left. Pure functions and small accumulators over records ``cvdiag.logs`` read; read by
``diagnosis``, ``compare``, ``report`` and ``cli``.

May import: cvdiag.logs, cvdiag.schema.
"""

from __future__ import annotations

from cvdiag.layers.align import aligned
from cvdiag.layers.client import ClientView, Request
from cvdiag.layers.join import Join
from cvdiag.layers.offset import Offset, bound
from cvdiag.layers.split import browser_own, is_probe, layer_of, split

__all__ = [
    "ClientView",
    "Join",
    "Offset",
    "Request",
    "aligned",
    "bound",
    "browser_own",
    "is_probe",
    "layer_of",
    "split",
]
