"""The package's shape, checked: modules stay small, and no import cycle between modules
(counting the imports inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, known: set[str]) -> set[str]:
    """Modules of the package that `path` imports: at the top, and inside functions too
    (an import deferred into a function still makes a cycle, only a later one), and
    under `if TYPE_CHECKING:` (a circle of types is a circle of concepts). The package's
    own `__init__` is left out: it names its exports for type checkers, lazily."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    if path == PACKAGE / "__init__.py":
        skipped = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
                   for n in ast.walk(node)}
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from the package the file is in
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        for target in targets:
            if target in known:
                found.add(target)
    return found


def test_nothing_imports_back_up_the_house():
    """No module imports the top package `workbench` itself (its __init__ is the notebook
    user's door, not a place the library reaches back to); `workbench._version` holds the version."""
    modules = _modules()
    up = {name for name, path in modules.items() if name != "workbench" and "workbench" in _imports(path, set(modules))}
    offenders = set()
    for name in up:
        tree = ast.parse(modules[name].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "workbench" and not node.level:
                # `from workbench import server` names a subpackage: that is fine; a name defined in
                # workbench/__init__.py (like __version__) is reaching back up.
                if any(f"workbench.{alias.name}" not in modules for alias in node.names):
                    offenders.add(name)
    assert not offenders, sorted(offenders)


def test_no_module_is_over_600_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_import_cycle_between_modules():
    modules = _modules()
    graph = {name: _imports(path, set(modules)) - {name} for name, path in modules.items()}
    # A package imports its submodules to re-export them; that edge is not a cycle.
    for name in graph:
        graph[name] = {t for t in graph[name] if not (t.startswith(name + ".") and modules[name].name == "__init__.py")}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(target):] + [target]))
            if target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def _counter():
    """scripts/count_imports.py: the rules below, and the figures it prints for a before/after."""
    import importlib.util  # the script is not a package: loaded from its path

    spec = importlib.util.spec_from_file_location("count_imports", PACKAGE.parent / "scripts" / "count_imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_import_inside_a_function_says_why():
    """Imports go at the top of a module; one deferred into a function (heavy, optional, or
    breaking a cycle) carries a comment saying so where it is."""
    counter = _counter()
    silent = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
              for line, why in counter.function_imports(path) if not why]
    assert not silent, silent


def test_the_counter_sees_a_silent_import_and_a_said_one(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    import json\n\n\ndef g():\n    import csv  # optional here\n\n\n"
                      "def h():\n    # heavy: only when asked\n    import math\n    import cmath\n")
    assert _counter().function_imports(source) == [(2, False), (6, True), (11, True), (12, True)]


def test_server_imports_neither_agents_nor_demo():
    """The supervisor serves what a plan names; the agents' checks and the demo's builders sit above it."""
    assert _counter().server_reaching_out(PACKAGE) == []
