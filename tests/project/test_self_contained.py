"""The repository is self-contained: a clone in an empty folder passes its own tests.

Everything the suite reads lives in ``tests/data/`` (vendored with its licence), and no file of
the package, the tests, the benchmarks or the examples names a path outside the checkout.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cvdiag.schema.vocabulary import packaged_schema
from tests.conftest import REFERENCE

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("cvdiag", "tests", "benchmarks", "examples", ".ci")
TEXT_SUFFIXES = {".py", ".md", ".txt", ".json", ".toml", ".cfg", ".ini", ".sh", ""}

#: ``../x`` sequences: resolved against the file's own folder, they must stay inside the checkout.
RELATIVE = re.compile(r"(?:\.\./)+[\w.-]+")
#: ``Path(__file__)`` climbed with ``.parents[N]`` or ``.parent`` chains.
CLIMB = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?((?:\.parents\[\d+\]|\.parent\b)+)")
STEP = re.compile(r"\.parents\[(\d+)\]|\.parent\b")
#: Absolute paths of a particular machine (system paths such as /dev/null or /tmp are fine).
MACHINE_PATH = re.compile(r"""["'`\s=](/(?:work|home|root|Users|opt|srv|mnt)/[^\s"'`]*)""")
#: The reference folder beside the checkout that the suite once read. Spelled in pieces, so that
#: no line of this file reads like a path to it.
SIBLING = "sha" + "red"


def files() -> list[Path]:
    found = [ROOT / ".gitignore"]
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                found.append(path)
    return found


def outside_references(path: Path, text: str) -> list[str]:
    """What ``text`` (the content of ``path``) names outside the repository."""
    problems = []
    for match in RELATIVE.finditer(text):
        target = (path.parent / match.group()).resolve()
        if not target.is_relative_to(ROOT):
            problems.append(f"{match.group()} resolves to {target}")
    for match in CLIMB.finditer(text):
        steps = STEP.finditer(match.group(1))
        levels = sum(int(step.group(1)) + 1 if step.group(1) else 1 for step in steps)
        target = path.resolve().parents[levels - 1] if levels <= len(path.parents) else Path("/")
        if not target.is_relative_to(ROOT):
            problems.append(f"{match.group()} climbs to {target}")
    problems += [f"machine path {m.group(1)}" for m in MACHINE_PATH.finditer(text)]
    if f"{SIBLING}/reference" in text:
        problems.append(f"names {SIBLING}/reference (vendor what is needed under tests/data/)")
    return problems


def test_no_file_names_a_path_outside_the_repository() -> None:
    this = Path(__file__).resolve()  # its own samples of escapes are what it looks for
    problems = {
        str(path.relative_to(ROOT)): found
        for path in files()
        if path != this and (found := outside_references(path, path.read_text(errors="replace")))
    }
    assert problems == {}


def test_the_outside_check_finds_each_kind_of_escape() -> None:
    here = ROOT / "tests" / "example.py"
    assert outside_references(here, 'DATA = Path(__file__).resolve().parent / "data"') == []
    assert outside_references(here, "ROOT = Path(__file__).resolve().parents[1]") == []
    # What tests/conftest.py once did to find the reference folder one level above the checkout.
    assert outside_references(here, f'Path(__file__).resolve().parents[1].parent / "{SIBLING}"')
    assert outside_references(here, "Path(__file__).resolve().parents[2]")
    assert outside_references(here, "Path(__file__).parent.parent.parent")
    assert outside_references(here, 'open("../../../elsewhere/secret.txt")')
    assert outside_references(here, f'open("/{"work"}/{SIBLING}/x.json")')
    assert outside_references(here, f"see {SIBLING}/reference/ for the schema")
    assert (
        outside_references(ROOT / "examples" / "a" / "README.md", "[docs](../../docs/x.md)") == []
    )


def test_the_vendored_schema_is_the_published_v1() -> None:
    schema = json.loads((REFERENCE / "cvdiag-schema-v1.json").read_text(encoding="utf-8"))
    assert schema["$id"] == "https://copilotkit.ai/schemas/cvdiag/v1.json"
    assert schema["schema_version"] == 1
    assert schema["properties"]["schema_version"]["const"] == 1
    # cvdiag's packaged schema only adds to it: every v1 boundary, with at least its v1 keys.
    packaged = packaged_schema()
    assert set(schema["properties"]["boundary"]["enum"]) <= set(
        packaged["properties"]["boundary"]["enum"]
    )
    ours = packaged["$defs"]["boundary_metadata_keys"]
    for boundary, keys in schema["$defs"]["boundary_metadata_keys"].items():
        assert set(keys) <= set(ours.get(boundary, keys)), boundary


def test_the_vendored_data_carries_its_notice() -> None:
    notice = (REFERENCE / "README.md").read_text(encoding="utf-8")
    assert "MIT License" in notice
    assert "Copyright (c) Atai Barkai" in notice
    for name in ("cvdiag-schema-v1.json", "secret-shapes.txt"):
        assert f"`{name}`" in notice


@pytest.mark.parametrize("name", ["cvdiag-schema-v1.json", "secret-shapes.txt"])
def test_the_vendored_files_are_not_empty(name: str) -> None:
    lines = [
        line
        for line in (REFERENCE / name).read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(lines) >= 10
