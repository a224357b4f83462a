"""Which outbound hosts receive x-test-id and the slug header, and how traceparent is written.

A public-looking host is reached on loopback through an inner transport that rewrites the URL
after cvdiag's transport has decided (as a DNS entry would), so the decision is made for
``api.openai.com`` while the bytes go to a local echo server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Setter, TextMapPropagator, default_setter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from cvdiag import MemorySink, Settings, configure, instrument_httpx
from cvdiag.core.forwarding import ForwardPolicy, is_local_host
from tests.support.otel import sdk
from tests.support.requests import in_request
from tests.support.servers import serve_uvicorn


async def _echo(request: Request) -> JSONResponse:
    return JSONResponse({"headers": dict(request.headers)})


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    with serve_uvicorn(Starlette(routes=[Route("/echo", _echo)])) as url:
        yield url


class ToLoopback(httpx.HTTPTransport):
    """Sends every request to ``target`` (host:port), whatever host its URL names."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.host, _, port = target.removeprefix("http://").partition(":")
        self.port = int(port)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(scheme="http", host=self.host, port=self.port)
        return super().handle_request(request)


def seen(echo_url: str, url: str, **options: Any) -> dict[str, str]:
    client = instrument_httpx(httpx.Client(transport=ToLoopback(echo_url)), **options)
    with client, in_request(test_id="fwd-1", slug="my-demo"):
        headers: dict[str, str] = client.get(url).json()["headers"]
    return headers


@pytest.fixture
def emitter() -> Iterator[None]:
    configure(Settings(enabled=True), sinks=[MemorySink()])
    yield
    configure(Settings(), sinks=[MemorySink()])


def test_a_public_provider_gets_no_test_headers_by_default(echo_url: str, emitter: None) -> None:
    public = seen(echo_url, "https://api.openai.com/echo")
    assert "x-test-id" not in public
    assert "x-aimock-context" not in public
    local = seen(echo_url, f"{echo_url}/echo")  # loopback: the local fake provider
    assert local["x-test-id"] == "fwd-1"
    assert local["x-aimock-context"] == "my-demo"
    compose = seen(echo_url, "http://aimock:4010/echo")  # a compose service name
    assert compose["x-test-id"] == "fwd-1"


@pytest.mark.parametrize(
    "configured", [["api.openai.com"], ["*.openai.com"], ["*"], "API.OpenAI.com"]
)
def test_a_configured_host_gets_them(echo_url: str, emitter: None, configured: Any) -> None:
    headers = seen(echo_url, "https://api.openai.com/echo", forward_hosts=configured)
    assert headers["x-test-id"] == "fwd-1"
    assert headers["x-aimock-context"] == "my-demo"
    other = seen(echo_url, "https://api.anthropic.com/echo", forward_hosts=["*.openai.com"])
    assert "x-test-id" not in other


def test_settings_and_the_environment_configure_it(echo_url: str) -> None:
    configure(Settings(enabled=True, forward_hosts=("mock.example.com",)), sinks=[MemorySink()])
    try:
        assert seen(echo_url, "https://mock.example.com/echo")["x-test-id"] == "fwd-1"
        assert "x-test-id" not in seen(echo_url, "https://example.com/echo")
        # The keyword wins over the settings.
        assert "x-test-id" not in seen(
            echo_url, "https://mock.example.com/echo", forward_hosts=["other.example"]
        )
        settings = Settings.from_env(
            {"CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_FORWARD_HOSTS": "*.example.com"}
        )
        configure(settings, sinks=[MemorySink()])
        assert seen(echo_url, "https://mock.example.com/echo")["x-test-id"] == "fwd-1"
    finally:
        configure(Settings(), sinks=[MemorySink()])


def test_environment_parsing_and_one_report(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"CVDIAG_FORWARD_HOSTS": " mock.example.com, *.corp.example ,https://x.example/, ,*"}
    settings = Settings.from_env(env)
    assert settings.forward_hosts == ("mock.example.com", "*.corp.example", "*")
    Settings.from_env(env)  # read again: said once
    err = capsys.readouterr().err
    assert err.count("'https://x.example/' is not a host name") == 1
    assert "CVDIAG_FORWARD_HOSTS is not a cvdiag variable" not in err
    assert Settings.from_env({"CVDIAG_FORWARD_HOSTS": '["a.example", 3]'}).forward_hosts == (
        "a.example",
    )


def test_bad_hosts_in_code_are_refused() -> None:
    with pytest.raises(ValueError, match="forward_hosts"):
        Settings(forward_hosts=("http://x",))
    with pytest.raises(ValueError, match="forward_hosts"):
        instrument_httpx(httpx.Client(), forward_hosts=["a b"])


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("127.5.5.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("app.localhost", True),
        ("10.1.2.3", True),
        ("172.20.0.5", True),
        ("192.168.1.10", True),
        ("fd00::5", True),
        ("aimock", True),
        ("mock-llm.default.svc", True),
        ("llm.svc.cluster.local", True),
        ("gateway.internal", True),
        ("169.254.169.254", False),  # link-local: the cloud metadata service
        ("0.0.0.0", False),
        ("8.8.8.8", False),
        ("api.openai.com", False),
        ("api.anthropic.com", False),
        ("my-resource.openai.azure.com", False),
        ("", False),
    ],
)
def test_what_is_local(host: str, local: bool) -> None:
    assert is_local_host(host) is local


@given(st.ip_addresses())
def test_a_global_address_is_never_local(address: Any) -> None:
    assume(address.is_global)
    assert not is_local_host(str(address))


@given(st.text(max_size=40))
def test_any_host_text_is_decided_without_raising(text: str) -> None:
    assert ForwardPolicy.of(["*.example.com", text]).allows(text) in (True, False)


# --- traceparent: the user's propagator --------------------------------------------------------


class _Custom(TextMapPropagator):
    """A propagator of the user's own: writes one header of its own name."""

    def inject(
        self, carrier: Any, context: Context | None = None, setter: Setter[Any] = default_setter
    ) -> None:
        setter.set(carrier, "x-custom-trace", "from-the-users-propagator")

    def extract(self, carrier: Any, context: Context | None = None, getter: Any = None) -> Context:
        return context or Context()

    @property
    def fields(self) -> set[str]:
        return {"x-custom-trace"}


@pytest.fixture
def bridge() -> Iterator[None]:
    sdk()
    configure(Settings(enabled=True, otel=True), sinks=[MemorySink()])
    yield
    configure(Settings(), sinks=[MemorySink()])


def test_trace_context_follows_the_configured_propagator(echo_url: str, bridge: None) -> None:
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(_Custom())
    try:
        headers = seen(echo_url, f"{echo_url}/echo")
    finally:
        propagate.set_global_textmap(before)
    assert headers["x-custom-trace"] == "from-the-users-propagator"
    assert "traceparent" not in headers


def test_no_span_context_no_traceparent(echo_url: str, bridge: None) -> None:
    """Outside any span cvdiag does not invent a parent: the propagator writes nothing."""
    headers = seen(echo_url, f"{echo_url}/echo")
    assert "traceparent" not in headers
    assert headers["x-test-id"] == "fwd-1"
