"""Fake credentials of every shape cvdiag promises to redact, and where the secret part sits.

Each entry is ``name -> (text, secret)``: ``text`` is how the credential appears in the wild (a
bare token, a ``key=value`` pair, a URL, a header line), ``secret`` the part that must never
reach a sink. For bare tokens the two are the same. All values are fake.
"""

from __future__ import annotations

from typing import Final

SHAPES: Final[dict[str, tuple[str, str]]] = {
    # --- LLM providers
    "openai-legacy": ("sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL",) * 2,
    "openai-project": ("sk-proj-Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTBhYmNkZWZnaGlq",) * 2,
    "openai-service-account": ("sk-svcacct-AbCdEf0123456789GhIjKlMnOpQrStUv",) * 2,
    "openai-admin": ("sk-admin-AbCdEf0123456789GhIjKlMnOpQrStUv",) * 2,
    "anthropic": ("sk-ant-api03-XXXX_YYYY-ZZZZ9876543210abcdEFGH",) * 2,
    "anthropic-admin": ("sk-ant-admin01-AbCdEfGhIjKlMnOpQrSt",) * 2,
    "openrouter": ("sk-or-v1-0123456789abcdef0123456789abcdef0123456789abcdef",) * 2,
    "deepseek": ("sk-4f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c",) * 2,
    "groq": ("gsk_0123456789abcdefABCDEF0123456789abcdefABCDEF012345",) * 2,
    "xai": ("xai-0123456789abcdefABCDEF0123456789abcdefABCDEF0123456789abcdefAB",) * 2,
    "replicate": ("r8_0123456789abcdefABCDEF0123456789abcd",) * 2,
    "perplexity": ("pplx-0123456789abcdef0123456789abcdef0123456789abcdef",) * 2,
    "huggingface": ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",) * 2,
    "mistral-env": (
        "MISTRAL_API_KEY=9ZdQ0123456789abcdefABCDEF0123",
        "9ZdQ0123456789abcdefABCDEF0123",
    ),
    # --- clouds
    "aws-access-key-id": ("AKIAJ7Q2EXAMPLEKEY99",) * 2,
    "aws-sts-key-id": ("ASIAQ3W4EXAMPLETOKEN",) * 2,
    "aws-secret-env": (
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    "google-api-key": ("AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",) * 2,
    "google-oauth-access": ("ya29.a0AfH6SMBx-example-google-oauth-token",) * 2,
    "google-oauth-refresh": ("1//0gLmNoPqRsTuVwXyZ-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",) * 2,
    "azure-storage-connection-string": (
        "DefaultEndpointsProtocol=https;AccountName=acct;"
        "AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg==;EndpointSuffix=core.windows.net",
        "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg",
    ),
    "azure-service-bus": (
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;"
        "SharedAccessKey=cXV1eDk4NzY1NDMyMTBmZWRjYmE=",
        "cXV1eDk4NzY1NDMyMTBmZWRjYmE",
    ),
    "azure-sas-signature": (
        "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=AbCdEf0123456789%2BxYz%3D",
        "AbCdEf0123456789%2BxYz",
    ),
    "digitalocean": ("dop_v1_" + "0123456789abcdef" * 4,) * 2,
    "vault": ("hvs.CAESIJ0123456789abcdefABCDEF0123456789abcdef",) * 2,
    "doppler": ("dp.pt.0123456789abcdefABCDEF0123456789abcdefABCD",) * 2,
    # --- code hosting and packages
    "github-classic": ("ghp_1234567890abcdefghijABCDEFGHIJ123456",) * 2,
    "github-oauth": ("gho_16C7e42F292c6912E7710c838347Ae178B4a",) * 2,
    "github-app": ("ghs_16C7e42F292c6912E7710c838347Ae178B4a",) * 2,
    "github-fine-grained": (
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP",
    )
    * 2,
    "gitlab-pat": ("glpat-Xy7zQ0123456789abcde",) * 2,
    "gitlab-deploy": ("gldt-Xy7zQ0123456789abcde",) * 2,
    "npm": ("npm_abcdefghijklmnopqrstuvwxyz0123456789",) * 2,
    "pypi": ("pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoaWprbG1ub3A",) * 2,
    "atlassian": ("ATATT3xFfGF0123456789abcdefABCDEF0123456789",) * 2,
    "linear": ("lin_api_0123456789abcdefABCDEF0123456789abcdefAB",) * 2,
    # --- messaging, payments, email, monitoring
    "slack-bot": ("xoxb-123456789012-123456789012-AbCdEfGhIjKl",) * 2,
    "slack-user": ("xoxp-2345678901-2345678901234-AbCdEfGhIjKlMnOp",) * 2,
    "slack-app": ("xapp-1-A0123456789-0123456789012-abcdef",) * 2,
    "slack-webhook": (
        "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/Zq8Wd0123456789abcdefXYZ",
        "Zq8Wd0123456789abcdefXYZ",
    ),
    "discord-webhook": (
        "https://discord.com/api/webhooks/123456789012345678/Wk3bhQ-0123456789abcdefABCDEFxyz",
        "Wk3bhQ-0123456789abcdefABCDEFxyz",
    ),
    "telegram-bot": (
        "https://api.telegram.org/bot123456789:AAH0123456789abcdefABCDEF0123456789/sendMessage",
        "AAH0123456789abcdefABCDEF0123456789",
    ),
    "stripe-secret": ("sk_live_51HgB2cJ3kLmNoPqRsTuVwXy0123",) * 2,
    "stripe-test": ("sk_test_4eC39HqLyjWDarjtT1zdp7dc",) * 2,
    "stripe-restricted": ("rk_live_51HgB2cJ3kLmNoPqRsTuVwXy",) * 2,
    "stripe-webhook": ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",) * 2,
    "square": ("sq0atp-AbCdEfGhIjKlMnOpQrStUv",) * 2,
    "shopify": ("shpat_0123456789abcdef0123456789abcdef",) * 2,
    "sendgrid": ("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",) * 2,
    "mailgun": ("key-3ax6xnjp29jd6fds4gc373sgvjxteol0",) * 2,
    "twilio-auth-token": (
        "TWILIO_AUTH_TOKEN=9a8b7c6d5e4f30219a8b7c6d5e4f3021",
        "9a8b7c6d5e4f30219a8b7c6d5e4f3021",
    ),
    "datadog-api-key": (
        "DD_API_KEY=0f1e2d3c4b5a69780f1e2d3c4b5a6978",
        "0f1e2d3c4b5a69780f1e2d3c4b5a6978",
    ),
    "datadog-app-key": (
        "dd_app_key: 7e6d5c4b3a2910ff7e6d5c4b3a2910ff01234567",
        "7e6d5c4b3a2910ff7e6d5c4b3a2910ff01234567",
    ),
    "newrelic": ("NRAK-0123456789ABCDEFGHIJKLMNOPQ",) * 2,
    # --- generic shapes
    "jwt": (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    "bearer": ("Bearer Qm9vWnVzS2V5MTIzNDU2Nzg5.abc", "Qm9vWnVzS2V5MTIzNDU2Nzg5"),
    "basic-auth-header": (
        "Authorization: Basic dXNlcjpodW50ZXIyaHVudGVy",
        "dXNlcjpodW50ZXIyaHVudGVy",
    ),
    "pem-private-key": (
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    ),
    "pem-rsa-key": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n"
        "-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn",
    ),
    "openssh-key": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
    ),
    "url-userinfo": ("https://user:hunter2hunter2@db.internal.example/path", "hunter2hunter2"),
    "url-token-userinfo": (
        "https://ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789@github.example/repo.git",
        "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    ),
    "postgres-dsn": ("postgres://admin:s3cr3tP4ssw0rd@db:5432/app", "s3cr3tP4ssw0rd"),
    "redis-dsn": ("redis://:r3d1sP4ssw0rdX@cache:6379/0", "r3d1sP4ssw0rdX"),
    "sentry-dsn": (
        "https://0a1b2c3d4e5f60718293a4b5c6d7e8f9@o123.ingest.sentry.io/456",
        "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
    ),
    "query-api-key": ("https://api.example.com/v1?api_key=s3cr3tvalue123&x=1", "s3cr3tvalue123"),
    "query-access-token": ("&access_token=Qa9Zx8Yw7Vu6Ts5Rq4", "Qa9Zx8Yw7Vu6Ts5Rq4"),
    "key-value-password": ("password=correct-horse-battery-staple", "correct-horse-battery-staple"),
    "key-value-client-secret": ("client_secret=Zm9vYmFyMTIzQmF6", "Zm9vYmFyMTIzQmF6"),
    "json-pair": ('{"api_key": "Uq3Jk0123456789abcdXyZ"}', "Uq3Jk0123456789abcdXyZ"),
    "yaml-pair": ("secret: Pq7Rs0123456789wxYz", "Pq7Rs0123456789wxYz"),
    "x-api-key-header": (
        "x-api-key: 9f8e7d6c5b4a39281706f5e4d3c2b1a0ZZ",
        "9f8e7d6c5b4a39281706f5e4d3c2b1a0ZZ",
    ),
    "cookie-session": (
        "Cookie: session_id=9f8e7d6c5b4a39281706f5e4d3c2b1a0",
        "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    ),
    "age-secret-key": ("AGE-SECRET-KEY-1QYZ0123456789QWERTYASDFGZXCVBQWERTYASDFGZXCVB",) * 2,
}

#: Just the parts that must never reach a sink.
SECRETS: Final[tuple[str, ...]] = tuple(secret for _, secret in SHAPES.values())


def leaks(output: str | bytes) -> list[str]:
    """The names of the shapes whose secret part occurs in ``output`` (any case: a slug or a
    test id is lowercased, and a lowercased credential is still a credential)."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    lower = text.lower()
    return [name for name, (_, secret) in SHAPES.items() if secret.lower() in lower]
