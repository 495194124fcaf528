"""Quality tasks shipped with the workbench, each a folder lm-eval reads (YAML, its items, its scoring).

    workbench_basics/   300 items with checkable short answers (copying, extraction, small arithmetic,
                        capitals, the larger number, the next item of a list), written for a small model
"""

from pathlib import Path

__all__ = ["TASKS_DIR"]

TASKS_DIR = Path(__file__).resolve().parent
