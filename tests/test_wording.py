"""Control flow never depends on the wording of a message: why work stopped, how a request or a
launch failed, what a check found are types (StopReason, RequestFailure, ReadyOutcome, ...),
decided where they happen; messages are for people. Rewording one must not change what the
workbench does, so the library, the CLI and the views never test a message's text.

The scan (AST) flags `.startswith`/`.endswith` on a message, `"..." in message`, and a regex
searched in one, where a message is a name or attribute such as `message`, `partial`, `error`,
`reason`, `hint`, `summary`, `note`, `detail`, or `str(exc)`. Reading another program's output
(vLLM's log, nvidia-smi's CSV, an SSE stream) is parsing, not this, and is not flagged; the few
places that must read a foreign server's words to decide are listed below with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"

MESSAGE_NAMES = {"message", "msg", "partial", "error", "err", "reason", "stopped", "hint", "summary", "note",
                 "detail", "why", "note_text", "notes", "failed"}
EXCEPTION_NAMES = {"exc", "e", "err", "error", "exception"}
WRAPPERS = {"lower", "upper", "strip", "lstrip", "rstrip", "casefold"}
REGEX_CALLS = {"search", "match", "fullmatch", "findall"}

# (file, function): a foreign server's words are the only sign of what happened; read once, there,
# into a typed outcome.
ALLOWED = {
    # vLLM answers a tool_choice "auto" request without a tool-call parser with a 400 whose only mark
    # is its text; verify turns it into the check's "not_applicable" outcome.
    ("agents/verify.py", "_tool_call"),
}


def _unwrap(node: ast.expr) -> tuple[ast.expr, bool]:
    """`x.lower()`, `str(x)`, `x or ""` -> x, and whether `str()` was one of them."""
    as_text = False
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRAPPERS:
            node = node.func.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
            node, as_text = node.args[0], True
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            node = node.values[0]
        else:
            return node, as_text


def _is_message(node: ast.expr) -> bool:
    inner, as_text = _unwrap(node)
    name = inner.attr if isinstance(inner, ast.Attribute) else inner.id if isinstance(inner, ast.Name) else None
    return name is not None and (name in MESSAGE_NAMES or (as_text and name in EXCEPTION_NAMES))


def _checks(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, enclosing function, source) of every test of a message's text."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        hit = False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith") and _is_message(node.func.value):
                hit = True
            if node.func.attr in REGEX_CALLS and len(node.args) >= 2 and _is_message(node.args[1]):
                hit = True
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            left = node.left
            if isinstance(left, ast.Constant) and isinstance(left.value, str) \
                    and any(_is_message(c) for c in node.comparators):
                hit = True
        if hit:
            found.append((getattr(node, "lineno", 0), function, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return found


def test_no_control_flow_on_the_wording_of_a_message() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for line, function, source in _checks(ast.parse(path.read_text())):
            if (relative, function) not in ALLOWED:
                offenders.append(f"workbench/{relative}:{line} in {function}: {source}")
    assert not offenders, "tests of a message's text (use a type):\n" + "\n".join(offenders)


def test_the_scan_finds_what_it_is_for() -> None:
    """The checks the workbench once made, each found (so an empty result above means something)."""
    samples = [
        'return 130 if partial.startswith("interrupted") else 1',
        'if "ended early" in exc.message: pass',
        'if level.partial.startswith(("interrupted", "stopped")): pass',
        'if record.error is not None and record.error.startswith(CONNECT_FAILED): pass',
        'x = "not supported" in str(exc).lower()',
        'if re.search("timed out", exc.message): pass',
    ]
    for sample in samples:
        assert _checks(ast.parse(sample)), sample
    for fine in ['if line.startswith("data:"): pass', 'if flag.startswith("--"): pass',
                 'if reason is StopReason.USER: pass', 'ok = "--api-key" in argv']:
        assert not _checks(ast.parse(fine)), fine
