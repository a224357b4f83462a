"""Diagnosing what the logs say: the facts of one test id, the classifier's rules (providers,
the backend, the edge, time and the client, mocks, broken protocols), the class with its
evidence, a test id's timeline, one line per envelope, and the figures of ``cvdiag stats`` and
``cvdiag ls``. Pure functions over envelopes that ``cvdiag.logs`` read; the ``cvdiag`` command
and the report page are shells around them.

May import: cvdiag.layers, cvdiag.logs, cvdiag.schema.
"""
