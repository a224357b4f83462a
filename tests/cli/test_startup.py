"""What ``cvdiag`` imports to start: the start-up is a large part of a ``grep`` on a cached log,
so the commands that need neither the scrubber nor the schema must not import them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_LOADED = """
import json, sys
from cvdiag.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _loaded(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True, check=True
    )
    names: list[str] = json.loads(done.stderr.splitlines()[-1])
    return set(names)


def test_version_imports_no_parser_no_reader_no_scrubber() -> None:
    loaded = _loaded("--version")
    assert not loaded & {
        "argparse",
        "cvdiag.cli.arguments",
        "cvdiag.scrubbing.redact",
        "orjson",
        "typing",
    }
    assert "cvdiag.logs.reading" not in loaded


def test_grep_imports_neither_the_scrubber_nor_the_schema(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"nothing here\nCVDIAG {} t-1\n")
    loaded = _loaded("grep", "--test-id", "t-1", str(log))
    assert "cvdiag.logs.search" in loaded  # the plain file went the fast way
    assert not loaded & {
        "cvdiag.scrubbing.redact",
        "cvdiag.scrubbing.rules",
        "cvdiag.scrubbing.vendors",
        "cvdiag.schema.vocabulary",
        "gzip",
        "typing",
    }


@pytest.mark.parametrize(
    "first", ["import cvdiag.pipeline.emitter", "import cvdiag.scrubbing.redact", "pass"]
)
def test_the_package_scrub_is_the_function_whatever_was_imported_first(first: str) -> None:
    code = (
        f"{first}\nimport cvdiag\nfrom cvdiag import scrub\nimport cvdiag.scrubbing.redact as mod\n"
        "print(callable(scrub), scrub is cvdiag.scrub is mod.scrub, scrub({'k': 'v'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split(" ", 2)[:2] == ["True", "True"]
