"""Where envelopes go: stdout (the default), a file, a logger, memory, or any callable.

Stdout and file sinks never block the caller: lines go into a bounded queue. On an event loop
the stdout sink drains it from the loop itself, once per burst, with non-blocking writes to a
descriptor of its own (cvdiag/descriptor.py); elsewhere, and for flush and exit, one writer
thread drains it. A slow or wedged pipe costs dropped (and counted) envelopes, never latency.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from types import FrameType
from typing import IO, Any, Final, Protocol, TypeGuard, runtime_checkable

import orjson

from cvdiag.descriptor import close_descriptor, own_descriptor, write_all, write_some
from cvdiag.guard import record_failure

PREFIX = b"CVDIAG "
#: Between two lines of a batch: joined in one C call, the writer spends no Python per line.
_LINE_BREAK = b"\n" + PREFIX
#: Outside strings orjson writes only ASCII, so escaping these keeps every line valid JSON.
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # outside the BMP: a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class LineSink(Protocol):
    """A sink that needs only the serialized line: the per-request templates write to it
    without building an envelope dict (cvdiag/template.py)."""

    def write_line(self, line: bytes) -> None: ...


@runtime_checkable
class Sink(Protocol):
    """Receives every envelope that passed the gate: the dict and its serialized JSON."""

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None: ...

    def flush(self, timeout: float = 5.0) -> None: ...

    def close(self) -> None: ...


def _new_bell() -> threading.Lock:
    """A lock held from the start: the writer waits on ``acquire``, a producer rings it with
    ``release`` (one C call; a second ring before the writer answers raises and is ignored)."""
    bell = threading.Lock()
    bell.acquire()
    return bell


class _Sink:
    """Defaults for sinks that have nothing to flush or close."""

    def flush(self, timeout: float = 5.0) -> None:
        return None

    def close(self) -> None:
        return None


class QueuedLineSink(_Sink):
    """``CVDIAG {json}`` lines through a bounded queue and one daemon writer thread.

    When the queue is full the oldest line is dropped and counted; once the writer gets a line
    through again it first writes one ``cvdiag.queue_dropped`` line with the count.

    The writer is woken once per burst, not once per line: the first line after it went idle rings
    a bell (a bare lock, released from C), and the writer then lingers ``LINGER`` seconds so that
    the burst goes out in one write. Waking a thread per line would cost every request two GIL
    hand-offs and a ``threading.Condition`` round trip, several times the price of the envelope.
    """

    #: Seconds the writer lets a burst gather before writing it; a line reaches the pipe at most
    #: this much later (``flush()`` and exit write everything regardless).
    LINGER = 0.01

    def __init__(self, *, queue_size: int = 5000) -> None:
        self.queue_size = queue_size
        self.dropped = 0
        self.written = 0
        self._unreported = 0
        self._queue: collections.deque[bytes] = collections.deque()
        self._bell = _new_bell()
        self._idle = True  # the writer waits for the bell (or has not started)
        self._busy = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._count_lock = threading.Lock()  # only the drop path takes it
        self._closed = False
        #: Held by whoever takes lines off the queue and writes them (the loop or the thread),
        #: so batches go out whole and in emit order.
        self._write_lock = threading.Lock()
        #: What a non-blocking write on the loop could not place yet: written before anything.
        self._rest = b""
        #: The loop a drain is scheduled on (one per burst).
        self._drain_on: asyncio.AbstractEventLoop | None = None
        #: A flush wants the thread to write now, whoever was to.
        self._forced = False
        #: Builds the ``cvdiag.queue_dropped`` line; the emitter that owns the sink sets it.
        self.drop_report: Callable[[int], bytes | None] | None = None

    # -- the caller's side: O(1), never blocks ---------------------------------------------

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        self.write_line(line)

    def write_line(self, line: bytes) -> None:
        """Queue one serialized envelope: what this sink needs of it (the emitter's templated
        path, which builds no envelope dict, calls this directly)."""
        queue = self._queue
        if len(queue) >= self.queue_size:
            try:
                queue.popleft()
            except IndexError:
                pass
            else:
                self._count_drop(1)
        queue.append(line)
        loop = _running_loop()
        if loop is not None:
            fd = self._loop_descriptor()
            if fd is not None:
                # On the loop: drain from the loop, once per burst; no thread wakes.
                if self._drain_on is not loop:
                    self._drain_on = loop
                    loop.call_later(self.LINGER, self._drain_from_loop, fd)
                    if self._thread is None:
                        self._start()  # idle: it writes for flush, exit and a closed loop
                return
        if self._idle:
            self._idle = False
            self._ring()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything queued has been written, at most ``timeout`` seconds."""
        if self._thread is None:
            return
        deadline = time.monotonic() + timeout
        self._forced = True
        self._ring()
        while (self._queue or self._busy or self._rest) and time.monotonic() < deadline:
            time.sleep(0.001)

    def close(self) -> None:
        self.flush()
        self._closed = True
        self._ring()

    def _ring(self) -> None:
        if self._thread is None:
            self._start()
        with contextlib.suppress(RuntimeError):  # already rung: the writer has yet to answer
            self._bell.release()

    # -- the loop's side --------------------------------------------------------------------

    def _loop_descriptor(self) -> int | None:
        """A non-blocking descriptor to write from the loop, or None to use the thread."""
        return None

    def _drain_from_loop(self, fd: int) -> None:
        """Write what is queued without blocking; what the pipe cannot take now waits."""
        self._drain_on = None
        if not self._write_lock.acquire(blocking=False):
            return  # the thread is writing, and takes what is queued with it
        try:
            if not self._rest:
                lines = self._take(len(self._queue))
                if lines:
                    self._rest = self._batch_bytes(lines)
            if self._rest:
                self._rest = self._rest[write_some(fd, self._rest) :]
        except Exception as exc:  # a broken pipe: what was taken is lost, and counted
            self._lost(self._rest, exc)
            self._rest = b""
        finally:
            self._write_lock.release()
        if self._rest or self._queue:
            loop = _running_loop()
            if loop is not None and self._drain_on is None:  # a full pipe: try again later
                self._drain_on = loop
                loop.call_later(self.LINGER, self._drain_from_loop, fd)

    def _loop_drains(self) -> bool:
        """Whether a live event loop will write what is queued, so the thread need not wake
        (unless a flush asks it to): a loop that closed first leaves its lines to the thread."""
        loop = self._drain_on
        return loop is not None and not self._forced and not loop.is_closed()

    def _take(self, count: int) -> list[bytes]:
        queue = self._queue
        batch: list[bytes] = []
        while queue and len(batch) < count:
            batch.append(queue.popleft())
        return batch

    def _batch_bytes(self, lines: list[bytes]) -> bytes:
        """The batch's bytes, after the drop report it owes, if any; counts it written."""
        data = PREFIX + _LINE_BREAK.join(lines) + b"\n"
        self.written += len(lines)
        report = self._drop_report_line()
        return report + data if report else data

    def _lost(self, data: bytes, exc: BaseException) -> None:
        lines = data.count(b"\n")
        self.written -= lines
        self._count_drop(lines)
        record_failure("sink", exc)

    def _drop_report_line(self) -> bytes:
        if not self._unreported or self.drop_report is None:
            return b""
        with self._count_lock:
            count, self._unreported = self._unreported, 0
        try:
            report = self.drop_report(count)
        except Exception as exc:
            with self._count_lock:
                self._unreported += count
            record_failure("sink", exc)
            return b""
        return PREFIX + report + b"\n" if report is not None else b""

    # -- the writer thread -------------------------------------------------------------------

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._run, name="cvdiag-writer", daemon=True)
            thread.start()
            self._thread = thread
            _live_sinks.add(self)
            install_exit_hooks()

    def _run(self) -> None:
        queue = self._queue
        while not self._closed:
            if (not queue and not self._rest) or self._loop_drains():
                self._idle = True
                if not queue or self._loop_drains():  # a line may have come meanwhile
                    self._bell.acquire(timeout=0.5)
                self._idle = False
                continue
            self._forced = False
            time.sleep(self.LINGER)
            self._busy = True
            try:
                with self._write_lock:
                    if self._rest:
                        rest, self._rest = self._rest, b""
                        try:
                            self._write_bytes(rest)
                        except Exception as exc:
                            self._lost(rest, exc)
                    while queue:
                        if self._emit_batch(self._take(512)):
                            self._report_drops()
                    # Also after a burst that ended in a failed write: the report must not
                    # wait for lines that may never come (flush, close and exit still report).
                    self._report_drops()
            finally:
                self._busy = False

    def _emit_batch(self, batch: list[bytes]) -> bool:
        try:
            self._write_bytes(PREFIX + _LINE_BREAK.join(batch) + b"\n")
        except Exception as exc:  # a broken pipe or closed file: the batch is lost, counted
            self._count_drop(len(batch))
            record_failure("sink", exc)
            return False
        self.written += len(batch)
        return True

    def _report_drops(self) -> None:
        """Write one ``cvdiag.queue_dropped`` line for the drops not yet reported. A report that
        cannot be written keeps its count for the next attempt, so no drop goes unreported."""
        if not self._unreported or self.drop_report is None:
            return
        with self._count_lock:
            count, self._unreported = self._unreported, 0
        try:
            report = self.drop_report(count)
            if report is not None:
                self._write_bytes(PREFIX + report + b"\n")
        except Exception as exc:
            with self._count_lock:
                self._unreported += count
            record_failure("sink", exc)

    def _count_drop(self, count: int) -> None:
        with self._count_lock:
            self.dropped += count
            self._unreported += count

    def _write_bytes(self, data: bytes) -> None:
        raise NotImplementedError

    def _reset_after_fork(self) -> None:
        self._thread = None
        self._write_lock = threading.Lock()
        self._drain_on = None
        self._start_lock = threading.Lock()
        self._bell = _new_bell()
        self._idle = True
        self._busy = False


class StdoutSink(QueuedLineSink):
    """The default sink. ``sys.stdout`` is looked up at write time, so redirection still works.

    Where ``sys.stdout`` is an unbuffered or line-buffered pipe, terminal or file, lines go to a
    descriptor of cvdiag's own for it (see cvdiag/descriptor.py), written from the event loop
    without blocking or from the writer thread; otherwise (block-buffered, a ``StringIO``,
    pytest's capture) through ``sys.stdout``, from the writer thread.
    """

    def __init__(self, *, queue_size: int = 5000) -> None:
        super().__init__(queue_size=queue_size)
        self._stream: object = None
        self._fd: int | None = None

    def _loop_descriptor(self) -> int | None:
        stream = sys.stdout
        if stream is not self._stream:  # resolved once per stdout object, not per line
            if not self._write_lock.acquire(blocking=False):
                return None  # the thread is writing: it takes this line too
            try:
                close_descriptor(self._fd)
                self._fd = own_descriptor(stream) if _whole_lines(stream) else None
                self._stream = stream
            finally:
                self._write_lock.release()
        return self._fd

    def _write_bytes(self, data: bytes) -> None:
        stream = sys.stdout
        if stream is None:
            raise OSError("sys.stdout is None")
        if stream is self._stream and self._fd is not None:
            write_all(self._fd, data)
            return
        text = data.decode("utf-8", "replace")
        try:
            stream.write(text)
        except UnicodeEncodeError:
            # A stdout that cannot encode every character (PYTHONIOENCODING=ascii, a latin-1
            # console) would lose the whole batch over one accented name: write JSON's own
            # \\uXXXX escapes instead, which every encoding can carry.
            stream.write(_NON_ASCII.sub(_json_escape, text))
        stream.flush()


def _whole_lines(stream: Any) -> bool:
    """Whether the host's own writes reach the descriptor as whole lines: unbuffered
    (``PYTHONUNBUFFERED=1``, as most container images set) or line-buffered (a terminal).
    A block-buffered stdout flushes mid-line, and a line of ours written beside it, rather
    than through the same buffer, would be glued to the host's half line."""
    try:
        return bool(getattr(stream, "write_through", False) or stream.line_buffering)
    except Exception:  # no such attribute, or a closed stream refusing to answer
        return False


class FileSink(QueuedLineSink):
    """Appends ``CVDIAG {json}`` lines to a file (created if missing)."""

    def __init__(self, path: str | os.PathLike[str], *, queue_size: int = 5000) -> None:
        super().__init__(queue_size=queue_size)
        self.path = os.fspath(path)
        self._file: IO[bytes] | None = None

    def _write_bytes(self, data: bytes) -> None:
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for the sink's life
        try:
            self._file.write(data)
            self._file.flush()
        except BaseException:
            # The batch is lost (and counted); let the next one reopen the file, which heals a
            # descriptor closed or a disk filled under us.
            self._close_file()
            raise

    def _close_file(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()  # flushes: may fail like the writes did; it is closed regardless
            except Exception as exc:
                record_failure("sink", exc)

    def close(self) -> None:
        super().close()
        self._close_file()


class LoggingSink(_Sink):
    """Hands each line to a stdlib logger (for logging / structlog pipelines).

    The record's message is the ``CVDIAG {json}`` line; ``record.cvdiag`` holds the envelope.
    """

    def __init__(
        self, logger: logging.Logger | str = "cvdiag", *, level: int = logging.INFO
    ) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(
                self.level, "CVDIAG %s", line.decode("utf-8"), extra={"cvdiag": envelope}
            )


class MemorySink(_Sink):
    """Keeps envelopes in memory, for tests. Bounded: the oldest go first past ``maxlen``."""

    def __init__(self, *, maxlen: int | None = 100_000) -> None:
        self.envelopes: collections.deque[Mapping[str, Any]] = collections.deque(maxlen=maxlen)
        self.lines: collections.deque[bytes] = collections.deque(maxlen=maxlen)

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        self.envelopes.append(envelope)
        self.lines.append(line)

    def write_line(self, line: bytes) -> None:
        """A line from the templated path: kept as written, and read back as its envelope, so
        what a test sees is what stdout would carry."""
        self.envelopes.append(orjson.loads(line))
        self.lines.append(line)

    def clear(self) -> None:
        self.envelopes.clear()
        self.lines.clear()


class CallableSink(_Sink):
    """Calls ``fn(envelope)`` for every envelope, in the emitting thread."""

    def __init__(self, fn: Callable[[Mapping[str, Any]], object]) -> None:
        self.fn = fn

    def write(self, envelope: Mapping[str, Any], line: bytes) -> None:
        self.fn(envelope)


# --- process lifecycle: write out what is queued at exit and on SIGTERM ---------------------

_live_sinks: weakref.WeakSet[QueuedLineSink] = weakref.WeakSet()
_hooks_installed = False


#: Run before the exit flush: what must still be said (a call outstanding at shutdown ends).
_before_exit: list[Callable[[], object]] = []


def before_exit(fn: Callable[[], object]) -> None:
    """Have ``fn`` run at exit and on SIGTERM, just before the queued lines are written."""
    _before_exit.append(fn)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    return asyncio._get_running_loop()


def flush_all(timeout: float = 5.0) -> None:
    for fn in _before_exit:
        try:
            fn()
        except Exception as exc:
            record_failure("sink", exc)
    deadline = time.monotonic() + timeout
    for sink in list(_live_sinks):
        sink.flush(max(0.0, deadline - time.monotonic()))


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    flush_all(timeout=5.0)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_exit_hooks() -> None:
    """Flush at normal exit (uncaught exceptions included) and on SIGTERM.

    The SIGTERM handler is installed only where none is, and as early as possible: an enabled
    emitter calls this when it is built. That matters under uvicorn, which saves the handlers it
    finds at startup and, after its graceful shutdown, restores them and raises the signal again:
    found in place, this handler then flushes before the process ends.
    """
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(flush_all)
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):  # not the main interpreter, or no signals here
            pass


def _after_fork_in_child() -> None:
    for sink in list(_live_sinks):
        sink._reset_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def takes_lines(sink: Sink) -> TypeGuard[LineSink]:
    """Whether ``sink`` is one of cvdiag's own that needs only the line. A subclass that
    overrides ``write`` wants the envelope dict: it gets it through ``Emitter.emit``."""
    return type(sink).write in _LINE_WRITES


_LINE_WRITES: Final = (QueuedLineSink.write, MemorySink.write)
