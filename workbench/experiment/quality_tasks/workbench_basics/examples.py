"""The example turn of a workbench_basics item: the item's own answered example, never another item.

lm-eval draws few-shot examples from a split; this sampler returns the item being asked, and
the YAML's fewshot_config renders it with the example's fields (example_question,
example_answer), so every question comes after one answered question of its own kind.
"""

from __future__ import annotations

from typing import Any

from lm_eval.api.samplers import ContextSampler

__all__ = ["OwnExample"]


class OwnExample(ContextSampler):  # type: ignore[misc]  # lm-eval is untyped
    def sample(self, n: int, eval_doc: dict[str, Any] | None = None, df: Any = None,
               **kwargs: Any) -> list[dict[str, Any]]:
        if eval_doc is None:
            raise ValueError("workbench_basics shows each item's own example: its fewshot split must be its test split")
        return [eval_doc] * n
