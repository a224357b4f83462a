"""Reading CVDIAG logs: log inputs (plain files, gzip, stdin), envelopes out of them block by
block and merged in time order, Kubernetes partial lines joined, a fixed string searched in
byte ranges, a large file split into ranges read by forked workers, folded per-test values, and
lines checked against the schema, and CopilotKit aimock's journal read as the mock provider's
lines. What the lines mean is ``cvdiag.diagnosis``'s job, which reads
through this part; nothing here knows a class or a rule.

May import: cvdiag.schema, cvdiag.scrubbing.
"""
