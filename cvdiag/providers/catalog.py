"""The known providers, the hosts that name them, and the endpoints that name an operation.

Envelopes keep cvdiag's own provider names (``openai-compatible``, ``azure-openai``, …): the
CVDIAG v1 ``provider`` field is free text and existing readers filter on these names. The
OpenTelemetry bridge writes the conventions' ``gen_ai.provider.name`` instead, mapped here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from cvdiag.core import conventions as sc

#: Host → provider (cvdiag's name). A key may carry a port (``"127.0.0.1:8001"``); one starting
#: with ``.`` matches any subdomain (and one starting with ``-`` any host ending so).
DEFAULT_LLM_HOSTS: Final[Mapping[str, str]] = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    ".openai.azure.com": "azure-openai",
    ".services.ai.azure.com": "azure-ai-inference",
    ".models.ai.azure.com": "azure-ai-inference",
    "generativelanguage.googleapis.com": "google",
    "aiplatform.googleapis.com": "vertex-ai",
    "-aiplatform.googleapis.com": "vertex-ai",  # regional: us-central1-aiplatform.googleapis.com
    "api.mistral.ai": "mistral",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "api.together.xyz": "together",
    "api.fireworks.ai": "fireworks",
    "api.x.ai": "xai",
    "api.perplexity.ai": "perplexity",
    "api.cohere.com": "cohere",
    "openrouter.ai": "openrouter",
}

#: cvdiag's provider name → the conventions' ``gen_ai.provider.name`` well-known value.
CONVENTION_NAMES: Final[Mapping[str, str]] = {
    "openai": sc.PROVIDER_OPENAI,
    "anthropic": sc.PROVIDER_ANTHROPIC,
    "azure-openai": sc.PROVIDER_AZURE_OPENAI,
    "azure-ai-inference": sc.PROVIDER_AZURE_INFERENCE,
    "google": sc.PROVIDER_GEMINI,
    "gemini": sc.PROVIDER_GEMINI,
    "vertex-ai": sc.PROVIDER_VERTEX_AI,
    "mistral": sc.PROVIDER_MISTRAL,
    "groq": sc.PROVIDER_GROQ,
    "deepseek": sc.PROVIDER_DEEPSEEK,
    "xai": sc.PROVIDER_X_AI,
    "perplexity": sc.PROVIDER_PERPLEXITY,
    "cohere": sc.PROVIDER_COHERE,
    "bedrock": sc.PROVIDER_BEDROCK,
    "aws-bedrock": sc.PROVIDER_BEDROCK,
    "watsonx": sc.PROVIDER_WATSONX,
}

#: Providers that speak OpenAI's API without a well-known value of their own. The conventions
#: make ``gen_ai.provider.name`` the *telemetry flavor* (set "based on the instrumentation's best
#: knowledge", noting that many providers are reached through the OpenAI API): these are
#: ``openai``, and the span's ``cvdiag.provider`` attribute says which endpoint it really was.
OPENAI_COMPATIBLE: Final = frozenset({"openai-compatible", "together", "fireworks", "openrouter"})


def convention_name(provider: str) -> str:
    """``gen_ai.provider.name`` for cvdiag's provider name ``provider``.

    A name that already is a well-known value passes unchanged; an unknown name (a hand-written
    ``llm_call("my-gateway", …)``) is kept as the custom value the conventions allow.
    """
    known = CONVENTION_NAMES.get(provider)
    if known is not None:
        return known
    if provider in OPENAI_COMPATIBLE:
        return sc.PROVIDER_OPENAI
    return provider


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """What a path ending says about a call: its operation, and its API flavor."""

    #: The provider assumed when the host is not in the host map.
    provider: str
    #: ``gen_ai.operation.name``.
    operation: str
    #: ``openai.api.type`` for OpenAI's own API flavors, else None.
    api_type: str | None = None
    #: Whether the endpoint streams whatever the body says (Gemini's ``streamGenerateContent``).
    streams: bool = False


#: Path ending → the endpoint. Longest match wins ("/chat/completions" over "/completions").
ENDPOINTS: Final[Mapping[str, Endpoint]] = {
    "/v1/messages": Endpoint("anthropic", sc.OP_CHAT),
    "/chat/completions": Endpoint(
        "openai-compatible", sc.OP_CHAT, api_type=sc.API_CHAT_COMPLETIONS
    ),
    # The conventions name the Responses API's operation ``chat`` and tell it from Chat
    # Completions by ``openai.api.type``.
    "/responses": Endpoint("openai-compatible", sc.OP_CHAT, api_type=sc.API_RESPONSES),
    "/completions": Endpoint("openai-compatible", sc.OP_TEXT_COMPLETION),
    "/embeddings": Endpoint("openai-compatible", sc.OP_EMBEDDINGS),
    ":generateContent": Endpoint("google", sc.OP_GENERATE_CONTENT),
    ":streamGenerateContent": Endpoint("google", sc.OP_GENERATE_CONTENT, streams=True),
}

#: Path ending → the provider assumed when the host is not in the host map (the public
#: ``llm_paths`` option's shape; each ending's operation comes from ``ENDPOINTS``).
DEFAULT_LLM_PATHS: Final[Mapping[str, str]] = {
    ending: endpoint.provider for ending, endpoint in ENDPOINTS.items()
}
#: A user's own path ending (``llm_paths``) that names no known endpoint is a chat.
CUSTOM_ENDPOINT: Final = Endpoint("openai-compatible", sc.OP_CHAT)
