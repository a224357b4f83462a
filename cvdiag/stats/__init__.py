"""The figures of ``cvdiag stats``: per-slug and overall counts and percentiles over a stream of
envelopes in bounded memory, the samples behind the percentiles, and their text for a terminal.
A part of its own beside ``diagnosis``, whose classifier it reads for ``--by-class``: figures
over many test ids are not what one test id says.

May import: cvdiag.diagnosis, cvdiag.logs.
"""
