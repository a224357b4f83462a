"""What the reading commands share: the logs opened (with progress on a long read), a second read
for ``pertest``, the output, and the names of the inputs for an error line."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from cvdiag.analysis.reading import STDIN, Input, Inputs, Malformed, Record, records
from cvdiag.cli.output import Output
from cvdiag.cli.style import Progress

TYPE_CHECKING = False  # typing costs the command's start-up 5 ms: see cvdiag/cli/__init__.py
if TYPE_CHECKING:
    from cvdiag.analysis.pertest import Again


def output_for(args: argparse.Namespace) -> Output:
    return Output(live=STDIN in args.files, color=args.color)


def opened(args: argparse.Namespace, *, numbered: bool = True) -> Inputs:
    """The inputs, with progress on stderr for a long read (when stderr is a terminal).
    ``numbered=False``: positions are byte offsets (faster), for commands that show none."""
    inputs = Inputs(args.files)
    for item in inputs.inputs:
        item.numbered = numbered
    progress = Progress(args.command, None)
    if progress.enabled:
        inputs.watch(lambda done, total: _progress(progress, done, total))
    args.progress = progress
    return inputs


def _progress(progress: Progress, done: int, total: int | None) -> None:
    progress.total = total
    progress.update(done)


def again(args: argparse.Namespace, inputs: list[Input]) -> Again | None:
    """A second read of the inputs, for the test ids ``pertest`` folded too early: only
    envelopes of a test's story (no accounting), in the first read's order, nothing reported
    twice. None when an input cannot be read twice."""
    if not all(item.rereadable for item in inputs):
        return None

    def read(ids: frozenset[str]) -> Iterator[Record]:
        with Inputs(args.files) as sources:
            for source in sources:
                source.numbered = False
                for record in records(source, _already_reported, test_id=ids):
                    if not record.envelope["boundary"].startswith("cvdiag."):
                        yield record

    return read


def _already_reported(problem: Malformed) -> None:
    pass


def names(args: argparse.Namespace) -> str:
    names = ["stdin" if name == STDIN else name for name in args.files]
    return ", ".join(names) if len(names) <= 3 else f"{', '.join(names[:3])} …"
