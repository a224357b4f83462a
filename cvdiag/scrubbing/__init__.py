"""Secret redaction: every free-text value is scrubbed here before it reaches a line.

Holds the entry points, bounded and cached, and identifiers turned into digest placeholders
(``redact.py``); the passes, linear-time, to a fixed point behind one prefilter (``passes.py``);
what is redacted, as data: auth schemes and key names (``rules.py``), vendor token shapes
(``vendors.py``); those rules compiled into bounded patterns and one prefilter (``patterns.py``);
what each match becomes (``matches.py``).
``cvdiag.scrub`` is ``redact.scrub``.

May import: nothing of cvdiag.
"""
