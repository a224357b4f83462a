"""The warm interpreter behind ``tests/support/cli.py``: run as ``python warm.py FD``, it imports
the ``cvdiag`` command once, then for each request on the socket FD (the command's arguments,
environment and folder, and its three streams as file descriptors) forks a child that runs the
command as ``python -m cvdiag`` would, answers the child's pid, and then its exit status.

Only the standard library and cvdiag are imported here, nothing of the tests: the child is the
command, with the test's environment and nothing else of pytest's.
"""

from __future__ import annotations

import array
import atexit
import io
import json
import os
import runpy
import socket
import sys
import threading
import time
import traceback


def serve(sock: socket.socket) -> None:
    while True:
        fds = array.array("i")
        message, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
        if not message:  # the test process has gone
            return
        for _, _, data in ancillary:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            sock.close()
            _run(request, list(fds))
        for fd in fds:
            os.close(fd)
        sock.send(str(pid).encode())
        _, status = os.waitpid(pid, 0)
        sock.send(str(os.waitstatus_to_exitcode(status)).encode())


def _run(request: dict[str, object], fds: list[int]) -> None:
    """In the child: become ``python -m cvdiag ARGS`` in the request's folder and environment,
    with the request's streams; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update(dict(request["env"]))  # type: ignore[call-overload]
        time.tzset()
        _streams()
        sys.path[0] = os.getcwd()  # as ``-m`` sets it
        sys.argv = ["-m", *request["argv"]]  # type: ignore[misc]
        code = _main()
    finally:
        os._exit(code)


def _streams() -> None:
    """New standard streams over fds 0, 1 and 2, made as the interpreter made this process's
    (same encoding, errors and buffering): streams over another file would keep its traits,
    such as being seekable."""
    for name, fd, mode in (("stdin", 0, "rb"), ("stdout", 1, "wb"), ("stderr", 2, "wb")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, mode, closefd=False)
        binary: io.FileIO | io.BufferedReader | io.BufferedWriter = raw
        if not isinstance(old.buffer, io.FileIO):  # unbuffered (``-u``) keeps the raw file
            binary = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(
            binary,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=old.line_buffering,
            write_through=old.write_through,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _main() -> int:
    """``runpy`` as ``-m`` runs it, then what the interpreter does on the way out."""
    try:
        runpy.run_module("cvdiag", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _status(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except OSError:
        print("Exception ignored on flushing sys.stdout", file=sys.stderr)
        code = 120
    sys.stderr.flush()
    return code


def _status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
