"""The backend's own outbound calls: httpx and httpx2 transports.

Holds the transports and how they install on a client (``transports.py``); what they do to
each request: their options, header forwarding and an ``llm_call`` per LLM request
(``exchange.py``); the body wrappers, as httpx's or httpx2's own stream classes
(``streams.py``); following an LLM response's body to the call's one end (``tracking.py``);
what that body says, read as it passes: decoding, SSE lines, a bounded JSON body (``body.py``).
What a provider's request and answer say is read from ``cvdiag.providers``.

May import: cvdiag.core, cvdiag.pipeline, cvdiag.providers, cvdiag.scopes, cvdiag.scrubbing.
"""
