"""``python -m examples websocket_chat``: two turns and a close, then a dropped connection."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

from examples.offline import Client, Example, Visit


def converse(*prompts: str, drop: bool = False) -> Callable[[Client, str], str]:
    """Send each prompt and read its answer; then close normally, or (``drop``) cut the TCP
    connection as a phone losing its network would, with no close frame."""

    def drive(client: Client, test_id: str) -> str:
        from websockets.sync.client import connect

        answers = []
        with connect(f"{client.ws_url}/ws", additional_headers={"x-test-id": test_id}) as ws:
            for prompt in prompts:
                ws.send(prompt)
                if drop:
                    ws.recv(timeout=10)  # the first token: the agent is mid-answer
                    ws.socket.shutdown(socket.SHUT_RDWR)
                    ws.socket.close()
                    return f"sent {prompt!r}, got a token, then dropped the connection"
                words = []
                while (event := json.loads(ws.recv(timeout=10)))["type"] != "TEXT_MESSAGE_END":
                    words.append(event["delta"])
                answers.append(" ".join(words))
        return f"{' | '.join(answers)}, then a normal close"

    return drive


EXAMPLE = Example(
    name="websocket_chat",
    summary="a WebSocket chat: agent turns over one connection, a close or a drop",
    env={"CVDIAG_BACKEND_EMITTER": "1", "CVDIAG_VERBOSE": "1"},
    visits=[
        Visit(
            "ws-1-two-turns",
            "two turns, then a normal close",
            converse("hello", "and again"),
            "healthy",
        ),
        Visit(
            "ws-2-dropped",
            "the connection drops mid-answer",
            converse("hello", drop=True),
            "client-abort",
        ),
    ],
    needs=("websockets",),
)
