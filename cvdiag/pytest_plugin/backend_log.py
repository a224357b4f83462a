"""``--cvdiag-backend-log PATH``: the stories of a backend that runs in a process of its own
(uvicorn started by a fixture, a container, a preview deployment), read from the log its stdout
went to, for each test by the test ids it forwarded (``cvdiag_test_id``).

The paths are globs, expanded when the session ends (a rotated ``backend.log.1``, one file per
worker, gzip or not: as ``cvdiag report`` reads them). A backend writes a request's last lines
after its client has its answer, and a queued sink flushes later still, so a story is waited
for: until every test id asked for has its terminal and every scope it opened has closed, or
until ``--cvdiag-backend-wait`` seconds have passed; a story still open then is marked so.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import time
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Final

from cvdiag.logs.inputs import InputError, Inputs
from cvdiag.logs.reading import Malformed, Record, records

#: Seconds waited by default for a story's late lines.
DEFAULT_WAIT: Final = 5.0
#: How often the logs are read again while a story is incomplete.
POLL: Final = 0.1
#: Boundaries that close each one opened (at the verbose tier; a terminal closes a request).
_PAIRS: Final = (
    ("backend.request.ingress", ("backend.response.complete", "backend.sse.aborted")),
    ("backend.agent.enter", ("backend.agent.exit",)),
    ("backend.llm.call.start", ("backend.llm.call.response",)),
)
_TERMINALS: Final = frozenset(_PAIRS[0][1])


@dataclasses.dataclass(slots=True)
class Stories:
    """What the backend's logs hold for the test ids asked for."""

    files: list[str]
    by_test_id: dict[str, list[Record]]
    #: Test ids whose story was still open when the wait ended, and why, in words.
    incomplete: dict[str, str]
    #: A log that could not be read: the reason, naming it (the others are still read).
    problems: list[str]


def expand(patterns: Sequence[str], root: str) -> list[str]:
    """Every file the patterns name, relative ones from ``root``, each once, in name order."""
    found: dict[str, None] = {}
    for pattern in patterns:
        where = os.path.join(root, os.path.expanduser(pattern))
        names = sorted(glob.glob(where)) if glob.has_magic(where) else [where]
        for name in names:
            if os.path.isfile(name) or not glob.has_magic(where):
                found[os.path.normpath(name)] = None
    return list(found)


def read(
    patterns: Sequence[str],
    root: str,
    test_ids: Collection[str],
    *,
    wait: float = DEFAULT_WAIT,
) -> Stories:
    """The backend's envelopes of ``test_ids``, waiting up to ``wait`` seconds for each story to
    be complete (its requests ended, its scopes closed)."""
    deadline = time.monotonic() + max(wait, 0.0)
    while True:
        files = expand(patterns, root)
        stories = _read_once(files, test_ids)
        stories.incomplete = {
            test_id: why
            for test_id in test_ids
            if (why := _open_ends(stories.by_test_id.get(test_id, ()))) is not None
        }
        if not stories.incomplete or time.monotonic() >= deadline:
            return stories
        time.sleep(POLL)


def _read_once(files: list[str], test_ids: Collection[str]) -> Stories:
    by_test_id: dict[str, list[Record]] = {}
    problems: list[str] = []
    readable = []
    for name in files:
        try:
            Inputs([name]).close()
            readable.append(name)
        except (InputError, OSError) as exc:
            problems.append(f"{name}: {exc}")
    if test_ids and readable:
        with Inputs(readable) as inputs:
            for source in inputs:
                for record in records(source, _ignored, test_id=test_ids):
                    by_test_id.setdefault(record.envelope["test_id"], []).append(record)
    for found in by_test_id.values():
        found.sort(key=lambda record: record.key)  # several files, several writers: by time
    return Stories(files, by_test_id, {}, problems)


def _open_ends(found: Iterable[Record]) -> str | None:
    """Why a story is not complete yet, or None when it is."""
    seen = Counter(record.envelope["boundary"] for record in found)
    if not seen:
        return "no envelope in the backend log"
    if not _TERMINALS & set(seen):
        return "no request of it has ended in the log"
    for opened, closing in _PAIRS:
        left = seen[opened] - sum(seen[name] for name in closing)
        if left > 0:
            return f"{left} {opened} without its end"
    return None


def _ignored(problem: Malformed) -> None:
    pass  # a backend's stdout holds other lines too; the page counts malformed ones


def replay(test_id: str, stories: Stories) -> str:
    """One test id's backend story, as ``cvdiag replay`` draws it, marked when incomplete."""
    from cvdiag.diagnosis.timeline import build, render

    found = stories.by_test_id.get(test_id, [])
    why = stories.incomplete.get(test_id)
    lines = render(build(test_id, found)) if found else [f"test id {test_id}"]
    if why is not None:
        lines.append(f"  (incomplete: {why})")
    return "\n".join(lines)
