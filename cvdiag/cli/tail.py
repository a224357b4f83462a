"""``cvdiag tail``: the readable live view of a log or a pipe (``uvicorn app:app | cvdiag tail``).

One compact line per envelope — time, test id, boundary, the key facts — with aborts and errors
marked (``!``, red on a terminal); the host's own lines pass through, dimmed. Every line, the
host's included, is escaped: a log is untrusted input. What the server writes is unchanged.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
import zlib
from collections.abc import Iterator
from typing import IO, Final

import orjson

from cvdiag.cli.output import OK, Output
from cvdiag.diagnosis.describe import describe
from cvdiag.logs.inputs import BINARY_SAMPLE, looks_binary
from cvdiag.logs.partial import joined_lines
from cvdiag.logs.reading import MAX_LINE, STDIN, InputError, split_envelope
from cvdiag.logs.shape import shape_problem
from cvdiag.schema.vocabulary import BOUNDARY_TIER, Tier

#: How often a followed file is polled for more (tail -f polls once a second).
POLL_SECONDS: Final = 0.2
#: Bytes read back from a followed file's end to find its last lines.
_BACK: Final = 1 << 20
#: The test-id column: a longer id (a minted UUID has 36 characters) is cut in its middle.
ID_WIDTH: Final = 20
_SHORT: Final = {
    "backend.request.ingress": "ingress",
    "backend.agent.enter": "agent.enter",
    "backend.agent.exit": "agent.exit",
    "backend.llm.call.start": "llm.start",
    "backend.llm.call.heartbeat": "llm.heartbeat",
    "backend.llm.call.response": "llm.response",
    "backend.sse.first_byte": "first_byte",
    "backend.sse.event": "event",
    "backend.sse.aborted": "ABORTED",
    "backend.response.complete": "complete",
    "backend.error.caught": "ERROR",
}


def render(envelope: dict[str, object]) -> tuple[str, tuple[str, ...]]:
    """One compact line for an envelope, and its style."""
    boundary = str(envelope["boundary"])
    outcome = str(envelope["outcome"])
    ts = str(envelope["ts"])
    clock = ts[11:23] if len(ts) >= 23 else ts
    loud = boundary in ("backend.sse.aborted", "backend.error.caught") or outcome in (
        "err",
        "timeout",
    )
    mark = "!" if loud else " "
    name = _SHORT.get(boundary, boundary)
    test_id = fitted(str(envelope["test_id"]))
    line = f"{clock} {mark} {test_id:<{ID_WIDTH}} {name:<13} {describe(envelope)}"
    if outcome not in ("info", "ok"):
        line += f"  [{outcome}]"
    if loud:
        return line, ("red", "bold")
    if boundary in ("backend.llm.call.heartbeat", "backend.sse.event"):
        return line, ("dim",)
    if boundary == "backend.response.complete":
        return line, ("green",)
    return line, ()


def fitted(test_id: str, width: int = ID_WIDTH) -> str:
    """``test_id`` in ``width`` characters: a longer one keeps its start and its end around an
    ellipsis. Both ends, since harness ids differ at their end (``...-retry-2``) and minted
    UUIDv7 ids, whose start is the time they were minted, share it within a run."""
    if len(test_id) <= width:
        return test_id
    head = (width - 1) // 2
    return f"{test_id[:head]}…{test_id[len(test_id) - (width - 1 - head) :]}"


class _Filter:
    def __init__(self, args: argparse.Namespace) -> None:
        self.ids = frozenset(args.test_ids) if args.test_ids else None
        self.tier: Tier | None = args.tier
        self.host = not args.envelopes_only

    def envelope(self, envelope: dict[str, object]) -> bool:
        if self.ids is not None and envelope["test_id"] not in self.ids:
            return False
        if self.tier is not None:
            return BOUNDARY_TIER.get(str(envelope["boundary"]), Tier.DEFAULT) <= self.tier
        return True


def _show(out: Output, keep: _Filter, raw: bytes) -> None:
    line = raw.rstrip(b"\r\n")
    text, _aside = split_envelope(line)
    if text is not None:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = None
        if value is not None and shape_problem(value) is None:
            if keep.envelope(value):
                rendered, style = render(value)
                out.human([rendered], [style])
            return
    # A host line, or something that only looks like an envelope: shown as the host wrote it.
    if keep.host and keep.ids is None:
        out.human([line.decode("utf-8", "replace")], [("dim",)])


def tail(args: argparse.Namespace) -> int:
    out = Output(live=True, color=args.color)
    keep = _Filter(args)
    name = args.files[0]
    if name == STDIN:
        lines = _text_only("stdin", _stdin_lines())
    else:
        lines = _file_lines(name, args.lines, not args.no_follow)
    for raw in joined_lines(lines, MAX_LINE):  # a CRI line split into parts, shown whole
        _show(out, keep, raw)
    out.flush()
    return OK


def _stdin_lines() -> Iterator[bytes]:
    stream: IO[bytes] = sys.stdin.buffer
    while True:
        line = stream.readline()
        if not line:
            return
        yield line


def _text_only(name: str, lines: Iterator[bytes]) -> Iterator[bytes]:
    """``lines``, or an error if their first block is binary data: shown escaped, a binary file
    is a screenful of garbage."""
    seen = b""
    for line in lines:
        if len(seen) < BINARY_SAMPLE:
            seen += line[: BINARY_SAMPLE - len(seen)]
            _check_text(name, seen)
        yield line


def _check_text(name: str, head: bytes) -> None:
    if looks_binary(head):
        raise InputError(f"{name} is not a text log (binary data)")


def _open(name: str) -> IO[bytes]:
    if os.path.isdir(name):
        raise InputError(f"cannot read {name}: is a directory")
    try:
        return open(name, "rb")
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise InputError(f"cannot read {name}: {reason}") from None


def _file_lines(name: str, last: int, follow: bool) -> Iterator[bytes]:
    file = _open(name)
    try:
        head = file.read(BINARY_SAMPLE)
        file.seek(0)
        if head[:2] == b"\x1f\x8b":  # gzip: a finished log, read to its end
            try:
                with gzip.open(file, "rb") as packed:
                    _check_text(name, packed.peek(BINARY_SAMPLE)[:BINARY_SAMPLE])
                    lines = list(packed)
            except (OSError, EOFError, zlib.error) as exc:  # damaged: an input error, as elsewhere
                raise InputError(f"cannot read {name}: {exc or type(exc).__name__}") from None
            yield from _last(lines, last)
            return
        _check_text(name, head)
        yield from _tail_start(file, last)
        partial = b""
        while True:
            chunk = file.readline()
            if chunk.endswith(b"\n"):
                yield partial + chunk
                partial = b""
                continue
            partial += chunk
            if not follow:
                if partial:
                    yield partial
                return
            time.sleep(POLL_SECONDS)
            try:
                if os.stat(name).st_size < file.tell():  # truncated (rotated in place)
                    file.seek(0)
                    partial = b""
            except OSError:
                pass
    finally:
        file.close()


def _last(lines: list[bytes], count: int) -> list[bytes]:
    return lines[-count:] if count else []


def _tail_start(file: IO[bytes], count: int) -> Iterator[bytes]:
    """The file's last ``count`` whole lines; leaves the file at its end."""
    size = file.seek(0, os.SEEK_END)
    if count == 0:
        return
    start = max(0, size - _BACK)
    file.seek(start)
    data = file.read(size - start)
    if start and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]  # drop the partial first line
    body, newline, tail = data.rpartition(b"\n")
    if not newline:
        file.seek(start)  # no whole line yet: follow from here
        return
    file.seek(size - len(tail))  # an unfinished last line is read again by the follower
    yield from (line + b"\n" for line in _last(body.split(b"\n"), count))
