"""The modules of ``relaykit.backends`` import one another without a cycle (read from the source with ``ast``).

Every import counts, including those under ``TYPE_CHECKING`` and inside functions: a circle among them is still one
a reader has to untangle, and it fails at import time as soon as one of its imports moves to the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import relaykit.backends

PACKAGE = "relaykit.backends"
ROOT = Path(relaykit.backends.__file__).parent


def modules(root: Path) -> dict[str, Path]:
    """Every module under ``root`` by dotted name (a package by its own name, not ``….__init__``)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([PACKAGE, *parts])] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in its source."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                # ``from package import module`` imports that module; ``from module import name`` the module.
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    return {target for target in targets if target in known and target != name}


def graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or ``None``."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if target in path:
                return [*path[path.index(target) :], target]
            if target not in done:
                cycle = visit(target)
                if cycle is not None:
                    return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(edges):
        if start not in done:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def test_the_backends_modules_import_one_another_without_a_cycle() -> None:
    cycle = find_cycle(graph(ROOT))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_walk_sees_top_level_type_checking_and_lazy_imports() -> None:
    edges = graph(ROOT)
    assert "relaykit.backends.postgres._db" in edges["relaykit.backends.postgres._outbox"]
    # Under TYPE_CHECKING:
    assert "relaykit.backends.postgres._tasks" in edges["relaykit.backends.postgres._outbox"]
    # Inside a function (the package's lazy __getattr__):
    assert "relaykit.backends.postgres" in edges["relaykit.backends"]


def test_a_cycle_is_found() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
