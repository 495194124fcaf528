"""The core packages type-check under mypy --strict; the views (ui, notebook, cli) with every
function body checked and None strictly (the files and options are in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_core_packages_pass_mypy_strict() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 0 and not errors, "\n".join(errors[:40]) or done.stdout + done.stderr
