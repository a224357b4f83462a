"""Run the ``cvdiag`` command as a user does: a process of its own per command, with its own
standard streams, environment, working folder and exit status.

The suite runs the command about 300 times, and a new interpreter spends most of each run
importing what every run imports: about 55 ms a command here, against 11 ms for a fork of an
interpreter that has imported it. So each run is a process forked from a warm one, started once
per pytest process (``warm.py``): the child takes the test's arguments, environment, folder
and three streams, runs ``cvdiag`` as ``python -m cvdiag`` does (``runpy``, as ``__main__``),
and exits with its status. What a fork cannot reproduce runs as a real ``python -m cvdiag``
instead: an environment that differs in what Python reads as it starts (``PYTHON*``, the
locale), a second command while one runs, or a warm process that is gone. The interpreter's
own start-up is covered by the tests that run ``python -m cvdiag`` themselves
(tests/cli/test_startup.py, tests/project/test_packaging.py, the demo's and the docs' runs).
"""

from __future__ import annotations

import array
import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from tests.support import warm

TIMEOUT = 60
#: How many commands ran forked from the warm interpreter (tests/cli/test_support_runner.py
#: reads it).
forked_runs = 0


def cvdiag(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m cvdiag ARGS`` with ``stdin`` on its standard input (else ``/dev/null``)."""
    command = [sys.executable, "-m", "cvdiag", *args]
    server = _Warm.get()
    ran = None
    if server is not None and server.lock.acquire(blocking=False):
        try:
            ran = server.run(list(args), stdin)
        finally:
            server.lock.release()
    if ran is None:
        done = subprocess.run(
            command,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT,
        )
        ran = done.returncode, done.stdout, done.stderr
    code, out, err = ran
    return subprocess.CompletedProcess(command, code, out.decode(), err.decode())


def _startup_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What Python reads from the environment as it starts, and a fork would not read again."""
    return {k: v for k, v in environ.items() if k.startswith(("PYTHON", "LC_", "LANG"))}


class _Warm:
    """This process's warm interpreter, and the socket its requests go through."""

    _current: _Warm | None = None
    _owner = -1

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.environment = _startup_environment(os.environ)
        self.process = subprocess.Popen(
            [sys.executable, str(Path(warm.__file__)), str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        theirs.close()
        self.socket = ours
        self.lock = threading.Lock()
        self.owner = os.getpid()
        atexit.register(self.close)

    @classmethod
    def get(cls) -> _Warm | None:
        """The warm interpreter for this process (started on first use; a fork of a process
        that had one starts its own); None when it cannot serve this environment."""
        if cls._owner != os.getpid() or cls._current is None:
            cls._current, cls._owner = None, os.getpid()
            try:
                cls._current = cls()
            except OSError:
                return None
        current = cls._current
        if current.process.poll() is not None:
            return None
        if _startup_environment(os.environ) != current.environment:
            return None
        return current

    def run(self, args: list[str], stdin: bytes | None) -> tuple[int, bytes, bytes] | None:
        """The command's exit status, stdout and stderr; None when the warm process could not
        start it (the caller runs a real one)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if stdin is not None else (os.open(os.devnull, os.O_RDONLY), -1)
        request = json.dumps({"argv": args, "env": dict(os.environ), "cwd": os.getcwd()})
        try:
            self.socket.sendmsg(
                [request.encode()],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fds(in_r, out_w, err_w))],
            )
            pid = int(self.socket.recv(64) or b"0")
        except (OSError, ValueError):
            pid = 0
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        if not pid:
            for fd in (out_r, err_r, in_w):
                if fd >= 0:
                    os.close(fd)
            return None
        global forked_runs
        forked_runs += 1
        try:
            out, err = _communicate(in_w, stdin, out_r, err_r)
        except BaseException:  # past its time, or the test interrupted: as subprocess.run does
            with contextlib.suppress(ProcessLookupError):  # it ended; a child holds a pipe
                os.kill(pid, signal.SIGKILL)
            raise
        finally:
            status = self.socket.recv(64)  # also after a timeout's kill: the next run's pid follows
        if not status:
            raise RuntimeError("the warm interpreter ended while a command ran")
        return int(status), out, err

    def close(self) -> None:
        if os.getpid() != self.owner:  # a fork of the test process exits: the owner still runs
            return
        self.socket.close()  # the warm interpreter reads the end of its requests and exits
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _fds(*fds: int) -> bytes:
    return array.array("i", fds).tobytes()


def _communicate(in_w: int, stdin: bytes | None, out_r: int, err_r: int) -> tuple[bytes, bytes]:
    """Feed ``stdin`` and read both streams to their end, as ``subprocess.run`` does;
    ``subprocess.TimeoutExpired`` past ``TIMEOUT``."""
    if in_w >= 0:

        def feed() -> None:
            try:
                _write_all(in_w, stdin or b"")
            except OSError:  # the command stopped reading: so would a pipe to a real one
                pass
            finally:
                os.close(in_w)

        threading.Thread(target=feed, daemon=True).start()
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    deadline = time.monotonic() + TIMEOUT
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while selector.get_map():
                ready = selector.select(max(0.0, deadline - time.monotonic()))
                if not ready:
                    raise subprocess.TimeoutExpired(["cvdiag"], TIMEOUT)
                for key, _ in ready:
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
                        os.close(key.fd)
        finally:
            for key in list(selector.get_map().values()):  # the pipes still open
                os.close(key.fd)
    return b"".join(chunks[out_r]), b"".join(chunks[err_r])


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
