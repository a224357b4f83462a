"""Whether a stream kept its protocol: AG-UI's run and the OpenAI Responses stream.

An AG-UI run is ``RUN_STARTED`` … ``RUN_FINISHED`` or ``RUN_ERROR``; a Responses stream is
``response.created`` … ``response.completed``, ``response.failed`` or ``response.incomplete``. A
stream that closes without its terminal event leaves the frontend waiting (or showing nothing)
although HTTP says 200; events after it are dropped or misread. The debug tier names every
event; below it the stream's terminal envelope names the first and the last
(``first_event_type``, ``last_event_type``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from cvdiag.diagnosis.calls import Ref

#: The event that opens a stream of each protocol, and the protocol's name in a reason.
OPENERS: Final = {"RUN_STARTED": "AG-UI run", "response.created": "OpenAI Responses stream"}
#: Each protocol's terminal events.
TERMINALS: Final = {
    "AG-UI run": frozenset({"RUN_FINISHED", "RUN_ERROR"}),
    "OpenAI Responses stream": frozenset(
        {"response.completed", "response.failed", "response.incomplete"}
    ),
}


@dataclasses.dataclass(slots=True)
class Breach:
    """A stream that broke its protocol: what it was, how, the event, and the envelopes."""

    protocol: str
    how: str  # "incomplete" or "after-terminal"
    event: str | None
    refs: list[Ref]


@dataclasses.dataclass(slots=True)
class Protocol:
    """Follows each request's stream events (debug tier) and its terminal's last event."""

    name: str | None = None
    last: tuple[str, Ref] | None = None
    ended: tuple[str, Ref] | None = None
    breach: Breach | None = None

    def event(self, kind: str, ref: Ref) -> None:
        name = self.name
        if self.last is None:  # the request's first event opens its protocol, or none
            self.name = OPENERS.get(kind)
        elif name is not None and self.ended is not None and self.breach is None:
            self.breach = Breach(name, "after-terminal", kind, [self.ended[1], ref])
        elif name is not None and self.ended is None and kind in TERMINALS[name]:
            self.ended = (kind, ref)
        self.last = (kind, ref)

    def end(self, ref: Ref, meta: dict[str, Any], *, completed: bool) -> None:
        """The request's terminal: a completed stream that opened a protocol (seen in its
        events, or by the terminal's ``first_event_type`` and ``last_event_type``) must have ended
        it."""
        opened, written = meta.get("first_event_type"), meta.get("last_event_type")
        if self.last is None and isinstance(opened, str) and isinstance(written, str):
            protocol = OPENERS.get(opened)
            if protocol is not None and written not in TERMINALS[protocol] and completed:
                self.breach = self.breach or Breach(protocol, "incomplete", written, [ref])
        elif self.name is not None and self.ended is None and completed and not self.breach:
            kind, seen = self.last if self.last is not None else (None, None)
            refs = [ref] if seen is None else [seen, ref]
            self.breach = Breach(self.name, "incomplete", kind, refs)
        self.name = self.last = self.ended = None  # the next request's stream starts afresh
