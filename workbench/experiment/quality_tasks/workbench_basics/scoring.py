"""How the workbench_basics task is read and scored (lm-eval names these by `!function` in its YAML).

Each item is one question with a short answer, shown after one answered example of the
same kind (an earlier chat turn: see examples.py). An answer counts when its first
non-empty line, stripped of a leading "Answer:", of surrounding quotes, backticks and
asterisks and of a final full stop, is the expected answer: letter for letter where the
item's `match` is "exact" (the capitals items: case is the format asked for), ignoring case
elsewhere. "The answer is 12" does not count for "12": answering with the value only is part
of every item's instruction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["ITEMS_FILE", "answer_matches", "load_items", "normalise", "process_results", "read_items"]

ITEMS_FILE = Path(__file__).resolve().parent / "workbench_basics.jsonl"
_WRAPPERS = "\"'`*"
_LABEL = "answer:"


def normalise(text: str) -> str:
    """The first non-empty line, unwrapped, with single spaces."""
    line = next((ln for ln in text.strip().splitlines() if ln.strip()), "").strip()
    if line[:len(_LABEL)].casefold() == _LABEL:
        line = line[len(_LABEL):]
    line = line.strip().strip(_WRAPPERS).strip()
    if line.endswith("."):
        line = line[:-1].rstrip()
    return " ".join(line.strip(_WRAPPERS).split())


def answer_matches(response: str, answer: str, match: str) -> bool:
    got, want = normalise(response), " ".join(answer.split())
    return got == want if match == "exact" else got.casefold() == want.casefold()


def read_items() -> list[dict[str, Any]]:
    return [json.loads(line) for line in ITEMS_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_items(**_: Any) -> Any:
    """The items as a datasets.DatasetDict with one split, "test" (lm-eval's custom_dataset hook)."""
    import datasets  # lm-eval's own dependency: only where lm-eval runs

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(read_items())})


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, int]:
    return {"acc": int(answer_matches(results[0] if results else "", doc["answer"], doc["match"]))}
