"""A command-line client for the WebSocket chat: sends each argument, prints each answer.

    python examples/websocket_chat/client.py "hello" "and again"

It sends ``x-test-id`` (``TEST_ID``, else a fresh one, printed on stderr) so the server's
envelopes can be found with ``cvdiag replay``. ``PORT`` as for the server.
"""

import json
import os
import sys
import uuid

from websockets.sync.client import connect


def main(messages: list[str]) -> None:
    url = f"ws://127.0.0.1:{os.environ.get('PORT', '8000')}/ws"
    test_id = os.environ.get("TEST_ID") or f"ws-chat-{uuid.uuid4().hex[:8]}"
    print(f"test id {test_id}", file=sys.stderr)
    with connect(url, additional_headers={"x-test-id": test_id}) as ws:
        for message in messages:
            ws.send(message)
            words = []
            while (event := json.loads(ws.recv()))["type"] != "TEXT_MESSAGE_END":
                words.append(event["delta"])
            print(" ".join(words))


if __name__ == "__main__":
    main(sys.argv[1:] or ["hello"])
