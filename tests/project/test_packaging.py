from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import cvdiag

ROOT = Path(__file__).resolve().parents[2]


def test_runtime_dependencies_are_exactly_the_three() -> None:
    requires = metadata.requires("cvdiag") or []
    runtime = sorted(
        re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower() for r in requires if "extra ==" not in r
    )
    assert runtime == ["opentelemetry-api", "orjson", "starlette"]


def test_typed_and_schema_are_packaged() -> None:
    package = Path(cvdiag.__file__).parent
    assert (package / "py.typed").exists()
    assert (package / "schema" / "schema.json").exists()


def test_public_api_names() -> None:
    for name in ("Settings", "configure", "emit", "flush", "current_context", "scrub"):
        assert name in cvdiag.__all__
        assert hasattr(cvdiag, name)


def test_readme_quickstart_has_exactly_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^## Quickstart\s*^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[0].endswith("cvdiag demo")
    assert "pytest" in commands[1]


def test_the_console_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cvdiag", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert "usage" in result.stdout.lower()


def test_every_public_name_resolves_and_scrub_stays_the_function() -> None:
    import importlib

    package = importlib.import_module("cvdiag")
    importlib.import_module("cvdiag.scrubbing.redact")  # the scrubber loaded first changes nothing
    assert callable(package.scrub)
    assert package.scrub("sk-test-12345") == "[REDACTED]"
    for name in package.__all__:
        assert getattr(package, name) is not None


def test_the_command_does_not_import_the_server_side() -> None:
    code = (
        "import sys, cvdiag.cli; "
        "print(sorted(m for m in ('cvdiag.asgi.middleware', 'cvdiag.outbound.transports', "
        "'cvdiag.scopes', 'starlette') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_the_command_does_not_compile_the_scrub_rules() -> None:
    # About 40 ms, more than half of the command's start-up: compiled on first use instead.
    code = (
        "import cvdiag.cli, cvdiag.scrubbing.matches as m; print('active' in vars(m)); "
        "import cvdiag; print(cvdiag.scrub('key sk-test-123456789abc')); print('active' in vars(m))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split("\n")[:3] == ["False", "key [REDACTED]", "True"], result.stderr


def test_rules_installed_before_the_first_scrub_are_the_ones_in_force() -> None:
    code = (
        "from cvdiag.scrubbing.redact import scrub_text, use_rules; "
        "use_rules(patterns=[r'acme-[0-9]{6}'], allow=['sk-test-123456789abc']); "
        "print(scrub_text('acme-123456 sk-test-123456789abc'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[REDACTED] sk-test-123456789abc", result.stderr


def test_the_release_builds_the_compiled_wheels_the_docs_promise() -> None:
    # docs/installing.md's table of what pip picks: compiled for CPython 3.10-3.13 on Linux
    # (manylinux and musllinux by cibuildwheel's default, both architectures) and macOS, with
    # the mypyc hook on; every compiled module is one tests/support/compiled.py checks.
    tomllib = pytest.importorskip("tomllib")  # 3.11+; the other interpreters run it
    from tests.support.compiled import REQUEST_PATH

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    release = project["tool"]["cibuildwheel"]
    assert release["build"] == ["cp310-*", "cp311-*", "cp312-*", "cp313-*"]
    assert release["environment"] == {"HATCH_BUILD_HOOK_ENABLE_MYPYC": "true"}
    assert not {"*-manylinux*", "*-musllinux*", "*-macosx*"} & set(release["skip"])
    assert release["linux"]["archs"] == ["x86_64", "aarch64"]
    assert release["macos"]["archs"] == ["x86_64", "arm64"]
    assert "BUILD == 'compiled'" in release["test-command"]
    hook = project["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    assert hook["enable-by-default"] is False  # a plain build is the pure py3-none-any wheel
    outside = [name for name in REQUEST_PATH if not name.startswith("cvdiag.asgi.")]
    listed = {f"/{name.replace('.', '/')}.py" for name in outside}
    assert set(hook["include"]) == {"/cvdiag/asgi", *listed}
    asgi = {p.stem for p in (ROOT / "cvdiag" / "asgi").glob("*.py")} - {"__init__"}
    assert {f"cvdiag.asgi.{stem}" for stem in asgi} <= set(REQUEST_PATH)
