"""A descriptor of cvdiag's own for the host's stdout, written without ever blocking.

The stdout sink writes from the event loop that emitted the lines, so no thread has to wake (and
take the GIL from the loop) once per burst. A write there must never block, yet the host's own
descriptor must keep its blocking mode: a host ``print()`` on a non-blocking stdout raises
``BlockingIOError`` when the pipe is full. So cvdiag opens the same pipe or terminal again
through ``/proc/self/fd``: a new open file description of the same pipe, whose ``O_NONBLOCK``
is its own. A regular file never blocks; it is written through a duplicate of its descriptor
(same offset, same flags). Anything else (a socket, a platform without ``/proc``) gets None, and
the sink's writer thread does the writing as before.
"""

from __future__ import annotations

import contextlib
import os
import select
import stat
import sys
import time
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


def write_some(fd: int, data: bytes | memoryview) -> int:
    """Write what the descriptor takes now; 0 when it is full. Other errors raise."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


def write_all(fd: int, data: bytes, timeout: float | None = None) -> None:
    """Write all of ``data``, waiting for room (from a thread, never the loop): the writer
    thread's and the exit flush's way. Raises ``TimeoutError`` past ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    view = memoryview(data)
    while view:
        written = write_some(fd, view)
        if written:
            view = view[written:]
            continue
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            raise TimeoutError("stdout did not drain in time")
        select.select([], [fd], [], 0.5 if wait is None else min(wait, 0.5))
