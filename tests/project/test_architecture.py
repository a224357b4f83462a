"""The tree, docs/architecture.md and the imports say the same thing.

- every module the page names exists, and the page names every module;
- each part of the package (a subpackage) says in its ``__init__`` docstring what it may import
  (``May import: ...``), the page's table of parts says the same, and those allowances point one
  way (no circle between parts);
- every import in the source, type-only and function-level ones included, stays inside what its
  part may import, and no two modules import each other in a circle;
- no module is over 400 lines, none on the request path over 300, and no part over 20 modules.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cvdiag"
PAGE = ROOT / "docs" / "architecture.md"
#: Paths inside the package as the page writes them: `cvdiag/...` in backticks.
NAMED = re.compile(r"`(cvdiag/[A-Za-z0-9_/]+\.(?:py|json))`")
MAY_IMPORT = re.compile(r"^May import: (.*?)(?:\n\n|\Z)", re.M | re.S)
#: The parts whose code runs inside a request (or its emit): each module at most 300 lines.
REQUEST_PATH = (
    "asgi",
    "core",
    "otel",
    "outbound",
    "probe",
    "pipeline",
    "schema",
    "scopes",
    "scrubbing",
    "showcase",
    "sinks",
)
#: The parts on top: the pytest integration and the showcase face import parts, and no part may
#: import them.
TOP = ("pytest_plugin", "showcase")


def named() -> set[str]:
    return set(NAMED.findall(PAGE.read_text(encoding="utf-8")))


def files() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for pattern in ("*.py", "*.json")
        for path in PACKAGE.rglob(pattern)
    }


def modules() -> dict[str, Path]:
    """Dotted module name → file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(known: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module → the package's modules it imports anywhere: at the top, in a function, or only
    for type checking (a type-only import still ties two modules together for a reader)."""
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                targets += [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
        edges = set()
        for target in targets:
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def part_of(module: str) -> str | None:
    """The part (subpackage) a module belongs to; None for the package's own face and entry
    point (``cvdiag``, ``cvdiag.__main__``)."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and (PACKAGE / pieces[1]).is_dir() else None


def parts() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def _allowed(text: str, where: str) -> set[str]:
    found = MAY_IMPORT.search(text)
    assert found, f"{where} does not say what it may import ('May import: ...')"
    said = " ".join(found.group(1).split())
    if said.startswith("nothing of cvdiag"):
        return set()
    return set(re.findall(r"cvdiag\.(\w+)", said))


def allowed_by_packages() -> dict[str, set[str]]:
    result = {}
    for part in parts():
        doc = ast.get_docstring(ast.parse((PACKAGE / part / "__init__.py").read_text()))
        assert doc, f"cvdiag/{part}/__init__.py has no docstring saying what it holds"
        result[part] = _allowed(doc, f"cvdiag/{part}/__init__.py")
    return result


def allowed_by_page() -> dict[str, set[str]]:
    """The page's table of parts: `| `cvdiag/<part>/` | holds | may import |`."""
    rows = re.findall(
        r"^\| `cvdiag/(\w+)/` \| [^|]* \| ([^|]*) \|$", PAGE.read_text(encoding="utf-8"), re.M
    )
    return {
        part: set() if imports.strip() in {"—", "nothing"} else set(re.findall(r"`(\w+)`", imports))
        for part, imports in rows
    }


# --- the page names every module ---------------------------------------------------------------


def test_every_module_the_page_names_exists() -> None:
    gone = sorted(named() - files())
    assert not gone, f"docs/architecture.md names modules that are gone: {gone}"


def test_the_page_names_every_module() -> None:
    missing = sorted(files() - named())
    assert not missing, f"docs/architecture.md does not say what these hold: {missing}"


def test_the_page_is_linked_from_the_docs_index() -> None:
    assert "(architecture.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")


# --- dependencies point one way -----------------------------------------------------------------


def test_the_page_and_each_part_say_the_same_about_what_it_may_import() -> None:
    assert allowed_by_page() == allowed_by_packages()


def test_the_page_lists_the_parts_from_the_bottom_up() -> None:
    """A part may import only parts the page lists before it: the table reads as a plan."""
    order = list(allowed_by_page())
    assert sorted(order) == parts()
    late = {
        part: sorted(name for name in names if order.index(name) > order.index(part))
        for part, names in allowed_by_page().items()
    }
    assert not any(late.values()), f"parts that may import a part listed after them: {late}"


def test_the_parts_may_import_each_other_one_way_only() -> None:
    allowed = allowed_by_packages()
    unknown = {part: sorted(names - set(parts())) for part, names in allowed.items()}
    assert not any(unknown.values()), f"allowances name no part of the package: {unknown}"
    assert circles(allowed) == []


def test_every_import_between_parts_is_one_its_part_may_make() -> None:
    allowed = allowed_by_packages()
    against = sorted(
        f"{module} imports {target}"
        for module, targets in imports(modules()).items()
        for target in targets
        if (mine := part_of(module)) is not None
        and (theirs := part_of(target)) != mine
        and (theirs is None or theirs not in allowed[mine])
    )
    assert not against, "imports against the allowed direction:\n" + "\n".join(against)


def test_no_part_may_import_a_part_on_top() -> None:
    allowed = allowed_by_packages()
    assert all(top in parts() for top in TOP)
    against = {part: sorted(names & set(TOP)) for part, names in allowed.items()}
    assert not any(against.values()), f"parts that may import a part on top: {against}"
    assert list(allowed_by_page())[-len(TOP) :] == list(TOP), "the page lists TOP last"


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    found = circles(imports(modules()))
    assert not found, f"modules that import each other in a circle: {found}"


def test_the_circle_finder_finds_a_circle_and_nothing_else() -> None:
    """The two checks above are only as good as this: a circle of three through a type-only
    import is found, a diamond is not a circle."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) == []
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cvdiag.core import x\n"
    tree = ast.parse(source)
    assert any(isinstance(node, ast.ImportFrom) for node in ast.walk(tree))


def test_the_import_reader_sees_type_only_and_function_level_imports(tmp_path: Path) -> None:
    package = tmp_path / "cvdiag"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cvdiag.low.b import B\n"
    )
    (package / "low" / "b.py").write_text("def f():\n    from cvdiag.low import a\n")
    known = {
        "cvdiag": package / "__init__.py",
        "cvdiag.low": package / "low" / "__init__.py",
        "cvdiag.low.a": package / "low" / "a.py",
        "cvdiag.low.b": package / "low" / "b.py",
    }
    graph = imports(known)
    assert graph["cvdiag.low.a"] == {"cvdiag.low.b"}
    assert graph["cvdiag.low.b"] == {"cvdiag.low.a"}
    assert circles(graph) == [["cvdiag.low.a", "cvdiag.low.b"]]


# --- modules stay small -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_no_module_is_too_long(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    request_path = part_of(".".join(path.relative_to(ROOT).with_suffix("").parts)) in REQUEST_PATH
    limit = 300 if request_path else 400
    assert lines <= limit, f"{path.relative_to(ROOT)}: {lines} lines, over {limit}"


def test_no_part_holds_over_twenty_modules() -> None:
    """A part that grows past 20 modules mixes jobs: it splits, as reading logs and diagnosing
    them did (``logs`` and ``diagnosis``)."""
    crowded = {part: n for part in parts() if (n := len(list((PACKAGE / part).glob("*.py")))) > 20}
    assert not crowded, f"parts over 20 modules: {crowded}"
