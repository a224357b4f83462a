"""The one emit path: a boundary in, a line to every sink out.

Holds the emitter and the process-wide ``configure``/``emit``/``flush`` (``emitter.py``); the
gate, the tier in force and DEBUG's bounds (``gate.py``); the envelope dict and the byte-cap
ladder (``envelope.py``); metadata closed, JSON-safe and scrubbed within a budget
(``metadata.py``); the request's own envelopes from formats serialized once per process
(``template.py``, ``template_forms.py``); the protocol the tracing bridge implements
(``bridge.py``); and the one place that names the concrete sinks and bridge an emitter gets
(``assembly.py``).

May import: cvdiag.core, cvdiag.otel, cvdiag.providers, cvdiag.schema, cvdiag.scrubbing,
cvdiag.sinks.
"""
