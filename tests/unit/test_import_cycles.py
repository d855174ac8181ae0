"""No import cycles between strom's modules.

The graph is built from the source with ``ast``: an edge ``a -> b`` for every ``import b`` /
``from b import x`` / ``from b import module`` in ``a``, at module level or inside a function
(a deferred import still ties the two modules together), except those under
``if TYPE_CHECKING:`` (they never run). A cycle is a strongly connected component of more than
one module; the message names one cycle through it. Implicit imports of parent packages (Python
runs ``strom/log/__init__.py`` before ``strom/log/segment.py``) are not edges: only what a module
names.

``ALLOWED`` lists cycles tolerated for now, each with the reason; it is empty.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# frozenset of module names -> why the cycle stays (none today)
ALLOWED: dict[frozenset[str], str] = {}


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package)} for every module under ``root``."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """{module: modules of ``package`` it imports} for the package whose directory is
    ``root / package``."""
    mods = _modules(root)
    mods = {m: v for m, v in mods.items() if m == package or m.startswith(package + ".")}

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, (path, is_pkg) in mods.items():
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            else:
                if node.level:
                    base_parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join([*base_parts, *([node.module] if node.module else [])])
                else:
                    base = node.module or ""
                # ``from pkg import name``: the submodule ``pkg.name`` if there is one, else pkg
                targets = [known(f"{base}.{a.name}") for a in node.names]
            edges.update(t for t in targets if t is not None and t != mod)
        graph[mod] = edges
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of two or more modules
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp: set[str] = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        components.append(comp)
    return [_one_cycle(graph, comp) for comp in components]


def _one_cycle(graph: Mapping[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first)."""
    start = min(comp)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in component {sorted(comp)}")


def test_strom_has_no_import_cycles() -> None:
    found = cycles(import_graph(SRC, "strom"))
    bad = [c for c in found if frozenset(c) not in ALLOWED]
    assert not bad, "import cycles:\n" + "\n".join(" -> ".join(c) for c in bad)


def test_allowed_cycles_still_exist() -> None:
    """An allow-listed cycle that was broken must leave the list."""
    found = {frozenset(c) for c in cycles(import_graph(SRC, "strom"))}
    assert set(ALLOWED) <= found, sorted(sorted(c) for c in set(ALLOWED) - found)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # a module-level cycle
        ({"a.py": "from . import b\n", "b.py": "from .a import x\n"}, [["p.a", "p.b", "p.a"]]),
        # a deferred (function-level) import closes a cycle too
        ({"a.py": "import p.b\n", "b.py": "def f():\n    from p import a\n"}, [["p.a", "p.b", "p.a"]]),
        # TYPE_CHECKING imports never run: no cycle
        (
            {
                "a.py": "from . import b\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
            },
            [],
        ),
        # a three-module cycle through a package __init__, named from its first module
        (
            {"__init__.py": "from .c import y\n", "c.py": "from .d import z\n", "d.py": "import p\n"},
            [["p", "p.c", "p.d", "p"]],
        ),
        # a chain is not a cycle
        ({"a.py": "from .b import x\n", "b.py": "from .c import y\n", "c.py": "import os\n"}, []),
    ],
)
def test_cycle_finder(tmp_path: Path, files: dict[str, str], expected: list[list[str]]) -> None:
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in files.items():
        (pkg / name).write_text(text)
    assert cycles(import_graph(tmp_path, "p")) == expected
