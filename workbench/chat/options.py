"""Sampling and turn settings of a chat session, and the per-request hook."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from workbench.errors import InputError

__all__ = ["BudgetMode", "ChatOptions", "RequestHook", "RequestInfo", "deep_merge"]

BudgetMode = Literal["server", "client"]


@dataclass
class ChatOptions:
    """Sampling and turn settings; defaults are the Nemotron model card's."""

    model: str | None = None  # None: the server's first model from /v1/models
    temperature: float = 1.0
    top_p: float = 0.95
    max_tokens: int | None = 4096
    reasoning: bool = True  # chat_template_kwargs.enable_thinking
    reasoning_budget: int | None = None  # tokens of reasoning; None: unlimited
    # "server": vLLM's `thinking_token_budget` (needs --reasoning-parser on the server).
    # "client": the model card's fallback: stop at the budget, close with </think>, continue.
    reasoning_budget_mode: BudgetMode = "server"
    system_prompt: str | None = None
    use_tools: bool = True  # offer the session's tools (when it has any)
    max_tool_steps: int = 5  # rounds of tool calls per turn
    include_usage: bool = True  # stream_options.include_usage
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request

    def __post_init__(self) -> None:
        problems = []
        if not 0 <= self.temperature <= 2:
            problems.append(f"temperature {self.temperature} must be between 0 and 2")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p {self.top_p} must be in (0, 1]")
        if self.max_tokens is not None and self.max_tokens < 1:
            problems.append(f"max_tokens {self.max_tokens} must be at least 1")
        if self.reasoning_budget is not None and self.reasoning_budget < 1:
            problems.append(f"reasoning_budget {self.reasoning_budget} must be at least 1")
        if self.reasoning_budget_mode not in ("server", "client"):
            problems.append(f"reasoning_budget_mode {self.reasoning_budget_mode!r} must be "
                            "'server' or 'client'")
        if self.max_tool_steps < 0:
            problems.append(f"max_tool_steps {self.max_tool_steps} must be 0 or more")
        if problems:
            raise InputError("Invalid chat options: " + "; ".join(problems) + ".",
                                 hint="Change the values named above.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatOptions:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class RequestInfo:
    """Passed to a session's `request_hook` before each request of a turn."""

    turn: int  # 0 for the session's first turn
    step: int  # 0, then one more after each round of tool calls
    kind: Literal["chat", "continuation"]  # continuation: the client-side budget's second request
    messages: list[dict[str, Any]]


RequestHook = Callable[[RequestInfo], Mapping[str, Any] | None]


def deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged

