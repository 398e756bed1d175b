"""The layers' import rules (DESIGN.md section 2), read from the code's own imports with ``ast``.

Every ``import`` counts wherever it stands (module level, inside a function, under ``TYPE_CHECKING``):
a deferred import that closes a circle is still a circle a reader has to follow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "service"

#: Third-party packages of HTTP and SQL.
HTTP = ("fastapi", "starlette", "uvicorn")
SQL = ("sqlalchemy", "psycopg", "alembic", "sqlite3")
#: The application layer (use cases): between service.api and service.store.
APPLICATION = "service.usecases"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def imported_names(name: str) -> set[str]:
    """Every module name ``name``'s code imports (absolute; relative imports resolved), and for
    ``from a import b`` also ``a.b`` (b may be a module)."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    return {
        name: {other for other in imported_names(name) if other in MODULES and other != name}
        for name in MODULES
    }


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _layer(prefix: str) -> list[str]:
    return [name for name in MODULES if name == prefix or name.startswith(prefix + ".")]


def _imports_of(name: str, roots: tuple[str, ...]) -> list[str]:
    return sorted(
        imported
        for imported in imported_names(name)
        if any(imported == root or imported.startswith(root + ".") for root in roots)
    )


def test_the_graph_is_read_from_the_code() -> None:
    # The check is only as good as the graph: a module known to import others must show them.
    assert "service.domain.mfu" in GRAPH["service.api.routers.mfu"]
    assert "service.store.uow" in GRAPH["service.api.deps"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_the_service() -> None:
    assert _cycles(GRAPH) == []


@pytest.mark.parametrize("name", _layer("service.domain"))
def test_the_domain_imports_neither_http_nor_sql_nor_other_layers(name: str) -> None:
    assert _imports_of(name, (*HTTP, *SQL, "pydantic", "service.api", "service.store", APPLICATION)) == []


@pytest.mark.parametrize("name", _layer(APPLICATION))
def test_the_application_layer_imports_neither_http_nor_sql_nor_the_api(name: str) -> None:
    assert _imports_of(name, (*HTTP, *SQL, "service.api")) == []


def test_there_is_an_application_layer() -> None:
    assert _layer(APPLICATION), f"{APPLICATION} holds the use cases"


@pytest.mark.parametrize("name", _layer("service.store"))
def test_the_store_imports_no_http_and_no_upper_layer(name: str) -> None:
    assert _imports_of(name, (*HTTP, "service.api", APPLICATION)) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_routers_are_leaves(name: str) -> None:
    # Only the routers package (which lists them) and the app factory (which mounts that list) may
    # name a router; a router never imports another.
    routers = [
        imported
        for imported in GRAPH[name]
        if imported.startswith("service.api.routers.") and imported != name
    ]
    if name == "service.api.routers":
        return
    assert routers == []


#: Issue 15: a file a newcomer must read whole to change one thing stays below this many lines.
MAX_LINES_PER_FILE = 600


def test_no_file_in_the_service_exceeds_the_size_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in MODULES.values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES_PER_FILE
    }
    assert too_long == {}, f"split these by concept (over {MAX_LINES_PER_FILE} lines): {too_long}"
