"""The response body wrappers the httpx transports put around an LLM response's stream.

Each passes the body through unchanged, feeding a ``Tracker``, and ends its call once. They
subclass the library's own byte-stream classes (httpx's or httpx2's, read from the response's
class, never imported here): the client asserts ``isinstance(response.stream, SyncByteStream)``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

from cvdiag.core.errors import is_cancellation
from cvdiag.outbound.tracking import Tracker, current_task


class _SyncStream:
    """Passes a sync response body through, feeding the tracker; ends the call once."""

    def __init__(self, stream: Any, tracker: Tracker) -> None:
        self._stream = stream
        self._tracker = tracker

    def __iter__(self) -> Iterator[bytes]:
        tracker = self._tracker
        tracker.waiting()
        try:
            for chunk in self._stream:
                tracker.got_chunk()
                tracker.feed(chunk)
                yield chunk
                tracker.waiting()
        except GeneratorExit:
            # The consumer dropped the iterator. This may run inside the garbage collector, on
            # any thread (even one holding this call's lock), so it only flags the call: a
            # close() that follows ends it at once, else the heartbeat thread ends it.
            tracker.abandoned()
            raise
        except BaseException as exc:
            tracker.finish(exc)
            raise
        tracker.finish()

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._tracker.finish(early=True)

    def __del__(self) -> None:
        tracker: Tracker | None = getattr(self, "_tracker", None)
        if tracker is not None:
            tracker.abandoned()


def _cancelling() -> bool:
    """Whether the stream is being closed because its task is being cancelled.

    The ``CancelledError`` being handled is the signal on every Python (a context manager's
    exit sees it); ``Task.cancelling()`` adds the cases where it is not in view. That counter
    is trusted from 3.11 only: on 3.10 a backported task may carry it, but nothing there ever
    calls ``uncancel()``, so it stays raised after a cancel scope has long been left.
    """
    if is_cancellation(sys.exc_info()[1]):  # asyncio's, or trio's ``Cancelled``
        return True
    if sys.version_info < (3, 11):
        return False
    task = current_task()
    return task is not None and task.cancelling() > 0


class _AsyncStream:
    """Passes an async response body through, feeding the tracker; ends the call once."""

    def __init__(self, stream: Any, tracker: Tracker) -> None:
        self._stream = stream
        self._tracker = tracker

    async def __aiter__(self) -> AsyncIterator[bytes]:
        tracker = self._tracker
        tracker.reader = current_task()
        tracker.waiting()
        try:
            async for chunk in self._stream:
                tracker.got_chunk()
                tracker.feed(chunk)
                yield chunk
                # Whoever asks for the next chunk reads the stream now: any task, each time.
                tracker.reader = current_task()
                tracker.waiting()
        except GeneratorExit:  # closed by the consumer or by the loop's finalizer: a task
            tracker.finish(early=True)
            raise
        except BaseException as exc:
            tracker.finish(exc)
            raise
        tracker.finish()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._tracker.finish(early=True, cancelled=_cancelling())

    def __del__(self) -> None:
        tracker: Tracker | None = getattr(self, "_tracker", None)
        if tracker is not None:
            tracker.abandoned()


_stream_classes: dict[tuple[str, bool], type] = {}


def stream_class(library: ModuleType, sync: bool) -> type:
    """Our stream wrapper as a subclass of the library's own byte stream.

    The client asserts ``isinstance(response.stream, SyncByteStream)`` (or Async), so the
    wrapper must be one; the classes are built per library on first use.
    """
    key = (library.__name__, sync)
    cls = _stream_classes.get(key)
    if cls is None:
        if sync:
            cls = type("CvdiagSyncByteStream", (_SyncStream, library.SyncByteStream), {})
        else:
            cls = type("CvdiagAsyncByteStream", (_AsyncStream, library.AsyncByteStream), {})
        _stream_classes[key] = cls
    return cls
