"""The import rules of the house (ARCHITECTURE §2), checked on the source: every module under src/relaykit parsed
with ``ast``, nothing imported.

* Core (``relaykit._*.py``, ``relaykit.types``, ``relaykit.errors``) imports nothing of relaykit outside the core.
* backends, server, push and assembly import no binding (``http``, ``grpc``), no client and no edge (``cli``,
  ``testing``).
* The bindings and the client don't import each other: an ``http`` module imports nothing of ``grpc`` or ``client``,
  and so on. What two of them share lives in a layer below both.
* No import cycle between modules (imports under ``if TYPE_CHECKING:`` excepted: they never run).

Every import counts, a lazy one inside a function too: an import postponed to run time is still a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "relaykit"

BINDINGS_AND_CLIENT = ("http", "grpc", "client")
ABOVE_THE_SERVER = (*BINDINGS_AND_CLIENT, "cli", "testing")
BELOW_THE_BINDINGS = ("backends", "server", "auth", "push", "assembly")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {
    _module_name(path): path
    for path in sorted(ROOT.rglob("*.py"))
    if "_grpc_gen" not in path.parts  # protoc output: imports only protobuf
}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node``, skipping the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _walk(other)
            continue
        yield child
        yield from _walk(child)


def _resolve(module: str, base: str | None, level: int) -> str:
    if not level:
        return base or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{base}" if base else package


def imports(module: str, *, runtime_only: bool = False) -> set[str]:
    """The relaykit modules ``module`` imports (``from pkg import sub`` counts as importing ``pkg.sub``)."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    found: set[str] = set()
    for node in _walk(tree) if runtime_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node.module, node.level)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    return {name for name in found if name == "relaykit" or name.startswith("relaykit.")}


def layer(module: str) -> str:
    """``core`` for relaykit._x, relaykit.types and relaykit.errors; the package name (``http`` …) otherwise."""
    parts = module.split(".")
    if len(parts) == 1:
        return "facade"  # relaykit/__init__.py: the quick names from every layer
    if parts[1] == "__main__":
        return "cli"  # ``python -m relaykit``: the command line, an edge
    if parts[1].startswith("_") or (len(parts) == 2 and parts[1] in ("types", "errors")):
        return "core"  # relaykit._v03 (the 0.3 codec) is a core package: it translates core models only
    return parts[1]


def _violations(allowed: object) -> list[str]:
    assert callable(allowed)
    return [
        f"{module} imports {target}"
        for module in MODULES
        for target in sorted(imports(module))
        if target in MODULES and not allowed(layer(module), layer(target))
    ]


def test_the_module_list_is_the_tree() -> None:
    assert {"relaykit.http._app", "relaykit.grpc._server", "relaykit.client._grpc", "relaykit._errors"} <= set(MODULES)
    assert layer("relaykit._methods") == "core"
    assert layer("relaykit.http._app") == "http"
    # The walker sees lazy imports and resolves relative and package-style ones.
    assert "relaykit.backends.redis" in imports("relaykit.assembly._assemble")
    assert "relaykit._types" in imports("relaykit._proto")


def test_core_imports_only_core() -> None:
    assert _violations(lambda src, dst: src != "core" or dst == "core") == []


@pytest.mark.parametrize("package", BELOW_THE_BINDINGS)
def test_layers_below_the_bindings_import_no_binding_client_or_edge(package: str) -> None:
    assert _violations(lambda src, dst: src != package or dst not in ABOVE_THE_SERVER) == []


@pytest.mark.parametrize("package", BINDINGS_AND_CLIENT)
def test_bindings_and_client_do_not_import_each_other(package: str) -> None:
    others = {p for p in BINDINGS_AND_CLIENT if p != package}
    assert _violations(lambda src, dst: src != package or dst not in others) == []


def test_no_import_cycles() -> None:
    graph = {module: sorted(imports(module, runtime_only=True) & MODULES.keys() - {module}) for module in MODULES}
    # The package itself (relaykit/__init__.py) re-exports from every layer; Python runs it before any submodule, so
    # an edge back to it is no cycle of ours.
    graph["relaykit"] = []
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in graph[module]:
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module)
    assert cycles == []
