"""The look at ``receive`` as a late HTTP response starts: has the client already gone?

A plain endpoint waiting on its model reads nothing meanwhile, and the server drops an answer
sent after the client left without a word; so as a response starts late, ``HTTPExchange`` takes
one look at ``receive``. A look takes what it finds, so two rules keep it from taking what is not
its to take:

- **Only once the request body has been read to its end**, through cvdiag's own ``receive`` (a
  ``http.request`` without ``more_body``). The only message a server hands over after that is
  ``http.disconnect``. While any of the body is unread, the next message may be a chunk that the
  app, or a reader *outside* cvdiag (a ``BaseHTTPMiddleware`` whose ``dispatch`` reads the body
  after ``call_next``), still wants: a look then could take it from a reader cvdiag never sees,
  so none is taken. An endpoint that never reads its body (a ``GET`` handler) is not looked at.
- **Whatever the look takes is handed on unchanged**: the message (whatever ``receive``
  returned, an odd value included) or the exception ``receive`` raised is what the app's next
  ``receive`` gets. A look that finds nothing waiting is cancelled while ``receive`` waits, which
  takes nothing (the servers' ``receive`` and Starlette's wrappers are safe to cancel there, and
  a disconnect lost inside a wrapper is one that wrapper repeats).

The look runs ``receive`` in a task of its own through anyio (a dependency of Starlette's), so it
works under asyncio and trio alike: the task is given its first turn (it called ``receive``,
which returned or waits) and is then cancelled unless done. Under trio a message already queued
is taken in that turn behind a shielded checkpoint, so the cancel cannot lose it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.types import Message, Receive


class Look:
    """One look at ``receive``, and what it took, for the app's next ``receive``."""

    __slots__ = ("_receive", "error", "message", "started", "taken")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.started = False  # the look's task had its first turn
        self.taken = False  # ``receive`` returned or raised: something is to be handed on
        self.message: Any = None  # whatever ``receive`` returned, an odd value included
        self.error: Exception | None = None

    async def take(self) -> None:
        """Look once, given one turn. Our own cancellation propagates; a failure of the look
        itself raises (the caller's guard counts it), and ``taken`` still says what to hand on.
        """
        import anyio  # Starlette's dependency; imported here, on the rare late response
        import anyio.lowlevel

        async with anyio.create_task_group() as group:
            group.start_soon(self._run)
            while not self.started:  # trio may run this task first: wait for the look's turn
                await anyio.lowlevel.checkpoint()
            group.cancel_scope.cancel()  # a receive still waiting found nothing: cancelled

    async def _run(self) -> None:
        self.started = True
        try:
            self.message = await self._receive()
        except Exception as exc:  # the host's: raised again at the app's next receive
            self.error = exc
        self.taken = True

    def hand_on(self) -> Message:
        """What the look took, as the app's ``receive`` would have had it."""
        if self.error is not None:
            raise self.error
        message: Message = self.message
        return message

    @property
    def disconnect(self) -> bool:
        """Whether the look found the client gone."""
        message = self.message
        return isinstance(message, Mapping) and message.get("type") == "http.disconnect"
