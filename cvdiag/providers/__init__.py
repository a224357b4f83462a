"""What cvdiag knows about LLM providers, in one place: adding a provider touches only here.

- ``catalog``: the known providers (cvdiag's own name, as envelopes carry it, and the
  OpenTelemetry ``gen_ai.provider.name`` value), the hosts that identify them and the endpoints
  (path ending → ``gen_ai.operation.name``, API flavor);
- ``detect``: which outbound request is an LLM call, of which provider and operation, and what
  its request says (model, streaming, a prompt token estimate, server address and port);
- ``usage``: what a response says (input and output tokens, response model and id, finish
  reasons), read from each provider's JSON bodies and SSE events.

The httpx transports use ``detect`` and ``usage`` to record calls; the OpenTelemetry bridge uses
``catalog`` to name them. Nothing here imports httpx or OpenTelemetry's SDK.

May import: cvdiag.core.
"""

from __future__ import annotations

from cvdiag.providers.catalog import (
    DEFAULT_LLM_HOSTS,
    DEFAULT_LLM_PATHS,
    Endpoint,
    convention_name,
)
from cvdiag.providers.detect import Detector, RequestFacts, describe_request
from cvdiag.providers.usage import ResponseFacts

__all__ = [
    "DEFAULT_LLM_HOSTS",
    "DEFAULT_LLM_PATHS",
    "Detector",
    "Endpoint",
    "RequestFacts",
    "ResponseFacts",
    "convention_name",
    "describe_request",
]
