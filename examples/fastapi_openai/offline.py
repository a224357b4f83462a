"""``python -m examples fastapi_openai``: the app against the bundled fake provider.

Four visits: a healthy chat turn, then the provider failing three ways, each asked for by a
directive in the user's message, which the app passes to the model like any other text (see
examples/fake_provider.py): an HTTP 500 and a 429 rate limit (the SDK retries both twice before
it gives up), and a provider that stalls until the browser gives up.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

import httpx

from examples.fake_provider import FakeProvider, serve_fake_provider
from examples.offline import Client, Example, Visit, World

#: How long the browser waits for a token in the stalled visit.
GIVE_UP_AFTER = 1.5


def chat(message: str, *, patience: float = 30) -> Callable[[Client, str], str]:
    """POST /chat with ``message``, reading the SSE answer to its end (or until ``patience``
    seconds pass without a byte)."""

    def drive(client: Client, test_id: str) -> str:
        words = []
        timeout = httpx.Timeout(30, read=patience)
        try:
            with client.http.stream(
                "POST",
                "/chat",
                json={"message": message},
                headers={"x-test-id": test_id},
                timeout=timeout,
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        words.append(json.loads(line[len("data: ") :])["delta"])
        except httpx.ReadTimeout:
            return f"HTTP {response.status_code}, then no token for {patience:g} s: gave up"
        except httpx.RemoteProtocolError:
            return f"HTTP {response.status_code}, then the stream was cut short"
        return f"HTTP {response.status_code}, {''.join(words).strip()!r}"

    return drive


@contextlib.contextmanager
def provider() -> Iterator[World]:
    with serve_fake_provider(FakeProvider()) as url:
        yield World(
            {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "sk-offline-not-a-key"},
            describe=[f"the provider: examples/fake_provider.py on {url}/v1 (OPENAI_BASE_URL)"],
        )


EXAMPLE = Example(
    name="fastapi_openai",
    summary="FastAPI and the OpenAI SDK, against the bundled fake provider",
    env={
        "CVDIAG_BACKEND_EMITTER": "1",
        "CVDIAG_VERBOSE": "1",
        "CVDIAG_HEARTBEAT_INTERVAL": "0.25",
    },
    visits=[
        Visit("openai-1-healthy", "a chat turn, answered", chat("Say hello"), "healthy"),
        Visit(
            "openai-2-provider-500",
            "the provider answers HTTP 500 ('[fake:500]' in the message)",
            chat("Say hello [fake:500]"),
            "provider-error",
        ),
        Visit(
            "openai-3-rate-limited",
            "the provider answers HTTP 429 ('[fake:429]' in the message)",
            chat("Say hello [fake:429]"),
            "provider-rate-limited",
        ),
        Visit(
            "openai-4-stalled",
            f"the provider stalls ('[fake:stall]'); the browser gives up after {GIVE_UP_AFTER:g} s",
            chat("Say hello [fake:stall]", patience=GIVE_UP_AFTER),
            "stalled-backend",
        ),
    ],
    needs=("fastapi", "openai", "httpx2"),
    world=provider,
)
