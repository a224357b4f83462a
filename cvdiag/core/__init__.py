"""What every part of cvdiag shares, below the emit path.

Holds ``Settings``, resolved once from the environment (``settings.py``); the request's context in
a ContextVar (``context.py``); the guard that counts and reports cvdiag's own failures
(``guard.py``); what an exception means (``errors.py``); the request's ids on app log lines
(``log_context.py``) and app log lines scrubbed (``log_scrub.py``); the OpenTelemetry
semantic-convention names (``conventions.py``); which outbound hosts get the test id
(``forwarding.py``); and the version (``version.py``).

May import: cvdiag.schema, cvdiag.scrubbing.
"""
