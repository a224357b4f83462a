"""Reading CVDIAG logs back: envelopes from files, a test id's timeline, its class, stats, and
schema validation. Pure functions over what was written; the ``cvdiag`` command is a thin shell
around them (``cvdiag.cli``).

May import: cvdiag.schema.
"""
