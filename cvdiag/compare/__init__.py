"""Comparing stories: two test ids matched by structure (``story``), where they split first and
what else differs (``diff``), and over many runs, per test, the failures by class and the facts
that separate them from the passes (``flakes``). Pure functions over stories read by the
command; beside ``runs``, whose tests and attempts name what ``flakes`` counts.

May import: cvdiag.diagnosis, cvdiag.layers, cvdiag.logs, cvdiag.runs, cvdiag.schema.
"""
