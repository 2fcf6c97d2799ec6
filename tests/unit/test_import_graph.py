"""No import circle inside the `raftcron` package.

Every module under raftcron/ is parsed (not imported) and every import statement in it
is an edge: module-level imports, imports under `if TYPE_CHECKING:` and imports inside
functions alike. A circle hidden behind TYPE_CHECKING or a lazy import is still a
circle between the modules' responsibilities, so it counts.

An edge goes to the module an import names: `from raftcron.a import b` goes to
`raftcron.a.b` when that is a module and to `raftcron.a` otherwise. Importing a module
also runs its packages' `__init__`, so the edge goes to those packages as well, except
the ones that contain the importing module (they are loaded before it anyway).
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

# The source tree next to these tests, whichever copy of the package is installed.
PACKAGE_DIR = Path(__file__).resolve().parents[2] / "raftcron"
PACKAGE = "raftcron"


def _modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported_names(module: str, path: Path, modules: Collection[str]
                    ) -> list[tuple[str, int]]:
    """(dotted name, line) of everything `module` imports, wherever the import is."""
    is_package = path.name == "__init__.py"
    here = module.split(".") if is_package else module.split(".")[:-1]
    names: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # `from raftcron.a import b` names raftcron.a.b when that is a module.
                sub = f"{target}.{alias.name}"
                names.append((sub if sub in modules else target, node.lineno))
    return names


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: line of the first such import}."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        for name, line in _imported_names(module, path, modules):
            if not name.startswith(PACKAGE + "."):
                continue
            while name not in modules:  # `import raftcron.a.b as x` of a name in raftcron.a
                name = name.rsplit(".", 1)[0]
            if name != module:
                graph[module].setdefault(name, line)
            parts = name.split(".")
            for i in range(2, len(parts)):
                package = ".".join(parts[:i])
                if module != package and not module.startswith(package + "."):
                    graph[module].setdefault(package, line)
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(sorted(graph[nxt])))
    return None


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return "\n".join(f"  {a} imports {b} (line {graph[a][b]})"
                     for a, b in zip(cycle, cycle[1:], strict=False))


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "raftcron.node" in graph and "raftcron.api.app" in graph["raftcron.node"]
    assert "raftcron.worker.client" in graph["raftcron.worker"]


def test_the_cycle_finder_finds_a_circle_through_a_lazy_import() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 2}}) is None


def test_edges_include_type_checking_and_function_imports(tmp_path: Path) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from raftcron.node_view import NodeView\n"
        "def f():\n"
        "    from raftcron.api import cluster\n"
        "    import raftcron.auth\n"
        "    from .context import ApiContext\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(source)
    names = {n for n, _ in _imported_names("raftcron.api.mod", path, _modules())}
    assert {"raftcron.node_view", "raftcron.api.cluster", "raftcron.auth",
            "raftcron.api.context"} <= names


def test_no_import_circle_in_the_package() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle is not None:
        message = "import circle: " + " -> ".join(cycle) + "\n" + describe(cycle, graph)
        print(message)
        raise AssertionError(message)
