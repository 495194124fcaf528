"""The planner held against a vLLM start-up log: two figures, each with its % difference.

1. KV tokens from vLLM's own memory: given the "Available KV cache memory" vLLM logged,
   the planner's page, block, group and padding arithmetic must give vLLM's
   "GPU KV cache size" (exact arithmetic; the logged GiB has two decimals, so the
   tokens can differ by that rounding: `rounding_pct`).
2. The planner's own estimate of that memory (GPU total x utilization, less weights,
   activation peak, non-torch memory and CUDA graphs), beside vLLM's figure and, where
   the log has vLLM's breakdown, part by part; and the KV tokens that estimate gives.

`planner_vs_log` builds the plan from a model folder's config.json and the serve flags
(by default the flags the log's "non-default args" line names), for the release the
log names; `compare_with_log` takes a MemoryPlan made otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import PlannerError
from workbench.planner.config import read_model_config
from workbench.planner.memory import capacity
from workbench.planner.planning import MemoryPlan, plan_command_memory, plan_memory
from workbench.planner.settings import GIB
from workbench.planner.startup_log import (
    StartupCapacity, StartupMemory, flags_from_log, startup_capacity, startup_memory,
)
from workbench.recipes import Catalog, LaunchPlan, load_catalog

__all__ = ["Figure", "LogComparison", "compare_with_log", "planner_vs_log"]

_HALF_STEP_GIB = 0.005  # vLLM logs GiB with two decimals


def _pct(planner: float, vllm: float) -> float | None:
    return None if not vllm else 100.0 * (planner - vllm) / vllm


@dataclass(frozen=True)
class Figure:
    """One number, the planner's and vLLM's."""

    name: str
    planner: float
    vllm: float
    unit: str  # "tokens", "GiB", "%"

    @property
    def diff_pct(self) -> float | None:
        return _pct(self.planner, self.vllm)

    def line(self) -> str:
        fmt = "{:,.0f}" if self.unit in ("tokens", "graphs") else "{:.2f}"
        pct = self.diff_pct
        return (f"{self.name}: planner {fmt.format(self.planner)} {self.unit}, vLLM {fmt.format(self.vllm)} "
                f"{self.unit}" + ("" if pct is None else f" ({pct:+.2f} %)"))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "planner": self.planner, "vllm": self.vllm, "unit": self.unit,
                "diff_pct": self.diff_pct}


@dataclass
class LogComparison:
    """The planner against one start-up log."""

    memory: MemoryPlan  # the planner's plan (its own memory estimate)
    logged: StartupCapacity
    logged_memory: StartupMemory
    tokens_from_vllm_memory: Figure | None  # figure 1
    available_memory: Figure | None  # figure 2: the planner's estimate against vLLM's
    tokens_from_estimate: Figure  # figure 2, in tokens
    parts: list[Figure] = field(default_factory=list)  # figure 2, part by part, where vLLM logs them
    layout: list[Figure] = field(default_factory=list)  # hybrid block size and Mamba padding
    rounding_pct: float | None = None  # how far figure 1 can move with vLLM's GiB rounding

    @property
    def tokens_pct(self) -> float | None:
        """Figure 1's % difference (None when the log names no available memory)."""
        return self.tokens_from_vllm_memory.diff_pct if self.tokens_from_vllm_memory else None

    @property
    def estimate_pct(self) -> float | None:
        """Figure 2's % difference in available memory."""
        return self.available_memory.diff_pct if self.available_memory else None

    def lines(self) -> list[str]:
        s = self.memory.settings
        out = [f"{self.memory.model_id} on {self.memory.hardware}, vLLM {s.vllm_version} "
               f"({self.logged.max_model_len:,} tokens per request)",
               f"vLLM logged: {self.logged.message}"]
        if self.tokens_from_vllm_memory:
            out.append("1. " + self.tokens_from_vllm_memory.line()
                       + f" [from vLLM's {self.logged_memory.available_kv_gib} GiB; its rounding moves this by "
                         f"up to {self.rounding_pct or 0:.3f} %]")
        out += [f"   {f.line()}" for f in self.layout]
        if self.available_memory:
            out.append("2. " + self.available_memory.line())
        out.append("   " + self.tokens_from_estimate.line())
        out += [f"   {f.line()}" for f in self.parts]
        return out

    def describe(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        def fig(f: Figure | None) -> dict[str, Any] | None:
            return f.to_dict() if f else None

        return {
            "model_id": self.memory.model_id,
            "hardware": self.memory.hardware,
            "vllm_version": self.memory.settings.vllm_version,
            "logged": self.logged.to_dict(),
            "logged_memory": self.logged_memory.to_dict(),
            "tokens_from_vllm_memory": fig(self.tokens_from_vllm_memory),
            "rounding_pct": self.rounding_pct,
            "available_memory": fig(self.available_memory),
            "tokens_from_estimate": fig(self.tokens_from_estimate),
            "parts": [f.to_dict() for f in self.parts],
            "layout": [f.to_dict() for f in self.layout],
            "plan": self.memory.to_dict(),
        }


def _layout_figures(memory: MemoryPlan, logged: StartupMemory) -> list[Figure]:
    lay = memory.layout
    out = []
    if logged.block_size is not None:
        out.append(Figure("attention block size", lay.block_size, logged.block_size, "tokens"))
    if logged.mamba_padding_pct is not None:
        out.append(Figure("Mamba page padding", round(lay.mamba_padding_pct, 2), logged.mamba_padding_pct, "%"))
    return out


def _parts(memory: MemoryPlan, logged: StartupMemory) -> list[Figure]:
    b = memory.budget
    pairs: list[tuple[str, int | None, float | None]] = [
        ("GPU total", b.total_bytes, logged.total_gib),
        ("requested", b.requested_bytes, logged.requested_gib),
        ("weights", b.weight_bytes, logged.weights_gib),
        ("activation peak", b.activation_bytes, logged.activation_gib),
        ("non-torch", b.non_torch_bytes, logged.non_torch_gib),
        ("CUDA graphs (held back)", b.cuda_graph_bytes,
         logged.cuda_graph_estimate_gib if logged.cuda_graph_estimate_gib is not None
         else (0.0 if logged.total_gib is not None and memory.settings.enforce_eager else None)),
    ]
    out = [Figure(name, planner / GIB, vllm, "GiB") for name, planner, vllm in pairs
           if planner is not None and vllm is not None]
    if logged.cuda_graphs:
        out.append(Figure("CUDA graphs captured", b.cuda_graphs, sum(logged.cuda_graphs.values()), "graphs"))
    return out


def compare_with_log(memory: MemoryPlan, log_text: str) -> LogComparison:
    """`memory` against what the log says. Raises PlannerError when the log has no
    KV-capacity line yet, or when the plan's context is not the server's."""
    logged = startup_capacity(log_text)
    if logged is None:
        raise PlannerError("The log has no 'KV cache size' line: vLLM has not sized its cache (yet).",
                           hint="Compare once the server has started (the line comes before 'ready').")
    logged_memory = startup_memory(log_text)
    s = memory.settings
    if logged.max_model_len != s.max_model_len:
        raise PlannerError(f"The plan is for {s.max_model_len:,} tokens per request, the server for "
                           f"{logged.max_model_len:,}.", hint="Plan the command the server runs (its --max-model-len).")
    lay = memory.layout
    tokens_1 = rounding = None
    if logged_memory.available_kv_gib is not None:
        available = round(logged_memory.available_kv_gib * GIB)
        cap = capacity(lay, available, s.max_model_len, s.num_gpu_blocks_override)
        tokens_1 = Figure("KV cache tokens from vLLM's available memory", cap.kv_cache_tokens,
                          logged.kv_cache_tokens, "tokens")
        rounding = 100.0 * _HALF_STEP_GIB / logged_memory.available_kv_gib
    available_2 = None
    if logged_memory.available_kv_gib is not None:
        available_2 = Figure("available KV cache memory (planner's estimate)", memory.budget.available_bytes / GIB,
                             logged_memory.available_kv_gib, "GiB")
    tokens_2 = Figure("KV cache tokens from the planner's estimate", memory.kv_cache_tokens, logged.kv_cache_tokens,
                      "tokens")
    return LogComparison(memory, logged, logged_memory, tokens_1, available_2, tokens_2,
                         _parts(memory, logged_memory), _layout_figures(memory, logged_memory), rounding)


def planner_vs_log(log_text: str, *, model_dir: str | Path | None = None, argv: Sequence[str] | None = None,
                   env: Mapping[str, str] | None = None, hardware: str | None = None,
                   memory_gib: float | None = None,
                   plan: LaunchPlan | None = None, catalog: Catalog | None = None,
                   vllm_version: str | None = None) -> LogComparison:
    """The planner against a `vllm serve` start-up log.

    Either `plan` (a rendered LaunchPlan: its argv, env, hardware and config.json, or
    `model_dir`'s config.json when given), or `model_dir` (a folder with config.json, or
    the file) with `argv` (the serve flags; None: those of the log's "non-default args"
    line), `env` and `hardware` (a catalog hardware id such as "h100": its defaults, and
    its measured CUDA-visible total as the GPU's memory unless `memory_gib` is given).
    The vLLM release is the log's unless `vllm_version` is given."""
    catalog = catalog or load_catalog()
    version = vllm_version or startup_memory(log_text).vllm_version
    if plan is not None:
        memory = plan_memory(plan, catalog, config_path=model_dir, memory_gib=memory_gib, vllm_version=version)
        return compare_with_log(memory, log_text)
    if model_dir is None:
        raise PlannerError("planner_vs_log needs the model: a LaunchPlan or the model's folder (its config.json).",
                           settings=("config",))
    if hardware is None or hardware not in catalog.hardware:
        raise PlannerError(f"planner_vs_log needs the hardware the server ran on (got {hardware!r}).",
                           hint=f"One of: {', '.join(sorted(catalog.hardware))}.", settings=("hardware",))
    args = startup_memory(log_text).args
    names = args.get("served_model_name") or [args.get("model") or Path(model_dir).name]
    model_id = str(names[0] if isinstance(names, list) else names)
    config = read_model_config(model_id, config_path=model_dir)
    flags = list(argv) if argv is not None else flags_from_log(log_text)
    memory = plan_command_memory(model_id, flags, dict(env or {}), config, catalog.hardware[hardware],
                                 memory_gib=memory_gib, vllm_version=version)
    return compare_with_log(memory, log_text)
