"""A descriptor of cvdiag's own for the host's stdout, written without ever blocking.

The stdout sink writes from the event loop that emitted the lines, so no thread has to wake (and
take the GIL from the loop) once per burst. A write there must never block, yet the host's own
descriptor must keep its blocking mode: a host ``print()`` on a non-blocking stdout raises
``BlockingIOError`` when the pipe is full. So cvdiag opens the same pipe or terminal again
through ``/proc/self/fd``: a new open file description of the same pipe, whose ``O_NONBLOCK``
is its own. A regular file never blocks; it is written through a duplicate of its descriptor
(same offset, same flags). Anything else (a socket, a platform without ``/proc``) gets None, and
the sink's writer thread does the writing as before.

Whole lines, however many processes share the descriptor: the kernel keeps a write of at most
``PIPE_BUF`` bytes to a pipe in one piece (with ``O_NONBLOCK`` it goes in whole or not at all),
while a longer one may be cut when the pipe is full and another process's write land in the
middle. So on anything but a regular file a batch goes out in pieces of whole lines, each within
``PIPE_BUF`` (the emitter caps a line to fit, cvdiag/pipeline/gate.py). A regular file takes
each write in one piece whatever its size (the kernel holds the file's lock across it), so
there a batch goes out in one write.
"""

from __future__ import annotations

import contextlib
import os
import select
import stat
import sys
from collections.abc import Callable, Iterator
from typing import Any


def own_descriptor(stream: Any) -> int | None:
    """A descriptor for ``stream``'s file that cvdiag may write without blocking, or None."""
    try:
        fileno = stream.fileno()
        mode = os.fstat(fileno).st_mode
        if stat.S_ISREG(mode):
            return os.dup(fileno)
        if (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)) and sys.platform == "linux":
            flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC
            return os.open(f"/proc/self/fd/{fileno}", flags)
    except (OSError, ValueError, AttributeError):  # no descriptor, or none we may reopen
        pass
    return None


def close_descriptor(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


#: The largest write the kernel keeps whole on a pipe shared with other processes (POSIX: at
#: least 512; 4096 on Linux and macOS).
PIPE_BUF: int = getattr(select, "PIPE_BUF", 512)


def atomic_limit(fileno: int | None) -> int | None:
    """The largest write that reaches ``fileno`` whole beside other processes' writes: None (no
    limit) for a regular file, ``PIPE_BUF`` for anything else (a pipe, a terminal, a socket,
    a descriptor that cannot be asked); a terminal and a socket promise less, and get the
    pipe's bound as the best there is."""
    if fileno is not None:
        try:
            if stat.S_ISREG(os.fstat(fileno).st_mode):
                return None
        except OSError:
            pass
    return PIPE_BUF


def stream_limit(stream: Any) -> int | None:
    """``atomic_limit`` of a stream's descriptor; None for a stream without one (a
    ``StringIO``, a capture), which no other process writes."""
    try:
        fileno = stream.fileno()
    except Exception:  # no descriptor at all
        return None
    return atomic_limit(fileno)


def write_lines(fd: int, data: bytes, limit: int | None) -> int:
    """Write ``data`` in pieces of whole lines within ``limit`` until the descriptor is full;
    the bytes written. A piece the kernel took in part (a regular file or a terminal, never a
    pipe) ends the call: its rest must go out before anything else."""
    size = len(data)
    if limit is None or size <= limit:  # one write: a regular file's batch, a short one
        return write_some(fd, data)
    done = 0
    view = memoryview(data)
    while done < size:
        piece = _piece_at(data, done, limit)
        written = write_some(fd, view[done : done + piece])
        done += written
        if written < piece:
            break
    return done


def _piece_at(data: bytes, start: int, limit: int | None) -> int:
    if limit is None or len(data) - start <= limit:
        return len(data) - start
    end = data.rfind(b"\n", start, start + limit)
    if end < 0:  # one line longer than the limit: whole, if not atomic
        end = data.find(b"\n", start + limit)
        return len(data) - start if end < 0 else end + 1 - start
    return end + 1 - start


def cut_at(data: bytes, limit: int | None) -> Iterator[bytes]:
    """``data`` in pieces of whole lines within ``limit``: what a stream writes and flushes
    one by one."""
    start = 0
    while start < len(data):
        piece = _piece_at(data, start, limit)
        yield data[start : start + piece]
        start += piece


def write_some(fd: int, data: bytes | memoryview) -> int:
    """Write what the descriptor takes now; 0 when it is full. Other errors raise."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


def write_all(
    fd: int,
    data: bytes,
    limit: int | None,
    *,
    stopped: Callable[[], bool] = lambda: False,
) -> int:
    """Write all of ``data`` in pieces of whole lines within ``limit``, waiting for room (from a
    thread, never the loop): the writer thread's way. Returns how many bytes went out: fewer
    than all only when ``stopped()`` said so while waiting (the shutdown bound ran out)."""
    done = 0
    while done < len(data):
        done += write_lines(fd, data[done:] if done else data, limit)
        if done < len(data):
            if stopped():
                break
            select.select([], [fd], [], 0.05)
    return done
