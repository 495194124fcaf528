"""Count the habits issue 35 asks to undo, in a checkout's `workbench/` package (default: this one):

- imports inside functions, and how many of them have no comment saying why (on the import's
  line, on the comment lines right above it, or on the `try:` line that guards it);
- modules under `server/` that import `workbench.agents` or `workbench.demo` (at any depth).

    python scripts/count_imports.py [PACKAGE_DIR]

tests/test_layout.py holds the same rules as tests; this prints the figures for a before/after.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"


def function_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, commented) for each import inside a function of `path`."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    found: list[tuple[int, bool]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        outer, in_function = parents.get(id(node)), False
        while outer is not None:
            if isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)):
                in_function = True
                break
            outer = parents.get(id(outer))
        if in_function:
            found.append((node.lineno, said_why(lines, node, parents)))
    return found


def said_why(lines: list[str], node: ast.stmt, parents: dict[int, ast.AST]) -> bool:
    """A comment on the import's lines, on the comment lines right above it (through the
    imports grouped with it), or on the line of the `try:` that guards it."""
    if any("#" in lines[n - 1] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
        return True
    above = node.lineno - 2
    while above >= 0:
        text = lines[above].strip()
        if text.startswith("#"):
            return True
        if not text.startswith(("import ", "from ")):
            break
        above -= 1
    parent = parents.get(id(node))
    return isinstance(parent, ast.Try) and "#" in lines[parent.lineno - 1]


def imported_modules(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def server_reaching_out(package: Path) -> list[str]:
    """Modules under server/ importing agents/ or demo/."""
    return sorted(
        str(path.relative_to(package.parent)) for path in sorted((package / "server").rglob("*.py"))
        if any(m == f"workbench.{p}" or m.startswith(f"workbench.{p}.")
               for m in imported_modules(path) for p in ("agents", "demo")))


def main(argv: list[str]) -> int:
    package = Path(argv[1]) if len(argv) > 1 else PACKAGE
    per_file = {path: function_imports(path) for path in sorted(package.rglob("*.py"))}
    total = sum(len(v) for v in per_file.values())
    uncommented = sum(1 for v in per_file.values() for _, why in v if not why)
    files = sum(1 for v in per_file.values() if v)
    reaching = server_reaching_out(package)
    print(f"imports inside functions: {total} in {files} files, {uncommented} with no comment saying why")
    print(f"modules under server/ importing agents/ or demo/: {len(reaching)}"
          + (f" ({', '.join(reaching)})" if reaching else ""))
    for path, found in per_file.items():
        for line, why in found:
            if not why:
                print(f"  no reason given: {path.relative_to(package.parent)}:{line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
