"""``cvdiag report``: one self-contained HTML page for a log — every test id with its class,
failed first, and for each failed one a waterfall to scale, its class with the reason and
evidence ``cvdiag classify`` gives, and its envelopes.

The log is read once to list and classify every test id in memory that does not grow with it
(``gather``, as ``cvdiag ls`` does), then once more for only the envelopes of the test ids drawn
(``story``: bounded per test id, long runs of events and heartbeats folded). ``lanes`` turns a
story into bars; ``page`` and ``detail`` write the HTML, escaping every value from the log for
its context (``markup``); ``assets/`` holds the page's style and script, inlined and allowed by
their hashes in the page's Content-Security-Policy.

May import: cvdiag.compare, cvdiag.core, cvdiag.diagnosis, cvdiag.layers, cvdiag.logs,
cvdiag.runs, cvdiag.schema.
"""

from __future__ import annotations

from cvdiag.report.gather import Report, gather
from cvdiag.report.page import render, write

__all__ = ["Report", "gather", "render", "write"]
