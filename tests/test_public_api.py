"""The notebook user's API: `from workbench import ...` gives exactly the documented names,
each the object its module defines, and importing workbench stays cheap."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import workbench

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def test_every_exported_name_resolves_to_its_module_object():
    for name in workbench.__all__:
        value = getattr(workbench, name)
        if name == "__version__":
            continue
        defining = importlib.import_module(workbench._EXPORTS[name])
        assert value is getattr(defining, name), name


def test_the_notebooks_import_only_from_the_public_api():
    used: set[str] = set()
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench"):
                    assert node.module == "workbench", f"{path.name} imports from {node.module}"
                    used |= {alias.name for alias in node.names}
    assert used and used <= set(workbench.__all__), used - set(workbench.__all__)


def test_unknown_names_fail_like_a_module_attribute():
    try:
        workbench.no_such_thing  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_importing_workbench_and_the_cli_loads_no_ui_library():
    code = ("import sys, workbench, workbench.cli; "
            "print(sorted(m for m in ('gradio', 'ipywidgets', 'pandas', 'torch', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_error_class_is_exported():
    """A notebook catches exactly what it means (`except workbench.LaunchError`): the whole tree is public."""
    import workbench.errors as errors

    tree = {name for name in errors.__all__ if isinstance(getattr(errors, name), type)
            and issubclass(getattr(errors, name), errors.WorkbenchError)}
    assert tree and tree <= set(workbench.__all__), tree - set(workbench.__all__)
    assert all(getattr(workbench, name) is getattr(errors, name) for name in tree)
