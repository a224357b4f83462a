"""The client's side of the story: probe writers, what a test client or a browser saw, as CVDIAG v1
``probe`` lines under the test id it forwarded. ``playwright/`` ships the Playwright fixture file
(``cvdiag.ts``) users drop into their project; ``python -m cvdiag.probe.playwright`` prints it.

May import: cvdiag.core, cvdiag.pipeline, cvdiag.schema, cvdiag.scrubbing, cvdiag.sinks.
"""
