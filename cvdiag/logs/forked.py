"""Jobs run in forked worker processes, their results handed back in order: a pool with no
thread in the parent.

``concurrent.futures.ProcessPoolExecutor`` watches its workers from a manager thread. When a
worker dies, on CPython 3.10 and 3.11 that thread can race the parent (a future set twice, a
work item added while it walks them) and print ``Exception in thread Thread-1`` and a
traceback on stderr, where ``cvdiag`` promises one error line. Here the parent itself waits on
its workers' pipes and their process sentinels (``multiprocessing.connection.wait``): a result
arrives, or a worker ended; nothing happens behind its back, and a worker that ended before
answering is seen at once. Work is handed out one job at a time, so a slow range does not hold
the others back.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Generator, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from cvdiag.logs.inputs import InputError

T = TypeVar("T")

#: What a worker sends back: the job's index, whether it returned, and its result or exception.
_Answer = tuple[int, bool, Any]


class WorkerDied(Exception):
    """A worker process ended before it answered (killed, out of memory)."""


def run_in_order(
    job: Callable[..., T], calls: Sequence[tuple[Any, ...]], *, processes: int
) -> Generator[T, None, None]:
    """``job(*calls[i])`` for each ``i`` in up to ``processes`` forked workers; the results in
    the order of ``calls``. A job's exception is raised where its result would be; a worker
    that dies raises ``WorkerDied``. Closing the iterator early stops the workers."""
    context = multiprocessing.get_context("fork")
    todo = iter(enumerate(calls))
    working: dict[Connection, int | None] = {}  # each worker's pipe: the job it is doing
    process: dict[Connection, BaseProcess] = {}
    done: dict[int, tuple[bool, Any]] = {}
    try:
        for _ in range(min(processes, len(calls))):
            here, there = context.Pipe()
            # The child closes its copies of the parent's ends: a parent that dies is then seen
            # by every worker as the end of its pipe, and none is left waiting on it.
            child = context.Process(target=_work, args=(there, job, [here, *process]), daemon=True)
            child.start()
            there.close()
            process[here] = child
            working[here] = _give(here, todo)
        for index in range(len(calls)):
            while index not in done:
                _gather(working, process, todo, done)
            returned, value = done.pop(index)
            if not returned:
                raise value
            yield value
    finally:
        for pipe, worker in process.items():
            if working.get(pipe) is not None:
                worker.kill()  # a job nobody will read: stopped now, whatever it handles
            else:
                _send(pipe, None)  # idle: told to stop (again, if it already was)
        for pipe, worker in process.items():
            worker.join()
            pipe.close()


def _gather(
    working: dict[Connection, int | None],
    process: dict[Connection, BaseProcess],
    todo: Iterator[tuple[int, tuple[Any, ...]]],
    done: dict[int, tuple[bool, Any]],
) -> None:
    """Wait for the next answers or ended workers; give each worker that answered a new job."""
    busy = [pipe for pipe, job in working.items() if job is not None]
    ready = wait([*busy, *(process[pipe].sentinel for pipe in busy)])
    for pipe in busy:
        if pipe in ready or pipe.poll():  # an answer sent just before the worker ended counts
            try:
                index, returned, value = pipe.recv()
            except (EOFError, OSError):
                raise WorkerDied from None
            done[index] = (returned, value)
            working[pipe] = _give(pipe, todo)
        elif process[pipe].sentinel in ready:
            raise WorkerDied


def _give(pipe: Connection, todo: Iterator[tuple[int, tuple[Any, ...]]]) -> int | None:
    """Send the worker on ``pipe`` its next job (None: nothing left, it exits)."""
    index, args = next(todo, (None, ()))
    if not _send(pipe, None if index is None else (index, args)) and index is not None:
        raise WorkerDied
    return index


def _send(pipe: Connection, message: object) -> bool:
    try:
        pipe.send(message)
    except OSError:  # the worker is gone: its sentinel, or the missing answer, says so
        return False
    return True


def _work(pipe: Connection, job: Callable[..., Any], inherited: list[Connection]) -> None:
    """A worker: jobs from ``pipe`` until told to stop (or the parent is gone)."""
    # Ctrl-C is the parent's to handle: a worker interrupted while waiting would print a trace.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A SIGTERM handler the command's process had (a host's, a test's) is not the worker's.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for other in inherited:
        other.close()
    try:
        while (task := pipe.recv()) is not None:
            index, args = task
            try:
                answer: _Answer = (index, True, job(*args))
            except Exception as exc:  # the parent raises it in the job's place
                answer = (index, False, exc)
            try:
                pipe.send(answer)
            except OSError:
                raise
            except Exception as exc:  # an unpicklable result (nothing was written)
                pipe.send((index, False, InputError(f"a worker's result was lost: {exc}")))
    except (EOFError, OSError):
        return  # the parent is gone or closed the pipe: nothing to answer
