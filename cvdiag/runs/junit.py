"""Any runner's JUnit XML as ``Case`` values: pytest's ``--junitxml``, Playwright's, vitest's
and Jest's reporters, read as they write them.

A testcase names its test ids by a ``cvdiag_test_id`` (or ``test_id``) property, or by a
``cvdiag-test-id: <id>`` line in its ``system-out``/``system-err`` (what a TypeScript test
prints or attaches). It failed on a ``<failure>`` or an ``<error>`` (Playwright's timeouts are
errors), was skipped on a ``<skipped>``. Retries come two ways, both read as attempts: as
Surefire's children (``<flakyFailure>``/``<flakyError>``: failed attempts before the pass;
``<rerunFailure>``/``<rerunError>``: failed attempts after the first failure), which
Playwright writes with ``includeRetries``, each with its own output; or, without them, as
several id lines in the one testcase's output, one per attempt, the last the final one.

A JUnit file comes from a CI run, so it is read as untrusted: with expat from the standard
library, a DOCTYPE refused before any entity could be declared (no billion laughs, no external
entity: no file or URL is ever opened), at most ``MAX_BYTES`` read, nesting and kept text
bounded. A file that breaks any of this is one ``JUnitError`` naming it; nothing else is lost.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Final
from xml.parsers import expat

from cvdiag.runs.attempts import from_headers, sections, spread
from cvdiag.runs.cases import ATTEMPTS_MAX, FAILURE_MAX, IDS_MAX, Attempt, Case, failure_text
from cvdiag.schema.ids import join_key

#: The largest JUnit file read: a run of 100,000 tests with their output is a few tens of MB.
MAX_BYTES: Final = 64 * 1024 * 1024
#: Elements open at once (a testsuite inside testsuites inside a few more is under ten).
MAX_DEPTH: Final = 100
#: Characters of one output (``system-out``) kept to look for id lines: ids are printed early.
MAX_OUTPUT: Final = 1 << 20
MAX_CASES: Final = 100_000
#: What a test prints (or attaches) to name the test id it forwards.
ID_LINE: Final = re.compile(r"cvdiag-test-id:[ \t]*([^\s\"'<>]+)")
#: Properties that carry a test id.
ID_PROPERTIES: Final = frozenset({"cvdiag_test_id", "test_id"})
#: The pytest plugin's property: this attempt failed, and how (pytest's JUnit keeps no failure
#: of an attempt that pytest-rerunfailures ran again).
FAILURE_PROPERTY: Final = "cvdiag_failure"
_FAILED: Final = frozenset({"failure", "error"})
_FLAKY: Final = frozenset({"flakyFailure", "flakyError"})
_RERUN: Final = frozenset({"rerunFailure", "rerunError"})
_OUTPUT: Final = frozenset({"system-out", "system-err"})
_CHUNK: Final = 1 << 20


class JUnitError(Exception):
    """A JUnit file that cannot be read; the message names it and says why, in one line."""


class _Refused(Exception):
    pass


@dataclasses.dataclass(slots=True)
class _Part:
    """A testcase, or one retry child of it: its ids and failure text as they are read."""

    #: Ids from its output lines, and from its properties (another attempt's, in Playwright).
    ids: list[str] = dataclasses.field(default_factory=list)
    props: list[str] = dataclasses.field(default_factory=list)
    failure: list[str] = dataclasses.field(default_factory=list)
    failed: bool = False
    skipped: bool = False
    #: The plugin's ``cvdiag_failure`` property; ``cvdiag_failure.N`` ones, by attempt.
    noted: str = ""
    numbered: dict[int, str] = dataclasses.field(default_factory=dict)

    def add_id(self, raw: str, *, prop: bool = False) -> None:
        test_id = join_key(raw)  # as the middleware adopts it, so the two meet
        into = self.props if prop else self.ids
        if test_id is not None and test_id not in into and len(into) < ATTEMPTS_MAX * IDS_MAX:
            into.append(test_id)

    def all_ids(self) -> list[str]:
        return [*self.ids, *(i for i in self.props if i not in self.ids)]

    def add_failure(self, message: str) -> None:
        if message and sum(map(len, self.failure)) < FAILURE_MAX:
            self.failure.append(message[:FAILURE_MAX])

    def text(self) -> str:
        return failure_text("\n".join(dict.fromkeys(part.strip() for part in self.failure)))


class _Reader:
    def __init__(self, run: str = "") -> None:
        self.run = run
        self.cases: list[Case] = []
        self._stack: list[str] = []
        self._case: _Part | None = None
        self._name = ""
        self._flaky: list[_Part] = []
        self._rerun: list[_Part] = []
        self._child: _Part | None = None
        #: The text being kept (an output, a failure's), and how much of it.
        self._text: list[str] | None = None
        self._kept = 0
        #: Which ``<testsuite>`` a testcase is in, and the tests of each by name: a name seen
        #: again in the same suite is another attempt of that test (pytest-rerunfailures).
        self._suite = 0
        self._named: dict[tuple[int, str], Case] = {}
        #: A file pytest wrote: an earlier testcase of a name seen again was rerun, so failed.
        self._pytest = False
        self._noted: set[tuple[int, str]] = set()
        parser = expat.ParserCreate()
        parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        parser.StartDoctypeDeclHandler = self._doctype
        parser.EntityDeclHandler = self._entity
        parser.ExternalEntityRefHandler = self._external
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._data
        parser.buffer_text = True
        self.parser = parser

    def _doctype(self, *_: object) -> None:
        raise _Refused("it declares a DOCTYPE (refused: entities are never expanded)")

    def _entity(self, *_: object) -> None:
        raise _Refused("it declares an entity (refused)")

    def _external(self, *_: object) -> int:
        raise _Refused("it refers to an external entity (refused)")

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        self._stack.append(name)
        if len(self._stack) > MAX_DEPTH:
            raise _Refused(f"elements nest deeper than {MAX_DEPTH}")
        if name == "testsuites" and attrs.get("name") == "pytest tests":
            self._pytest = True
        elif name == "testsuite":
            self._suite += 1
            self._pytest = self._pytest or attrs.get("name") == "pytest"
        if name == "testcase":
            if len(self.cases) >= MAX_CASES:
                raise _Refused(f"it holds more than {MAX_CASES} testcases")
            self._case, self._flaky, self._rerun, self._child = _Part(), [], [], None
            classname, title = attrs.get("classname", ""), attrs.get("name", "")
            self._name = f"{classname}::{title}" if classname and title else title or classname
            return
        case = self._case
        if case is None:
            return
        part = self._child or case
        # A property may name its attempt (``cvdiag_test_id.2``: jest-junit writes one value
        # per name, so each attempt's id, and each retried attempt's failure, has its own).
        key, _, attempt = (
            attrs.get("name", "").partition(".") if name == "property" else ("", "", "")
        )
        if key in ID_PROPERTIES:
            part.add_id(attrs.get("value", ""), prop=True)
        elif key == FAILURE_PROPERTY and attempt.isdigit() and len(part.numbered) < ATTEMPTS_MAX:
            part.numbered[int(attempt)] = attrs.get("value", "")[:FAILURE_MAX]
        elif key == FAILURE_PROPERTY:
            part.noted = attrs.get("value", "")[:FAILURE_MAX]
        elif name in _FLAKY or name in _RERUN:
            self._child = _Part(failed=True)
            (self._flaky if name in _FLAKY else self._rerun).append(self._child)
            self._child.add_failure(attrs.get("message", ""))
            self._keep()
        elif name in _FAILED:
            part.failed = True
            part.add_failure(attrs.get("message", ""))
            self._keep()
        elif name == "skipped":
            part.skipped = True
        elif name in _OUTPUT or name == "stackTrace":
            self._keep()

    def _keep(self) -> None:
        self._text, self._kept = [], 0

    def _data(self, data: str) -> None:
        if self._text is not None and self._kept < MAX_OUTPUT:
            self._text.append(data[: MAX_OUTPUT - self._kept])
            self._kept += len(data)

    def _end(self, name: str) -> None:
        self._stack.pop()
        case = self._case
        if case is None:
            return
        if name == "testcase":
            self._add(case)
            self._case = self._child = None
            return
        part = self._child or case
        text = "".join(self._text) if self._text is not None else ""
        if name in _OUTPUT:
            for match in ID_LINE.finditer(text):
                part.add_id(match.group(1))
        elif name in _FAILED or name == "stackTrace" or name in _FLAKY or name in _RERUN:
            part.add_failure(text)
        if name in _FLAKY or name in _RERUN:
            self._child = None
        if name in _OUTPUT or name in _FAILED or name == "stackTrace":
            self._text = None

    def _add(self, case: _Part) -> None:
        """The testcase as a test, or as the next attempts of the test of its name in its suite
        (each attempt's ids its own: the plugin's ids of earlier attempts are left out)."""
        key = (self._suite, self._name)
        earlier = self._named.get(key)
        # Merged in a pytest file, or where the plugin said an attempt failed; elsewhere a
        # name seen twice is two tests (vitest and Jest allow it).
        merge = earlier is not None and (self._pytest or bool(case.noted) or key in self._noted)
        if case.noted:
            self._noted.add(key)
        if earlier is not None and merge:
            seen = set(earlier.test_ids())
            case.ids = [i for i in case.ids if i not in seen]
            case.props = [i for i in case.props if i not in seen]
        attempts = self._attempts(case)
        if earlier is None or not merge:
            self._named[key] = found = Case(self._name, attempts, self.run)
            self.cases.append(found)
            return
        last = earlier.attempts[-1]
        if last.outcome == "passed":  # run again, so it failed: its JUnit kept no failure
            last.outcome = "failed"
        earlier.attempts = [*earlier.attempts, *attempts][:ATTEMPTS_MAX]

    def _attempts(self, case: _Part) -> list[Attempt]:
        outcome = "failed" if case.failed else "skipped" if case.skipped else "passed"
        text = (
            "\n".join(dict.fromkeys(part.strip() for part in case.failure)) if case.failed else ""
        )
        if not case.failed and case.noted:
            outcome, text = "failed", case.noted  # an attempt pytest-rerunfailures ran again
        children = self._flaky or self._rerun
        if not children:
            found = spread(outcome, text, case.ids, case.props)
            for number, said in case.numbered.items():  # a retried attempt's own failure
                if 0 < number <= len(found) and found[number - 1].outcome == "failed":
                    found[number - 1].failure = failure_text(said)
            return found
        retries = [Attempt("failed", child.all_ids()[:IDS_MAX], child.text()) for child in children]
        final = Attempt(outcome, [], failure_text(text))
        if self._flaky:
            # Flaky: the testcase's output and properties are both the last attempt's.
            final.test_ids = case.all_ids()[:IDS_MAX]
            if (
                not any(child.all_ids() for child in children)
                and len(case.ids) == len(children) + 1
            ):  # every attempt's id line in the testcase's own output, in order
                for attempt, test_id in zip(retries, case.ids, strict=False):
                    attempt.test_ids = [test_id]
                final.test_ids = case.ids[-1:]
            return from_headers([*retries, final])[:ATTEMPTS_MAX]
        # Failed every time: the testcase's output is the first attempt's, its properties (an
        # annotation) the last attempt's; its failure tells each attempt after "Retry #N".
        final.test_ids = case.ids[:IDS_MAX]
        own = sections(text)
        if len(own) > 1:
            final.failure = failure_text(own[0])
        if not retries[-1].test_ids:
            retries[-1].test_ids = [i for i in case.props if i not in final.test_ids][:IDS_MAX]
        return from_headers([final, *retries])[:ATTEMPTS_MAX]


def read_junit(path: str) -> list[Case]:
    """The testcases of the JUnit XML file at ``path``, in file order; ``JUnitError`` if it
    cannot be read, is not well-formed XML, or breaks a bound."""
    reader = _Reader(path)
    read = 0
    try:
        with open(path, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            if size > MAX_BYTES:
                raise _Refused(f"{size} bytes, over the {MAX_BYTES} a JUnit file may hold")
            while chunk := source.read(_CHUNK):
                read += len(chunk)
                if read > MAX_BYTES:  # a pipe or a file that grows has no size up front
                    raise _Refused(f"over the {MAX_BYTES} bytes a JUnit file may hold")
                reader.parser.Parse(chunk, False)
            reader.parser.Parse(b"", True)
    except OSError as exc:
        raise JUnitError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except _Refused as exc:
        raise JUnitError(f"{path}: not read: {exc}") from None
    except expat.ExpatError as exc:
        where = f"line {exc.lineno}, column {exc.offset}"
        reason = expat.ErrorString(exc.code) if exc.code else str(exc)
        raise JUnitError(f"{path}: not JUnit XML: {reason} at {where}") from None
    except (LookupError, ValueError, RecursionError) as exc:  # an unknown encoding, say
        raise JUnitError(f"{path}: not JUnit XML: {exc}") from None
    return reader.cases
