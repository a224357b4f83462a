"""CopilotKit aimock's request journal read as the mock provider's CVDIAG lines.

aimock (npm ``@copilotkit/aimock``) answers LLM requests from fixtures and keeps a journal of
every request it served (``GET /__aimock/journal``, a JSON array). A journal saved as a file and
handed to any reading command beside the backend's log is read here: each entry becomes the
``aimock.*`` envelopes of CVDIAG v1 under the test id the request carried (its ``x-test-id``
header, else a ``testId`` query parameter), so the mock's layer joins the backend's and the
client's like any other lines.

What an entry holds, and so what its lines say: one time (``timestamp``: when the mock had read
the request and decided on a fixture, before it wrote a byte of the answer), the request
(method, path, headers, JSON body), the status it answered, the fixture it matched (``null``:
none did) with its ``latency`` (ms before each chunk, the first one too), ``streamingProfile``,
``truncateAfterChunks`` and ``disconnectAfterMs``, and ``interrupted`` / ``interruptReason``
when the mock cut its stream. It holds no head time, no per-chunk time, no end time and no byte
count, so those are never written: ``aimock.response.start`` and ``aimock.sse.chunk`` are not
made, and every line of an entry carries the entry's one time, with ``source: "journal"``
saying so (docs/envelope.md). Free text (the last user message, the fixture's match) is scrubbed
and bounded; headers are never copied (an ``Authorization`` header is in every entry).
"""

from __future__ import annotations

import datetime
import hashlib
import re
from typing import Any, Final

import orjson

from cvdiag.schema.vocabulary import EDGE_HEADER_KEYS

#: The most a journal file may hold: aimock keeps 1000 entries by default, each body capped.
MAX_JOURNAL: Final = 64 << 20
#: Entries read from one journal; the rest are counted in no line (a journal past this is not
#: one test run's).
MAX_ENTRIES: Final = 100_000
#: The fixture's match and the request's last user message, at most this many characters.
TEXT_LIMIT: Final = 160
SLUG: Final = "aimock"
#: A journal's start: an array whose first item is an object (or an empty array).
_START: Final = re.compile(rb"\s*\[\s*(?:\{|\])")
#: The fixture keys that say how the mock streams, copied as extensions.
_TIMING: Final = (
    ("latency", "fixture_latency_ms"),
    ("truncateAfterChunks", "truncate_after_chunks"),
    ("disconnectAfterMs", "disconnect_after_ms"),
)
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_TEST_ID_QUERY: Final = re.compile(r"[?&]testId=([^&#]*)")


def looks_like_journal(head: bytes) -> bool:
    """Whether a file's first bytes are an aimock journal: a JSON array of objects whose first
    one has the entry's ``timestamp`` and its ``method`` or ``response`` (or an empty array).
    aimock writes ``id``, ``timestamp``, ``method`` first; a request body (up to 64 KB in the
    journal) may push ``response`` far past the head."""
    found = _START.match(head)
    if found is None:
        return False
    if head[found.end() - 1 : found.end()] == b"]":
        return not head[found.end() :].strip()
    return b'"timestamp"' in head and (b'"method"' in head or b'"response"' in head)


def journal_lines(data: bytes) -> bytes | None:
    """The CVDIAG lines of a journal's entries, in time order; None when ``data`` is not a
    journal after all (not JSON, not an array of entries): then it is read as a log."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value[:1]):
        return None
    envelopes: list[dict[str, Any]] = []
    for index, entry in enumerate(value[:MAX_ENTRIES]):
        if isinstance(entry, dict):
            envelopes.extend(entry_envelopes(entry, index))
    envelopes.sort(key=lambda e: (e["ts"], e["mono_ns"]))
    return b"".join(b"CVDIAG " + orjson.dumps(e) + b"\n" for e in envelopes)


def entry_envelopes(entry: dict[str, Any], index: int = 0) -> list[dict[str, Any]]:
    """One journal entry's lines: its ingress, its match decision and its terminal; none when
    the entry names no test id or no time."""
    from cvdiag.schema.ids import join_key

    stamp = entry.get("timestamp")
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or stamp <= 0:
        return []
    headers = _dict(entry.get("headers"))
    path = entry["path"] if isinstance(entry.get("path"), str) else ""
    test_id = join_key(_test_id(headers, path))
    if test_id is None:
        return []
    response = _dict(entry.get("response"))
    fixture = _dict(response.get("fixture")) if isinstance(response.get("fixture"), dict) else None
    status = _int(response.get("status"))
    body = _dict(entry.get("body"))
    ident = f"{entry.get('id')}|{index}|{stamp}"
    span = _span(ident, "ingress")
    common = {
        "schema_version": 1,
        "test_id": test_id,
        "trace_id": test_id,
        "layer": "aimock",
        "slug": SLUG,
        "demo": SLUG,
        "ts": _ts(float(stamp)),
        "edge_headers": dict.fromkeys(EDGE_HEADER_KEYS),
    }
    mono = int(float(stamp) * 1_000_000)
    ingress = {
        **common,
        "span_id": span,
        "parent_span_id": None,
        "boundary": "aimock.request.ingress",
        "mono_ns": mono,
        "duration_ms": None,
        "outcome": "info",
        "metadata": {
            "path": _text(path.split("?", 1)[0], 200),
            "content_length": _int(headers.get("content-length")),
            "match_keys": _request_keys(body),
            "method": _text(entry.get("method"), 16),
            "model": _text(body.get("model"), 80),
            "stream": body.get("stream") is True,
            "last_user_message": _last_user(body),
            "request_id": _text(headers.get("x-request-id") or entry.get("id"), 64),
            "source": "journal",
        },
    }
    decision_meta: dict[str, Any] = {
        "fixture_id": _fixture_label(fixture),
        "reject_reasons": None if fixture is not None else ["no_fixture_match"],
        "status": status,
        "source": "journal",
    }
    if fixture is not None:
        for key, name in _TIMING:
            number = _int(fixture.get(key))
            if number is not None:
                decision_meta[name] = number
        if fixture.get("streamingProfile") is not None:
            decision_meta["streaming_profile"] = True
    decision = {
        **common,
        "span_id": _span(ident, "decision"),
        "parent_span_id": span,
        "boundary": "aimock.match.decision",
        "mono_ns": mono + 1,
        "duration_ms": None,
        "outcome": "ok" if fixture is not None else "err",
        "metadata": decision_meta,
    }
    terminal = {
        **common,
        "span_id": _span(ident, "end"),
        "parent_span_id": span,
        "mono_ns": mono + 2,
        "duration_ms": None,
    }
    if response.get("interrupted") is True:
        terminal["boundary"] = "aimock.response.aborted"
        terminal["outcome"] = "err"
        terminal["metadata"] = {
            "termination_kind": "fin_premature",
            "bytes_before_abort": None,
            "interrupt_reason": _text(response.get("interruptReason"), 40),
            "source": "journal",
        }
    else:
        terminal["boundary"] = "aimock.response.complete"
        terminal["outcome"] = "ok" if status is not None and status < 400 else "err"
        terminal["metadata"] = {
            "http_status": status,
            "total_bytes": None,
            "total_duration_ms": None,
            "chunk_count": None,
            "source": "journal",
        }
    return [ingress, decision, terminal]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _test_id(headers: dict[str, Any], path: str) -> str | None:
    for name, value in headers.items():
        if isinstance(name, str) and name.lower() == "x-test-id" and isinstance(value, str):
            return value
    found = _TEST_ID_QUERY.search(path)
    if found is None:
        return None
    from urllib.parse import unquote

    return unquote(found.group(1))


def _ts(epoch_ms: float) -> str:
    moment = _EPOCH + datetime.timedelta(milliseconds=int(epoch_ms))
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _span(ident: str, part: str) -> str:
    return hashlib.blake2b(f"{ident}|{part}".encode(), digest_size=8).hexdigest()


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value == value and abs(value) < 1e15:
        return int(value)
    if isinstance(value, str) and value.isdigit() and len(value) < 16:
        return int(value)
    return None


def _text(value: Any, limit: int = TEXT_LIMIT) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    from cvdiag.scrubbing.redact import scrub_head

    return scrub_head(value, limit)


def _content(message: dict[str, Any]) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones, joined
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str)) or None
    return None


def _last_user(body: dict[str, Any]) -> str | None:
    """The request's last user message (what aimock's ``userMessage`` matches), scrubbed."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages[-256:]):
            if isinstance(message, dict) and message.get("role") == "user":
                return _text(_content(message))
    for key in ("input", "prompt"):  # the Responses API, completions
        if isinstance(body.get(key), str):
            return _text(body[key])
    return None


def _request_keys(body: dict[str, Any]) -> list[str]:
    """What the request offered a fixture to match on (aimock's match fields)."""
    keys = []
    if isinstance(body.get("model"), str):
        keys.append("model")
    messages = body.get("messages")
    if isinstance(messages, list):
        roles = {m.get("role") for m in messages[-256:] if isinstance(m, dict)}
        if "user" in roles:
            keys.append("userMessage")
        if "system" in roles:
            keys.append("systemMessage")
        if "tool" in roles:
            keys.append("toolCallId")
    if body.get("tools"):
        keys.append("toolName")
    return keys


def _fixture_label(fixture: dict[str, Any] | None) -> str | None:
    """A fixture named by its match, as its file writes it (``userMessage="hello"``): aimock
    gives fixtures no id."""
    if fixture is None:
        return None
    match = fixture.get("match")
    if not isinstance(match, dict) or not match:
        return "(a fixture without a match)"
    said = ", ".join(
        f"{key}={orjson.dumps(value).decode()[:80]}" for key, value in list(match.items())[:4]
    )
    return _text(said, TEXT_LIMIT)


__all__ = ["MAX_JOURNAL", "entry_envelopes", "journal_lines", "looks_like_journal"]
