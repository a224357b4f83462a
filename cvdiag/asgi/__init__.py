"""The request path: ``CvdiagMiddleware``, pure ASGI, and one exchange per request.

Holds the middleware: on or off, the request's context and ingress (``middleware.py``); what
HTTP and WebSocket exchanges share, the send path and the one terminal (``exchange.py``), on a
base holding their state and what each boundary says (``boundaries.py``); one HTTP request
(``http_exchange.py``), on its response side: start, body and events counted
(``http_response.py``), and its look at ``receive`` as a late response starts (``look.py``);
one WebSocket (``websocket_exchange.py``); edge headers, bounded then scrubbed (``headers.py``);
the incremental SSE parser (``sse.py``); the lifespan's flush at shutdown (``lifespan.py``).

May import: cvdiag.core, cvdiag.otel, cvdiag.pipeline, cvdiag.schema, cvdiag.scopes,
cvdiag.scrubbing.
"""
