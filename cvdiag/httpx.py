"""Outbound calls through httpx or httpx2: forward the test id, and record LLM provider calls.

``instrument_httpx(client)`` wraps a client's transports (its default one and its mounts) in
``CvdiagTransport`` / ``AsyncCvdiagTransport``. For every outbound request the wrapper

- adds the current request's test id (``x-test-id``) and slug headers, never overwriting a
  header the caller set, so a mock LLM or a downstream service can join on the same key;
- recognizes LLM provider calls (OpenAI-compatible ``/chat/completions``, ``/responses``,
  ``/completions``, ``/embeddings``; Anthropic ``/v1/messages``) and wraps each in an
  ``llm_call``: provider from the host (or the path), model from the JSON body, the answer's
  token count from the response's ``usage`` — for a streamed response from its final usage
  chunk, read off the bytes as they pass. The call ends when the body is exhausted or closed,
  or, for a response dropped unclosed, at the next heartbeat: exactly once in every case.

Neither httpx nor httpx2 is a dependency of cvdiag: nothing here imports them. The library a
client, transport or response belongs to is read from its class's module, and the response
stream wrappers subclass that library's byte-stream classes, built on first use.

Nothing of the prompt or the completion is kept: the request body is parsed only for its model
(and a length-based prompt token estimate); response bytes are scanned for ``usage`` and at most
one line (SSE) or one bounded body (JSON) is held, and only until it is parsed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sys
import threading
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson

from cvdiag.context import _CURRENT, _STATE
from cvdiag.emitter import Emitter, get_emitter
from cvdiag.guard import record_failure
from cvdiag.scopes import _ACTIVE_CALL, LLMCall

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = [
    "DEFAULT_LLM_HOSTS",
    "DEFAULT_LLM_PATHS",
    "AsyncCvdiagTransport",
    "CvdiagTransport",
    "instrument_httpx",
]

_C = TypeVar("_C")

DEFAULT_TEST_ID_HEADER: Final = "x-test-id"
DEFAULT_SLUG_HEADER: Final = "x-aimock-context"
#: Host → provider. A key may carry a port (``"127.0.0.1:8001"``); one starting with ``.``
#: matches any subdomain.
DEFAULT_LLM_HOSTS: Final[Mapping[str, str]] = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    ".openai.azure.com": "azure-openai",
    "generativelanguage.googleapis.com": "google",
    "api.mistral.ai": "mistral",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "api.together.xyz": "together",
    "api.fireworks.ai": "fireworks",
    "api.x.ai": "xai",
    "openrouter.ai": "openrouter",
}
#: Path ending → the provider assumed when the host is not in the host map.
DEFAULT_LLM_PATHS: Final[Mapping[str, str]] = {
    "/v1/messages": "anthropic",
    "/chat/completions": "openai-compatible",
    "/responses": "openai-compatible",
    "/completions": "openai-compatible",
    "/embeddings": "openai-compatible",
}
#: Request and (decoded) JSON response bodies are parsed only up to this size.
BODY_PARSE_MAX: Final = 1024 * 1024
#: An SSE line longer than this is skipped (a usage chunk is a few hundred bytes).
LINE_MAX: Final = 256 * 1024
#: Past BODY_PARSE_MAX, this much of a JSON body's end is kept to find its usage.
_TAIL_KEEP: Final = 8192
#: Characters of a model name read; the emitter scrubs it as an identifier, then keeps 256.
_MODEL_MAX: Final = 1024
_TOKENS_IN_TAIL: Final = re.compile(rb'"(?:completion_tokens|output_tokens)"\s*:\s*(\d{1,12})')
_AZURE_DEPLOYMENT: Final = re.compile(r"/deployments/([^/]{1,200})/")
_LIBRARIES: Final = frozenset({"httpx", "httpx2"})
#: The event that ends a provider's stream: Anthropic Messages, the OpenAI Responses API
#: (``data: [DONE]`` ends Chat Completions). An SDK may close the response right after it,
#: before the transport reaches the end of the body: that is a complete call, not a cut one.
_STREAM_END_TYPES: Final = frozenset(
    {"message_stop", "response.completed", "response.incomplete", "response.failed"}
)
#: ``error_class`` of a call whose stream was left unread and unclosed.
ABANDONED_ERROR: Final = "StreamCancelledUnclosed"
_STREAM_END_EVENTS: Final = frozenset(name.encode() for name in _STREAM_END_TYPES)


# --- options -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Options:
    test_id_header: str | None
    slug_header: str | None
    hosts: Mapping[str, str]
    host_suffixes: tuple[tuple[str, str], ...]
    paths: tuple[tuple[str, str], ...]
    detect_llm: bool

    @classmethod
    def build(
        cls,
        *,
        test_id_header: str | None,
        slug_header: str | None,
        llm_hosts: Mapping[str, str] | None,
        llm_paths: Mapping[str, str] | None,
        detect_llm: bool,
    ) -> _Options:
        hosts = {**DEFAULT_LLM_HOSTS, **(llm_hosts or {})}
        hosts = {key.lower(): value for key, value in hosts.items()}
        paths = DEFAULT_LLM_PATHS if llm_paths is None else llm_paths
        return cls(
            test_id_header=test_id_header.lower() if test_id_header else None,
            slug_header=slug_header.lower() if slug_header else None,
            hosts={k: v for k, v in hosts.items() if not k.startswith(".")},
            host_suffixes=tuple((k, v) for k, v in hosts.items() if k.startswith(".")),
            # Longest first, so "/chat/completions" is preferred to "/completions".
            paths=tuple(
                sorted(((p.rstrip("/"), v) for p, v in paths.items()), key=lambda i: -len(i[0]))
            ),
            detect_llm=detect_llm,
        )

    def provider_for(self, host: str, port: int | None, path: str) -> str | None:
        """The provider of an LLM call to ``host``:``port`` + ``path``, or None if not one.

        The host map is consulted with the port first (``"127.0.0.1:8001"``, for local fakes
        and proxies), then without it, then by subdomain suffix; else the path decides.
        """
        path = path.rstrip("/")
        assumed = next((name for ending, name in self.paths if path.endswith(ending)), None)
        if assumed is None:
            return None
        host = host.lower()
        provider = self.hosts.get(f"{host}:{port}") if port is not None else None
        if provider is None:
            provider = self.hosts.get(host)
        if provider is None:
            for suffix, name in self.host_suffixes:
                if host.endswith(suffix):
                    return name
        return provider or assumed


# --- reading requests and responses ------------------------------------------------------------


def _library_of(obj: object) -> ModuleType | None:
    """The httpx-like library (``httpx`` or ``httpx2``) that ``obj``'s class comes from."""
    for cls in type(obj).__mro__:
        root = cls.__module__.partition(".")[0]
        if root in _LIBRARIES:
            return sys.modules.get(root)
    return None


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


def _describe_request(request: Any) -> tuple[str, int]:
    """The model named in the request and a prompt token estimate (~4 characters a token)."""
    model: object = None
    estimate = 0
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
    if not isinstance(model, str) or not model:
        # Azure OpenAI names the deployment in the path instead of the body.
        found = _AZURE_DEPLOYMENT.search(str(request.url.path))
        model = found.group(1) if found else "unknown"
    return model[:_MODEL_MAX], estimate


def _usage_tokens(parsed: object) -> int | None:
    """The answer's token count from a response object or stream chunk, if it carries usage.

    OpenAI: ``usage.completion_tokens`` (chat, completions) or ``usage.output_tokens``
    (responses, also under ``response`` in its stream); Anthropic: ``usage.output_tokens``
    (also under ``message`` in ``message_start``).
    """
    if not isinstance(parsed, dict):
        return None
    for holder in (parsed, parsed.get("message"), parsed.get("response")):
        if isinstance(holder, dict):
            usage = holder.get("usage")
            if isinstance(usage, dict):
                for key in ("completion_tokens", "output_tokens"):
                    value = usage.get(key)
                    if type(value) is int and value >= 0:
                        return value
    return None


class _Undecodable(Exception):
    """A content encoding cvdiag does not decode (brotli, zstd): usage stays unknown."""


class _Decoder:
    """Undo gzip / deflate content encoding; the transport sees the bytes before httpx does."""

    def __init__(self, encoding: str) -> None:
        wbits = zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._zlib = zlib.decompressobj(wbits)

    def decode(self, data: bytes) -> bytes:
        try:
            return self._zlib.decompress(data)
        except zlib.error as exc:
            raise _Undecodable from exc

    def flush(self) -> bytes:
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise _Undecodable from exc


def _decoder_for(headers: Any) -> _Decoder | None:
    encoding = str(headers.get("content-encoding", "")).strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _Decoder(encoding)
    raise _Undecodable(encoding)


class _Tracker:
    """Follows one LLM response's body: first chunk, usage, and the single end of its call.

    ``owned`` is False when the request ran inside a hand-written ``llm_call``: then the tracker
    only fills in that call's token count and first-chunk time, and never ends it.
    """

    __slots__ = (
        "_body",
        "_decoder",
        "_line",
        "_overflow",
        "_skipping",
        "_sse",
        "_tracking",
        "call",
        "done",
        "error_class",
        "owned",
        "provider_done",
        "reader",
        "reading",
        "tokens",
    )

    def __init__(self, call: LLMCall, owned: bool, response: Any) -> None:
        self.call = call
        self.owned = owned
        self.done = False
        self.tokens: int | None = None
        status = int(response.status_code)
        #: An HTTP error status is a failed call even though nothing raised.
        self.error_class: str | None = f"HTTP{status}" if status >= 400 else None
        headers = response.headers
        self._sse = "text/event-stream" in str(headers.get("content-type", "")).lower()
        #: The provider's own end-of-stream event was seen: a close after it is no cut.
        self.provider_done = False
        #: Who reads the body (an asyncio task, or a thread's ident for a sync stream), and
        #: whether a read is in progress: how a request's end tells abandoned from still read.
        self.reader: asyncio.Task[Any] | int | None = None
        self.reading = False
        self._body = bytearray()
        self._line = bytearray()
        self._overflow = False
        self._skipping = False
        self._tracking = True
        try:
            self._decoder = _decoder_for(headers)
        except _Undecodable:
            self._decoder = None
            self._tracking = False

    def feed(self, chunk: bytes) -> None:
        """One chunk of the raw body. Never raises: a failure only stops the usage reading."""
        if not chunk:
            return
        call = self.call
        if call.first_chunk_at is None and self._sse:  # time to first token: streams only
            call.mark_first_chunk()
        if not self._tracking:
            return
        try:
            data = self._decoder.decode(chunk) if self._decoder is not None else chunk
            if self._sse:
                self._feed_lines(data)
            else:
                self._feed_body(data)
        except _Undecodable:
            self._stop_tracking()
        except Exception as exc:
            record_failure("httpx", exc)
            self._stop_tracking()

    def _stop_tracking(self) -> None:
        self._tracking = False
        self._body = bytearray()
        self._line = bytearray()

    def _feed_body(self, data: bytes) -> None:
        body = self._body
        body += data
        if self._overflow:
            del body[:-_TAIL_KEEP]
        elif len(body) > BODY_PARSE_MAX:
            self._overflow = True
            del body[:-_TAIL_KEEP]

    def _feed_lines(self, data: bytes) -> None:
        line = self._line
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                if not self._skipping:
                    line += data[start:]
                    if len(line) > LINE_MAX:
                        line.clear()
                        self._skipping = True
                return
            if self._skipping:
                self._skipping = False
            elif line:
                line += data[start:end]
                self._read_line(bytes(line))
                line.clear()
            else:
                self._read_line(data[start:end])
            start = end + 1

    def _read_line(self, line: bytes) -> None:
        if line.startswith(b"event:"):
            if line[6:].strip() in _STREAM_END_EVENTS:
                self.provider_done = True
            return
        # Only a ``data:`` line that mentions usage is parsed; content chunks are skipped.
        if not line.startswith(b"data:"):
            return
        if b'"usage"' not in line:
            if line[5:].strip() == b"[DONE]":
                self.provider_done = True
            return
        try:
            parsed = orjson.loads(line[5:].strip())
        except orjson.JSONDecodeError:
            return
        tokens = _usage_tokens(parsed)
        if tokens is not None:
            # Anthropic sends a provisional count in message_start and the final one in
            # message_delta: the last one seen wins.
            self.tokens = tokens
        if isinstance(parsed, dict) and parsed.get("type") in _STREAM_END_TYPES:
            self.provider_done = True  # a data-only stream of typed events

    def _read_body(self) -> None:
        if self._decoder is not None:
            self._feed_body(self._decoder.flush())
        body = bytes(self._body)
        if not body:
            return
        if not self._overflow:
            try:
                self.tokens = _usage_tokens(orjson.loads(body))
            except orjson.JSONDecodeError:
                return
        else:
            found = _TOKENS_IN_TAIL.findall(body)
            if found:
                self.tokens = int(found[-1])

    def read_all(self, content: bytes) -> None:
        """A response whose body was already read (a mock transport, a cache): decoded bytes."""
        self._decoder = None
        self.feed(content)

    def finish(
        self,
        exc: BaseException | None = None,
        *,
        early: bool = False,
        cancelled: bool = False,
        abandoned: bool = False,
    ) -> None:
        """The body is exhausted (default), failed (``exc``), was closed ``early`` or was
        ``abandoned`` unread by the request that opened it: once."""
        if self.done:
            return
        self.done = True
        call = self.call
        try:
            if self._tracking and not self._sse:
                self._read_body()
        except _Undecodable:
            pass
        except Exception as failure:
            record_failure("httpx", failure)
        self._stop_tracking()
        try:
            if self.tokens is not None and (self.owned or call.response_token_count is None):
                call.record_response(self.tokens)
            if not self.owned:
                return
            if exc is not None:
                call.finish(exc)
            elif (early or abandoned) and not self.provider_done:
                if abandoned:
                    closed = ABANDONED_ERROR
                else:
                    closed = "CancelledError" if cancelled else "StreamCancelled"
                call.finish(error_class=self.error_class or closed)
            else:
                call.finish(error_class=self.error_class)
        except Exception as failure:
            record_failure("httpx", failure)

    def abandoned(self) -> None:
        """The stream was garbage-collected unclosed: let the heartbeat thread end the call."""
        if not self.done and self.owned:
            self.call.orphaned = True

    def request_ending(self, *, body_end: bool) -> bool:
        """The request that opened this stream is ending; True once nothing is left to watch.

        At the end of the response body, a stream read by the task that sent that body and
        left unfinished will not be read again. When the app returns, a stream nobody read, or
        whose reader (this task, or one that has finished) is gone, is abandoned likewise. A
        stream another live task reads goes on, truly (a graph run that outlives its client):
        it ends with that reading, at the latest when that task ends. A sync stream, read in a
        worker thread, counts as read on only while a read is in progress.
        """
        if self.done:
            return True
        reader = self.reader
        if isinstance(reader, int):  # a sync stream: its thread's handler has returned
            if self.reading:
                return not body_end  # a read in progress: it ends with its reading
            self.finish(abandoned=True)
            return True
        here = _current_task()
        if body_end:
            if reader is None or reader is not here:
                return False
        elif reader is not None and reader is not here and not reader.done():
            reader.add_done_callback(lambda _task: self.finish(abandoned=True))
            return True
        self.finish(abandoned=True)
        return True


# --- the response streams ----------------------------------------------------------------------


class _SyncStream:
    """Passes a sync response body through, feeding the tracker; ends the call once."""

    def __init__(self, stream: Any, tracker: _Tracker) -> None:
        self._stream = stream
        self._tracker = tracker

    def __iter__(self) -> Iterator[bytes]:
        tracker = self._tracker
        tracker.reader = threading.get_ident()
        tracker.reading = True
        try:
            for chunk in self._stream:
                tracker.reading = False
                tracker.feed(chunk)
                yield chunk
                tracker.reading = True
        except GeneratorExit:
            # The consumer dropped the iterator. This may run inside the garbage collector, on
            # any thread (even one holding this call's lock), so it only flags the call: a
            # close() that follows ends it at once, else the heartbeat thread ends it.
            tracker.abandoned()
            raise
        except BaseException as exc:
            tracker.finish(exc)
            raise
        tracker.finish()

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._tracker.finish(early=True)

    def __del__(self) -> None:
        tracker: _Tracker | None = getattr(self, "_tracker", None)
        if tracker is not None:
            tracker.abandoned()


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop, or not asyncio (trio under anyio)
        return None


def _cancelling() -> bool:
    """Whether the stream is being closed because its task is being cancelled.

    The ``CancelledError`` being handled is the signal on every Python (a context manager's
    exit sees it); ``Task.cancelling()`` adds the cases where it is not in view. That counter
    is trusted from 3.11 only: on 3.10 a backported task may carry it, but nothing there ever
    calls ``uncancel()``, so it stays raised after a cancel scope has long been left.
    """
    if isinstance(sys.exc_info()[1], asyncio.CancelledError):
        return True
    if sys.version_info < (3, 11):
        return False
    task = _current_task()
    return task is not None and task.cancelling() > 0


class _AsyncStream:
    """Passes an async response body through, feeding the tracker; ends the call once."""

    def __init__(self, stream: Any, tracker: _Tracker) -> None:
        self._stream = stream
        self._tracker = tracker

    async def __aiter__(self) -> AsyncIterator[bytes]:
        tracker = self._tracker
        tracker.reader = _current_task()
        tracker.reading = True
        try:
            async for chunk in self._stream:
                tracker.reading = False
                tracker.feed(chunk)
                yield chunk
                tracker.reading = True
        except GeneratorExit:  # closed by the consumer or by the loop's finalizer: a task
            tracker.finish(early=True)
            raise
        except BaseException as exc:
            tracker.finish(exc)
            raise
        tracker.finish()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._tracker.finish(early=True, cancelled=_cancelling())

    def __del__(self) -> None:
        tracker: _Tracker | None = getattr(self, "_tracker", None)
        if tracker is not None:
            tracker.abandoned()


_stream_classes: dict[tuple[str, bool], type] = {}


def _stream_class(library: ModuleType, sync: bool) -> type:
    """Our stream wrapper as a subclass of the library's own byte stream.

    The client asserts ``isinstance(response.stream, SyncByteStream)`` (or Async), so the
    wrapper must be one; the classes are built per library on first use.
    """
    key = (library.__name__, sync)
    cls = _stream_classes.get(key)
    if cls is None:
        if sync:
            cls = type("CvdiagSyncByteStream", (_SyncStream, library.SyncByteStream), {})
        else:
            cls = type("CvdiagAsyncByteStream", (_AsyncStream, library.AsyncByteStream), {})
        _stream_classes[key] = cls
    return cls


# --- one exchange ------------------------------------------------------------------------------


class _Exchange:
    """One LLM request in flight: the call it feeds and whether it owns (ends) it."""

    __slots__ = ("call", "owned")

    def __init__(self, call: LLMCall, owned: bool) -> None:
        self.call = call
        self.owned = owned

    def failed(self, exc: BaseException) -> None:
        if self.owned:
            self.call.finish(exc)

    def attach(self, response: Any, *, sync: bool) -> None:
        """Follow ``response``'s body; if that cannot be done, end the call now."""
        tracker: _Tracker | None = None
        try:
            tracker = _Tracker(self.call, self.owned, response)
            try:
                content = response.content  # already read: a mock transport, a cache
            except Exception:
                content = None
            if isinstance(content, bytes):
                tracker.read_all(content)
                tracker.finish()
                return
            library = _library_of(response)
            if library is None:
                tracker.finish()
                return
            response.stream = _stream_class(library, sync)(response.stream, tracker)
            state = _STATE.get()
            if state is not None and self.owned:
                # The request watches the streams it opened, so none outlives it unread.
                if state.streams is None:
                    state.streams = [tracker]
                else:
                    state.streams.append(tracker)
        except Exception as exc:
            record_failure("httpx", exc)
            if tracker is not None:
                tracker.finish()
            elif self.owned:
                self.call.finish()


def _before(request: Any, options: _Options) -> _Exchange | None:
    """Forward the test id, slug and trace context; start an ``llm_call`` for an LLM call."""
    try:
        headers = request.headers
        ctx = _CURRENT.get()
        if ctx is not None:
            name = options.test_id_header
            if name and name not in headers:
                headers[name] = ctx.test_id
            name = options.slug_header
            if name and ctx.slug != "unknown" and name not in headers:
                headers[name] = ctx.slug
        emitter = get_emitter()
        exchange = _llm_exchange(request, options, emitter)
        if emitter.otel is not None:
            span = exchange.call._otel_span if exchange is not None else None
            _inject_trace_context(headers, span)
        return exchange
    except Exception as exc:
        record_failure("httpx", exc)
        return None


def _llm_exchange(request: Any, options: _Options, emitter: Emitter) -> _Exchange | None:
    if not options.detect_llm or request.method != "POST":
        return None
    if not emitter.allows("backend.llm.call.start") and emitter.otel is None:
        return None  # neither an envelope nor a span wants this call
    url = request.url
    provider = options.provider_for(str(url.host), url.port, str(url.path))
    if provider is None:
        return None
    active = _ACTIVE_CALL.get()
    if active is not None and not active.ended:
        # Inside a hand-written llm_call: fill it in rather than open a second call.
        return _Exchange(active, owned=False)
    model, estimate = _describe_request(request)
    call = LLMCall(provider, model, prompt_token_count_estimate=estimate)
    if not call._begin():
        return None
    return _Exchange(call, owned=True)


def _inject_trace_context(headers: Any, span: Span | None) -> None:
    """``traceparent`` (through the configured propagator) beside x-test-id, never overwriting
    what the caller set; the LLM call's own span is the parent when there is one."""
    from opentelemetry import propagate, trace

    context = trace.set_span_in_context(span) if span is not None else None
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    for name, value in carrier.items():
        if name not in headers:
            headers[name] = value


# --- the transports ----------------------------------------------------------------------------


class _Wrapper:
    def __init__(
        self,
        transport: Any,
        *,
        test_id_header: str | None = DEFAULT_TEST_ID_HEADER,
        slug_header: str | None = DEFAULT_SLUG_HEADER,
        llm_hosts: Mapping[str, str] | None = None,
        llm_paths: Mapping[str, str] | None = None,
        detect_llm: bool = True,
    ) -> None:
        #: The wrapped transport, which does the actual I/O.
        self.transport = transport
        self._options = _Options.build(
            test_id_header=test_id_header,
            slug_header=slug_header,
            llm_hosts=llm_hosts,
            llm_paths=llm_paths,
            detect_llm=detect_llm,
        )

    def __getattr__(self, name: str) -> Any:
        # Anything else (a pool, a proxy setting) is the wrapped transport's.
        if name == "transport":
            raise AttributeError(name)
        return getattr(self.transport, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transport!r})"


class CvdiagTransport(_Wrapper):
    """Wraps a sync httpx or httpx2 transport: ``httpx.Client(transport=CvdiagTransport(t))``.

    Options: ``test_id_header`` / ``slug_header`` (None to send neither), ``llm_hosts``
    (host → provider, merged over the defaults), ``llm_paths`` (path ending → assumed provider,
    replacing the defaults), ``detect_llm`` (False: headers only).
    """

    def handle_request(self, request: Any) -> Any:
        exchange = _before(request, self._options)
        if exchange is None:
            return self.transport.handle_request(request)
        try:
            response = self.transport.handle_request(request)
        except BaseException as exc:
            exchange.failed(exc)
            raise
        exchange.attach(response, sync=True)
        return response

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> CvdiagTransport:
        self.transport.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        self.transport.__exit__(exc_type, exc, tb)


class AsyncCvdiagTransport(_Wrapper):
    """Wraps an async httpx or httpx2 transport (``AsyncHTTPTransport``); options as
    ``CvdiagTransport``."""

    async def handle_async_request(self, request: Any) -> Any:
        exchange = _before(request, self._options)
        if exchange is None:
            return await self.transport.handle_async_request(request)
        try:
            response = await self.transport.handle_async_request(request)
        except BaseException as exc:
            exchange.failed(exc)
            raise
        exchange.attach(response, sync=False)
        return response

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> AsyncCvdiagTransport:
        await self.transport.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        await self.transport.__aexit__(exc_type, exc, tb)


def instrument_httpx(
    client: _C,
    *,
    test_id_header: str | None = DEFAULT_TEST_ID_HEADER,
    slug_header: str | None = DEFAULT_SLUG_HEADER,
    llm_hosts: Mapping[str, str] | None = None,
    llm_paths: Mapping[str, str] | None = None,
    detect_llm: bool = True,
) -> _C:
    """Instrument an httpx or httpx2 ``Client`` / ``AsyncClient`` in place; returns it.

    Its transport and mounted transports are wrapped once: instrumenting again changes nothing.
    """
    library = _library_of(client)
    if library is not None and isinstance(client, library.AsyncClient):
        wrapper: type[_Wrapper] = AsyncCvdiagTransport
    elif library is not None and isinstance(client, library.Client):
        wrapper = CvdiagTransport
    else:
        raise TypeError(
            f"instrument_httpx expects an httpx or httpx2 Client or AsyncClient,"
            f" not {type(client).__qualname__}"
        )

    def wrap(transport: Any) -> Any:
        if transport is None or isinstance(transport, _Wrapper):
            return transport
        return wrapper(
            transport,
            test_id_header=test_id_header,
            slug_header=slug_header,
            llm_hosts=llm_hosts,
            llm_paths=llm_paths,
            detect_llm=detect_llm,
        )

    target: Any = client
    target._transport = wrap(target._transport)
    target._mounts = {pattern: wrap(mounted) for pattern, mounted in target._mounts.items()}
    return client
