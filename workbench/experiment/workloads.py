"""The prompts an experiment sends: the built-in set, or the user's own JSONL file.

The built-in set (workload_builtin.jsonl, shipped with the package) was written for
the workbench: code edits, summarising a given passage, structured extraction, open
chat and copying, each prompt labelled with its category, so acceptance of
speculative decoding can be read per category (answers that repeat the prompt give a
prompt-lookup drafter something to find; open chat gives it little).

`--dataset FILE.jsonl`: one JSON object a line, `prompt` (text), and optionally
`category` (text) and `output_tokens` (a whole number). Blank lines are skipped;
every bad line is reported at once with its number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from workbench.errors import InputError

__all__ = ["BUILTIN", "Workload", "WorkloadPrompt", "builtin_workload", "load_dataset", "parse_jsonl"]

BUILTIN = "builtin"
_BUILTIN_FILE = "workload_builtin.jsonl"
_MAX_REPORTED = 10


@dataclass(frozen=True)
class WorkloadPrompt:
    prompt: str
    category: str
    output_tokens: int | None = None

    def bench_prompt(self) -> dict[str, Any]:
        """The shape BenchConfig.prompts takes."""
        return {"messages": [{"role": "user", "content": self.prompt}], "category": self.category,
                "output_tokens": self.output_tokens}


@dataclass(frozen=True)
class Workload:
    name: str  # "builtin", or the dataset file's name
    prompts: tuple[WorkloadPrompt, ...]

    @property
    def categories(self) -> list[str]:
        return sorted({p.category for p in self.prompts})

    def bench_prompts(self) -> list[dict[str, Any]]:
        return [p.bench_prompt() for p in self.prompts]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "prompts": [{"prompt": p.prompt, "category": p.category,
                                                 "output_tokens": p.output_tokens} for p in self.prompts]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        return cls(str(data["name"]), tuple(WorkloadPrompt(str(p["prompt"]), str(p["category"]),
                                                           p.get("output_tokens")) for p in data["prompts"]))


def _one(line: str) -> WorkloadPrompt | str:
    """A prompt, or what is wrong with the line."""
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg})"
    if not isinstance(item, dict):
        return "not a JSON object"
    prompt = item.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return 'no "prompt" text'
    category = item.get("category", "uncategorised")
    if not isinstance(category, str) or not category.strip():
        return '"category" must be text'
    tokens = item.get("output_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        return f'"output_tokens" must be a whole number of at least 1, not {tokens!r}'
    return WorkloadPrompt(prompt, category.strip(), tokens)


def parse_jsonl(text: str, name: str) -> Workload:
    prompts: list[WorkloadPrompt] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        got = _one(line)
        if isinstance(got, str):
            problems.append(f"line {number}: {got}")
        else:
            prompts.append(got)
    if problems:
        more = f" (and {len(problems) - _MAX_REPORTED} more)" if len(problems) > _MAX_REPORTED else ""
        raise InputError(f"{name} has bad lines: " + "; ".join(problems[:_MAX_REPORTED]) + more + ".",
                         hint='Each line is one JSON object: {"prompt": "...", "category": "...", "output_tokens": 128} '
                         "(category and output_tokens optional).")
    if not prompts:
        raise InputError(f"{name} holds no prompts.", hint='Write one JSON object a line, e.g. {"prompt": "Hello"}.')
    return Workload(name, tuple(prompts))


def builtin_workload() -> Workload:
    text = resources.files("workbench.experiment").joinpath(_BUILTIN_FILE).read_text(encoding="utf-8")
    return parse_jsonl(text, BUILTIN)


def load_dataset(path: Path | str) -> Workload:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Cannot read the dataset {file}: {exc}",
                         hint="Give a UTF-8 JSONL file with one prompt a line.", settings=("dataset",)) from exc
    return parse_jsonl(text, file.name)
