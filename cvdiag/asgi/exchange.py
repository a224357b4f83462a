"""What HTTP and WebSocket exchanges share: the send path, the app's exit, the one terminal.

``CvdiagMiddleware`` makes one exchange per request; its ``receive`` and ``send`` wrap the
server's. What each boundary says, and the state it is made from, is the base class's
(``boundaries.py``); here is when each is due.
"""

from __future__ import annotations

from starlette.types import Message

from cvdiag.asgi.boundaries import Boundaries
from cvdiag.asgi.headers import with_header
from cvdiag.core.errors import (
    claim_report,
    classify_exit,
    describe_exception,
    is_client_gone,
    mark_client_gone,
)
from cvdiag.core.guard import record_failure
from cvdiag.scopes.until_response import end_held


class Exchange(Boundaries):
    """The send path and the app's exit, shared by HTTP and WebSocket exchanges.

    Every message the app sends is looked at *before* it is passed on: an outer middleware
    (GZip) may rewrite it in place, and cvdiag tells what the app sent. The one terminal is
    emitted when the body ends (so a background task's envelopes follow it) or when the app
    exits; a client that left is recorded as it is seen and told at the app's exit, once every
    scope the request opened has exited.
    """

    __slots__ = ()

    def broken(self, exc: BaseException) -> None:
        """cvdiag failed inside this request: count it and get out of the way."""
        self.active = False
        record_failure("middleware", exc)

    # -- sending -----------------------------------------------------------------------------

    def _seen(self, message: Message) -> bool:
        """Look at one message before it is passed on; True when it ends the exchange."""
        raise NotImplementedError

    def _ended(self) -> None:
        """The message that ends the exchange went out."""
        raise NotImplementedError

    async def _send_seen(self, message: Message) -> None:
        ended = False
        if self.active:
            try:
                ended = self._seen(message)
            except Exception as exc:
                self.broken(exc)
        try:
            await self._send(message)
        except BaseException as exc:
            self._send_failed(exc, message)
            raise
        if ended and self.active:
            try:
                self._ended()
            except Exception as exc:
                self.broken(exc)

    def with_test_id(self, message: Message) -> Message:
        """The response start (or handshake) with the request's test id added, once."""
        name, self.echo = self.echo, None
        if name is None:
            return message
        try:
            return with_header(message, name, self.ctx.test_id.encode("ascii"))  # ASCII ids
        except Exception as exc:
            self.broken(exc)
            return message

    def _send_failed(self, exc: BaseException, message: Message) -> None:
        # OSError (uvicorn's ClientDisconnected is one) means the client is gone: marked, so
        # that no scope it passes through calls it an error, and told at the app's exit.
        # Anything else is an app or protocol error and is judged when it escapes the app.
        if self.active and (isinstance(exc, OSError) or is_client_gone(exc)):
            mark_client_gone(exc)
            if self.send_error is None:
                self.send_error = exc

    # -- the app's exit --------------------------------------------------------------------

    def finish(self, exc: BaseException | None) -> None:
        """Emit what the app's return or exception means; exactly one terminal overall."""
        if not self.active:
            return
        try:
            if exc is not None and self.state.held:
                end_held(self.state, exc)  # the agent reports the error under its span
            kind = classify_exit(exc)
            if kind in ("error", "timeout") and exc is not None and claim_report(exc):
                # Unless a scope inside the request already reported it.
                self._emit("backend.error.caught", "err", describe_exception(exc))
            self.settle_streams(body_end=False)
            if not self.terminal:
                self.end(kind)
        except Exception as failure:
            self.broken(failure)

    def end(self, kind: str | None) -> None:
        """Choose the terminal for an app that ended without one (``kind`` from ``_classify``)."""
        raise NotImplementedError

    def left(self) -> tuple[str, str] | None:
        """The v1 kind and the cause when the client is known to have gone, else None."""
        if self.send_error is not None:
            return "rst", "send_failed"
        if self.disconnected:
            return "rst", "client_disconnect"
        return None
