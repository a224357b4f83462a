"""Which outbound request is an LLM call, and what its request says.

The host decides the provider when it is known (with its port first, for local fakes and
proxies; then without; then by suffix); else the path ending assumes one. The path ending also
decides the operation (``ENDPOINTS``). The request body is parsed only for its model, whether it
streams, a length-based prompt token estimate and a fingerprint (a short hash,
``fingerprint.py``): nothing of the prompt is kept.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final

import orjson

from cvdiag.providers.catalog import CUSTOM_ENDPOINT, DEFAULT_LLM_HOSTS, ENDPOINTS, Endpoint
from cvdiag.providers.fingerprint import fingerprint

#: Request bodies are parsed only up to this size.
BODY_PARSE_MAX: Final = 1024 * 1024
#: Characters of a model name read; the emitter scrubs it as an identifier, then keeps 256.
_MODEL_MAX: Final = 1024
#: Azure OpenAI names the deployment in the path; Gemini and Vertex AI name the model there.
_MODEL_IN_PATH: Final = (
    re.compile(r"/deployments/([^/]{1,200})/"),
    re.compile(r"/models/([^/:]{1,200}):"),
)
_SUFFIX_MARKS: Final = (".", "-")


@dataclasses.dataclass(frozen=True)
class Target:
    """An LLM call's provider (cvdiag's name) and endpoint."""

    provider: str
    endpoint: Endpoint


@dataclasses.dataclass(frozen=True)
class Detector:
    """The host and path maps, normalized once per transport."""

    hosts: Mapping[str, str]
    host_suffixes: tuple[tuple[str, str], ...]
    paths: tuple[tuple[str, Target], ...]

    @classmethod
    def build(
        cls, *, llm_hosts: Mapping[str, str] | None, llm_paths: Mapping[str, str] | None
    ) -> Detector:
        given = {**DEFAULT_LLM_HOSTS, **(llm_hosts or {})}
        merged = {key.lower(): value for key, value in given.items()}
        if llm_paths is None:
            paths = {ending: Target(e.provider, e) for ending, e in ENDPOINTS.items()}
        else:
            paths = {
                ending.rstrip("/"): Target(
                    provider, ENDPOINTS.get(ending.rstrip("/"), CUSTOM_ENDPOINT)
                )
                for ending, provider in llm_paths.items()
            }
        return cls(
            hosts={k: v for k, v in merged.items() if not k.startswith(_SUFFIX_MARKS)},
            host_suffixes=tuple((k, v) for k, v in merged.items() if k.startswith(_SUFFIX_MARKS)),
            # Longest first, so "/chat/completions" is preferred to "/completions".
            paths=tuple(sorted(paths.items(), key=lambda item: -len(item[0]))),
        )

    def target(self, host: str, port: int | None, path: str) -> Target | None:
        """The provider and endpoint of a POST to ``host``:``port`` + ``path``, or None."""
        path = path.rstrip("/")
        assumed = next((target for ending, target in self.paths if path.endswith(ending)), None)
        if assumed is None:
            return None
        host = host.lower()
        provider = self.hosts.get(f"{host}:{port}") if port is not None else None
        if provider is None:
            provider = self.hosts.get(host)
        if provider is None:
            provider = next((n for suffix, n in self.host_suffixes if host.endswith(suffix)), None)
        if provider is None:
            return assumed
        return Target(provider, assumed.endpoint)


@dataclasses.dataclass(frozen=True)
class RequestFacts:
    """What an LLM request says, kept on its call for the span (no prompt text)."""

    operation: str
    api_type: str | None
    streaming: bool
    server_address: str | None
    server_port: int | None
    #: ``fingerprint.fingerprint`` of the body, when it was a JSON object (no prompt text).
    fingerprint: str | None = None


def _text_chars(value: object, depth: int = 0) -> int:
    """Characters of all strings in a parsed JSON body: the basis of the prompt estimate."""
    if isinstance(value, str):
        return len(value)
    if depth > 32:
        return 0
    if isinstance(value, dict):
        return sum(_text_chars(v, depth + 1) for k, v in value.items() if k != "model")
    if isinstance(value, list):
        return sum(_text_chars(v, depth + 1) for v in value)
    return 0


def describe_request(request: Any, endpoint: Endpoint) -> tuple[str, int, RequestFacts]:
    """The model named in ``request``, a prompt token estimate (~4 characters a token) and the
    request's facts. ``request`` is an httpx or httpx2 ``Request``."""
    model: object = None
    parsed: object = None
    estimate = 0
    streaming = endpoint.streams
    try:
        body = request.content  # raises for a streaming upload, which is not read here
    except Exception:
        body = None
    if isinstance(body, bytes) and 0 < len(body) <= BODY_PARSE_MAX:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            model = parsed.get("model")
            estimate = _text_chars(parsed) // 4
            streaming = streaming or parsed.get("stream") is True
    url = request.url
    if not isinstance(model, str) or not model:
        path = str(url.path)
        found = next((m for m in (p.search(path) for p in _MODEL_IN_PATH) if m), None)
        model = found.group(1) if found else "unknown"
    port = url.port
    if port is None:
        port = 443 if url.scheme == "https" else 80 if url.scheme == "http" else None
    facts = RequestFacts(
        operation=endpoint.operation,
        api_type=endpoint.api_type,
        streaming=streaming,
        server_address=str(url.host) or None,
        server_port=port,
        fingerprint=fingerprint(parsed, model) if isinstance(parsed, dict) else None,
    )
    return model[:_MODEL_MAX], estimate, facts
