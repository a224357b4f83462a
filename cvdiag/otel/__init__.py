"""The OpenTelemetry bridge: the same boundaries as spans, span events and GenAI metrics.

Holds the bridge (``bridge.py``: the server span, agent and LLM-call spans), its metric
instruments (``instruments.py``: the GenAI histograms, streaming ones included, and the abort
counter), the span-event sink (``span_events.py``: every envelope on the current span) and the
GenAI span name, attributes and metric attributes of an LLM call (``genai.py``, which knows a
call only by its ``CallView`` protocol). Only opentelemetry-api is imported; the emitter reaches
the bridge through ``cvdiag.pipeline.bridge.Bridge``.

May import: cvdiag.core, cvdiag.providers, cvdiag.scrubbing.
"""
