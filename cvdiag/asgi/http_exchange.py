"""One HTTP request's exchange: ``receive`` and ``send`` wrapped, the probe, the terminal.

Below the debug tier a mid-stream chunk costs one plain call: it is held by reference and
counted with others in one pass (``settle``, with the rest of what the response says, in its
base class, ``http_response.py``). The debug tier names each event as it is sent; the verbose
tier times the first byte.

A response starting late is preceded by one look at ``receive`` (``_probe``), only once the app
has read the request body to its end, so that it can take nothing but ``http.disconnect``; what it
takes is the app's at its next ``receive``, unchanged (``look.py`` says why, and how it runs under
asyncio and trio alike). Whatever the server or the app passes, a message that is not a mapping
included, goes on as it is: at most cvdiag counts its own failure and goes quiet.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any, Final

from starlette.types import Message

from cvdiag.asgi.http_response import HTTPResponseSide
from cvdiag.asgi.look import Look
from cvdiag.core.guard import record_failure

#: Below the debug tier, mid-stream chunks up to this size are held by reference, this many at
#: most, and counted in one pass: at most 64 KiB held per request.
_HOLD_CHUNK: Final = 2048
_HOLD_CHUNKS: Final = 32
#: A response starting this many seconds after the request came in is preceded by a look at
#: whether the client is still there (``_probe``): a plain JSON endpoint waiting on its model
#: reads nothing meanwhile, and the server drops an answer sent after a disconnect silently.
PROBE_AFTER_S: Final = 0.5
#: ``Final``: compiled, read as a module static (docs/performance.md, fourth round).
_perf_counter: Final = time.perf_counter


class HTTPExchange(HTTPResponseSide):
    """One HTTP request: ingress → [first_byte → event…] → complete | aborted (+ error.caught).

    Body chunks are looked at one by one only where the tier needs it: the debug tier names each
    event as it is sent, the verbose tier times the first byte. Otherwise a mid-stream chunk is
    only held, by reference, and the held chunks are counted in one pass when a batch is full,
    when a chunk is large, and when the body ends: a stream's bookkeeping is one list append per
    chunk, because per-chunk Python is what a streaming middleware pays for most.
    """

    __slots__ = ()  # every field is the base's: one layout, set in one ``setup``

    async def receive(self) -> Message:
        stashed = self.stashed
        if stashed is not None:
            self.stashed = None
            return stashed.hand_on()
        message = await self._receive()
        try:
            # A dict (what servers pass) is read as one: compiled, lookups and no method call.
            fields: dict[str, Any] = message if type(message) is dict else dict(message)
            kind = fields.get("type")
            if kind == "http.request":
                if not fields.get("more_body"):
                    self.request_read = True  # the body's end: the probe may look now
            # After the body is done, uvicorn answers every receive with http.disconnect: not an
            # abort.
            elif kind == "http.disconnect" and not self.body_done and self.active:
                self.disconnected = True
                self.settle()
                self.sent_at_disconnect = self.bytes_sent
        except Exception as exc:  # not a mapping (None …): the app gets it as it came
            self.broken(exc)
        return message

    def send(self, message: Message) -> Awaitable[None]:
        held = self.held
        if held is not None:
            # The hot path, a plain call: a small mid-stream chunk is held by reference and
            # the server's own ``send`` awaited directly, with no coroutine of ours around it.
            # A send failing here is known by its class (uvicorn's ``ClientDisconnected``,
            # Starlette's ``ClientDisconnect``) when it escapes the app.
            # What servers pass is a dict: read as one, compiled, it is two lookups and no method
            # call. Any other message (another mapping, or none) is seen below, chunk by chunk.
            # ``type(...) is``, not ``.__class__ is``: one pointer compare when compiled.
            if type(message) is dict:
                body = message.get("body")
                if (
                    type(body) is bytes
                    and message.get("more_body")
                    and len(body) <= _HOLD_CHUNK
                    and len(held) < _HOLD_CHUNKS
                ):
                    held.append(body)
                    # The one clock read a held chunk costs: the terminal's ``silence_ms``.
                    self.sent_at = _perf_counter()
                    return self._send(message)
        else:
            try:
                kind = message.get("type")
            except AttributeError:  # not a mapping: passed on below, as it came
                kind = None
            if kind == "http.response.start":
                if self.echo is not None:
                    message = self.with_test_id(message)
                if (
                    self.request_read
                    and self.active
                    and not self.disconnected
                    and _perf_counter() - self.start >= PROBE_AFTER_S
                ):
                    return self._probed(message)
        return self._send_seen(message)

    async def _probed(self, message: Message) -> None:
        await self._probe()
        await self._send_seen(message)

    async def _probe(self) -> None:
        """Whether the client left while the app worked, without waiting: one look at
        ``receive``, given one turn (``look.py``). Only once the app has read the request
        body to its end, so the look can take nothing but a disconnect; what it takes is
        kept for the app's next ``receive``; a look that finds nothing takes nothing."""
        found = Look(self._receive)
        try:
            await found.take()
        except Exception as exc:  # the look itself failed: counted; the request goes on
            record_failure("middleware", exc)
        if found.taken:
            self.stashed = found
            if found.disconnect:
                self.gone_at_start = True

    def left(self) -> tuple[str, str] | None:
        if self.gone_at_start and self.send_error is None:
            # Found as the response started: when the client left is unknown, only before.
            return "rst", "left_before_response"
        return super().left()

    def broken(self, exc: BaseException) -> None:
        self.held = None
        super().broken(exc)

    def _send_failed(self, exc: BaseException, message: Message) -> None:
        super()._send_failed(exc, message)
        if self.send_error is exc:  # the client is gone: what had it been given?
            if message.get("type") == "http.response.body":
                self.sent_before_failure = self.bytes_sent - len(message.get("body") or b"")
            else:  # the start (not even the head went) or a whole file
                self.sent_before_failure = -1

    def promised_sent(self, unsent: int = 0) -> bool:
        """Whether every byte the response's Content-Length promised had gone to the server
        before the client was found gone (on ``receive``, or by a send that failed): the client
        has the whole response, whatever came after (a client closing at the last byte, before
        the app's final empty message). ``unsent``: held bytes whose send may be what failed.

        Not judged for an empty promise, a HEAD, a compressed body (its Content-Length counts
        bytes cvdiag counts inflated) or a client gone before the response started."""
        declared = self.declared
        if not declared or self.head or self.inflate is not None or self.gone_at_start:
            return False
        self.settle()
        sent = self.bytes_sent - unsent
        if self.disconnected:
            sent = min(sent, self.sent_at_disconnect)
        if self.send_error is not None:
            sent = min(sent, self.sent_before_failure)
        return sent >= declared

    def _ended(self) -> None:
        """The app's last body message went out: complete, unless the client left first.

        A 5xx is told at the app's exit instead: an error handler in the app (Starlette's
        ``ServerErrorMiddleware``, outermost in its stack, with cvdiag wrapping the whole app)
        answers 500 and then re-raises, and the story tells the error before the terminal."""
        self.settle_streams(body_end=True)
        if self.status >= 500:
            self.answered = True
        elif self.left() is None or self.promised_sent():
            self.complete()

    def end(self, kind: str | None) -> None:
        held = self.held
        # An exception escaping the app may be a held chunk's failed send: its bytes not counted.
        if (
            (self.answered and self.left() is None)
            or self.promised_sent(len(held[-1]) if held and kind is not None else 0)
            or (kind is None and self.body_done and self.left() is None)
        ):
            # The client had every promised byte, whatever came after; or the app handed the
            # server its body's end and returned with nothing failed: under trio, Starlette's
            # disconnect listener cancels that last send when the client closes at the very
            # end, so the send never returns to ``_ended`` (a cancelled send is no failure).
            self.complete()
            return
        left = self.left()
        if kind in ("error", "timeout"):
            if not self.started:
                self.complete(500)  # what the server (or ServerErrorMiddleware) answers
            elif kind == "timeout":
                self.abort("timeout", "timeout")
            else:
                self.abort("chunk_error", "app_error")
        elif left is not None:
            self.abort(*left)
        elif kind == "disconnect":
            self.abort("rst", "client_disconnect")
        elif kind == "cancel":
            self.abort("fin_premature", "cancelled")
        else:
            self.abort("fin_premature", "incomplete" if self.started else "no_response")
