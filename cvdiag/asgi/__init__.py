"""The request path: ``CvdiagMiddleware``, pure ASGI, and one exchange per request.

Holds the middleware: on or off, the request's context and ingress (``middleware.py``); what
HTTP and WebSocket exchanges share, with the one terminal (``exchange.py``); one HTTP request
(``http_exchange.py``); one WebSocket (``websocket_exchange.py``); edge headers, bounded then
scrubbed (``headers.py``); the incremental SSE parser (``sse.py``); the lifespan's flush at
shutdown (``lifespan.py``).

May import: cvdiag.core, cvdiag.otel, cvdiag.pipeline, cvdiag.schema, cvdiag.scopes,
cvdiag.scrubbing.
"""
