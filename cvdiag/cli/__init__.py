"""The ``cvdiag`` command: ``main(argv) -> exit code``.

Every failure is one line on stderr (``cvdiag: error: ...``) and a documented exit code, never a
traceback: 0 ok, 1 nothing found or invalid envelopes, 2 bad arguments or unreadable input,
3 an internal error, 130 interrupted.

May import: cvdiag.compare, cvdiag.core, cvdiag.diagnosis, cvdiag.layers, cvdiag.logs,
cvdiag.report, cvdiag.runs, cvdiag.schema, cvdiag.stats; the demo (``demo.py``) also
cvdiag.asgi, cvdiag.pipeline, cvdiag.scopes and cvdiag.sinks.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from cvdiag.cli import output
from cvdiag.cli.output import (
    Failure,
    OutputError,
    UsageError,
    error,
    flush_stdout,
    silence_stdout,
)
from cvdiag.logs.inputs import InputError

# ``typing`` is not imported at run time by the modules the command loads to start, grep or
# print its version: 5 ms, a twentieth of ``cvdiag grep`` on a page-cached log. Their
# annotations are strings (PEP 563), and mypy reads any ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse  # imported by the parser, which ``cvdiag --version`` does without


def _lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command ``module.name``, imported when it runs: ``cvdiag grep`` needs no classifier,
    and on a log read in a fraction of a second the imports are a large part of the time."""

    def run(args: argparse.Namespace) -> int:
        command: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(module), name
        )
        return command(args)

    return run


def _commands() -> dict[str, Callable[[argparse.Namespace], int]]:
    return {
        "grep": _lazy("cvdiag.cli.commands", "grep"),
        "replay": _lazy("cvdiag.cli.commands", "replay"),
        "classify": _lazy("cvdiag.cli.commands", "classify"),
        "ls": _lazy("cvdiag.cli.listing", "ls"),
        "tail": _lazy("cvdiag.cli.tail", "tail"),
        "stats": _lazy("cvdiag.cli.commands", "stats"),
        "validate": _lazy("cvdiag.cli.validating", "validate"),
        "report": _lazy("cvdiag.cli.report", "report"),
        "diff": _lazy("cvdiag.cli.comparing", "diff"),
        "flakes": _lazy("cvdiag.cli.flaking", "flakes"),
        "demo": _lazy("cvdiag.cli.demo", "demo"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code. Every error line names the command."""
    words = sys.argv[1:] if argv is None else list(argv)
    command = ""
    try:
        try:
            if words == ["--version"]:  # what argparse prints, without building every parser
                from cvdiag.core.version import BUILD, __version__

                output.printed(f"cvdiag {__version__} ({BUILD})\n")
                code: int = output.OK
            else:
                from cvdiag.cli.arguments import parse

                args = parse(words)
                command = f"{args.command}: "
                code = _commands()[args.command](args)
        except SystemExit as exc:  # --help and --version
            code = exc.code if isinstance(exc.code, int) else output.OK
        flush_stdout()  # a full disk is reported here, not ignored at exit
        return code
    except UsageError as exc:
        error(str(exc))
        return output.USAGE
    except InputError as exc:
        error(f"{command}{exc}")
        return output.USAGE
    except Failure as exc:
        if isinstance(exc, OutputError):
            silence_stdout()  # what is still buffered would fail again at exit
        message = str(exc)
        error(message if message.startswith(command) else f"{command}{message}")
        return exc.code
    except BrokenPipeError:  # the reader went away (cvdiag grep ... | head): not an error
        silence_stdout()
        return output.OK
    except KeyboardInterrupt:
        return output.INTERRUPTED
    except Exception as exc:
        error(f"{command}internal error ({type(exc).__name__}: {exc}); please report it")
        return output.INTERNAL


__all__ = ["main"]
