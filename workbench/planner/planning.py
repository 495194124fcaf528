"""`plan_memory(plan)`: a rendered LaunchPlan -> how many sequences fit at what context.

The one place that does I/O for the planner (reading config.json, see
planner/config.py); everything after it is arithmetic on what was read
(`plan_memory_from_config`), so it can be checked against vLLM's own numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import PlannerError
from workbench.paths import built_models_dir
from workbench.planner.architecture import Architecture, architecture_from_config
from workbench.planner.budget import KVBudget, kv_budget
from workbench.planner.config import ModelConfigFile, read_model_config
from workbench.planner.gpu_overhead import CUDA_CONTEXT_BYTES, GPU_MEMORY, MEASURED_ON
from workbench.planner.memory import CacheLayout, Capacity, cache_layout, capacity
from workbench.planner.recommend import ContextRow, Recommendation, context_table, recommend
from workbench.planner.settings import GIB, ServingSettings, resolve_settings
from workbench.planner.weights import WeightEstimate, weight_bytes
from workbench.recipes import Catalog, HardwareProfile, LaunchPlan, load_catalog
from workbench.recipes.argv import flag_values
from workbench.recipes.known_issues import KnownIssue, matching_known_issues

__all__ = ["MemoryPlan", "plan_command_memory", "plan_memory", "plan_memory_from_config"]

SPARK_MEMORY = (" On DGX Spark, vLLM was reported to see 121.69 GiB in total and 101.3-102.2 GiB free at boot "
                "(https://github.com/MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks/issues/47).")


@dataclass
class MemoryPlan:
    """The planner's answer for one plan on one machine."""

    model_id: str
    hardware: str
    config_source: str
    architecture: Architecture
    settings: ServingSettings
    weights: WeightEstimate | None
    budget: KVBudget
    layout: CacheLayout
    capacity: Capacity
    table: list[ContextRow]
    recommendation: Recommendation
    known_issues: list[KnownIssue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def kv_cache_tokens(self) -> int:
        return self.capacity.kv_cache_tokens

    @property
    def max_concurrency(self) -> float:
        return self.capacity.max_concurrency

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "hardware": self.hardware,
            "config_source": self.config_source,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_model_len": self.settings.max_model_len,
            "num_blocks": self.capacity.num_blocks,
            "architecture": self.architecture.describe(),
            "settings": self.settings.to_dict(),
            "weights": None if self.weights is None else {"bytes": self.weights.bytes, "exact": self.weights.exact,
                                                          "how": self.weights.how},
            "budget": self.budget.to_dict(),
            "layout": self.layout.to_dict(),
            "capacity": self.capacity.to_dict(),
            "table": [r.to_dict() for r in self.table],
            "recommendation": self.recommendation.to_dict(),
            "known_issues": [k.to_dict() for k in self.known_issues],
            "notes": list(self.notes),
        }

    def startup_line(self) -> str:
        """The line vLLM should log at start-up, in its own format."""
        device = "CPU" if self.settings.platform == "cpu" else "GPU"
        return (f"{device} KV cache size: {self.kv_cache_tokens:,} tokens, Maximum concurrency for "
                f"{self.settings.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x")

    def summary_lines(self) -> list[str]:
        """The few lines both UIs show next to the command."""
        s, lay, b = self.settings, self.layout, self.budget
        lines = [f"vLLM should log: {self.startup_line()}",
                 f"KV cache: {lay.kv_bytes_per_token:,} B per token ({lay.attention_layers} attention layers, "
                 f"{s.kv_cache_dtype})"]
        if lay.mamba_layers:
            lines.append(f"Mamba state: {lay.mamba_layers * lay.mamba_state_bytes / 2**20:.1f} MiB per sequence "
                         f"({lay.mamba_layers} layers, SSM {s.ssm_state_dtype}); attention block {lay.block_size:,} "
                         f"tokens, {lay.attention_groups}+{lay.mamba_groups} groups, {lay.mamba_mode} mode")
        if self.weights:
            lines.append(f"Weights: {self.weights.bytes / GIB:.2f} GiB ({self.weights.how})")
        lines.append(f"KV cache memory: {b.available_bytes / GIB:.2f} GiB ({b.how})")
        rec = self.recommendation
        lines.append(f"Recommended: --max-model-len {rec.max_model_len} --max-num-seqs {rec.max_num_seqs}")
        return lines + rec.lines + self.notes

    def describe(self) -> str:
        """The plan as text, for a terminal or a notebook."""
        s, lay, b = self.settings, self.layout, self.budget

        def gib(n: int) -> str:
            return f"{n / GIB:.2f} GiB"

        out = [f"{self.model_id} on {self.hardware}  (config.json from {self.config_source})",
               f"model: {self.architecture.describe()}"]
        if self.weights:
            out.append(f"weights: {gib(self.weights.bytes)} ({self.weights.how})")
        out.append(f"vLLM {s.vllm_version}: {s.vllm_version_basis}")
        out.append(f"KV per token: {lay.kv_bytes_per_token:,} B ({lay.attention_layers} attention layers x "
                   f"{lay.attention_bytes_per_token_per_layer:,} B, {s.kv_cache_dtype}: {s.kv_cache_dtype_why})")
        if lay.mamba_layers:
            out.append(f"Mamba state per sequence: {lay.mamba_layers} layers x {lay.mamba_state_bytes:,} B "
                       f"(conv {lay.conv_state_bytes:,} B in {s.conv_state_dtype} + SSM {lay.ssm_state_bytes:,} B in "
                       f"{s.ssm_state_dtype})")
            out.append(f"hybrid alignment: attention block {lay.block_size:,} tokens, page {lay.page_bytes:,} B "
                       f"(Mamba page padded by {lay.mamba_padding_pct:.2f}%); groups: {lay.attention_groups} "
                       f"attention + {lay.mamba_groups} Mamba of {lay.group_size} layers; mode {lay.mamba_mode}, "
                       f"{lay.mamba_blocks_per_group} Mamba blocks per group per request")
        else:
            out.append(f"blocks: {lay.block_size} tokens, {lay.bytes_per_block:,} B each (all layers)")
        if b.exact:
            out.append(f"KV cache memory: {gib(b.available_bytes)} ({b.how})")
        else:
            out.append(f"KV cache memory: {gib(b.available_bytes)} = {gib(b.requested_bytes or 0)} requested "
                       f"- {gib(b.weight_bytes or 0)} weights - {gib(b.held_back_bytes)} held back "
                       f"(activations {gib(b.activation_bytes)}"
                       + (f" [{b.activation_why}]" if b.activation_why else "")
                       + f", non-torch {gib(b.non_torch_bytes)}"
                       + (f" [{b.non_torch_why}]" if b.non_torch_why else "")
                       + f", CUDA graphs {gib(b.cuda_graph_bytes)}"
                       + (f" [{b.cuda_graphs} graphs]" if b.cuda_graphs else "") + f") [{b.how}]")
            if b.total_why:
                out.append(f"GPU memory: {gib(b.total_bytes or 0)} ({b.total_why})")
        out.append(f"pool: {self.capacity.num_blocks:,} blocks of {lay.bytes_per_block:,} B; "
                   f"{self.capacity.blocks_per_request} blocks per request at {s.max_model_len:,} tokens "
                   f"({s.max_model_len_why})")
        out.append(f"vLLM should log: {self.startup_line()}")
        out.append("context -> max concurrent sequences:")
        out += [f"  {r.context:>9,}  {r.max_concurrency:10.2f}x  ({r.kv_cache_tokens:,} tokens)" for r in self.table]
        rec = self.recommendation
        out.append(f"recommended: --max-model-len {rec.max_model_len} --max-num-seqs {rec.max_num_seqs}")
        out += [f"  {line}" for line in rec.lines]
        out += [f"note: {n}" for n in self.notes]
        out += [f"known issue: {k.title} [{k.matched}]. {k.change} Sources: {' '.join(k.sources)}"
                for k in self.known_issues]
        return "\n".join(out)


def _notes(arch: Architecture, settings: ServingSettings, flags: Mapping[str, str | None],
           budget: KVBudget, platform: str) -> list[str]:
    notes = []
    asked_mode = flags.get("--mamba-cache-mode")
    if arch.mamba_layers and asked_mode and asked_mode != settings.mamba_mode:
        notes.append(f"--mamba-cache-mode {asked_mode} is overridden: vLLM 0.32.0 uses '{settings.mamba_mode}' "
                     f"when prefix caching is {'on' if settings.prefix_caching else 'off'}.")
    if settings.speculative_method:
        notes.append(f"Speculative decoding ({settings.speculative_method}, {settings.num_speculative_tokens} tokens) "
                     "adds its tokens to every Mamba state; a drafter's own weights and KV layers are not counted.")
    if platform == "cpu" and arch.mamba_layers and settings.ssm_state_dtype != "float32":
        notes.append("On CPUs with AVX512-BF16, vLLM may reset a non-float32 SSM cache to float32 "
                     "(platforms/cpu.py).")
    if platform != "cpu" and not budget.exact:
        notes.append(f"vLLM takes its --gpu-memory-utilization share after creating its CUDA context "
                     f"({CUDA_CONTEXT_BYTES / 1e9:.2f} GB, {MEASURED_ON}): that much more must be free when it "
                     "starts, beside the share (`workshop --check` counts it).")
    if budget.available_bytes <= 0:
        notes.append("No memory is left for the KV cache: vLLM refuses to start ('No available memory for the "
                     "cache blocks'). Raise --gpu-memory-utilization or use a smaller variant.")
    return notes


def plan_command_memory(model_id: str, argv: Sequence[str], env: Mapping[str, str], config: ModelConfigFile,
                        hw: HardwareProfile, *, precision: str | None = None,
                        context_length: int | None = None, memory_gib: float | None = None,
                        gpu_memory_utilization: float | None = None, max_model_len: int | None = None,
                        max_num_seqs: int | None = None, overhead_gib: float | None = None,
                        vllm_version: str | None = None) -> MemoryPlan:
    """The memory plan of one `vllm serve` argv and env on `hw`, given the model's config.json (no I/O).
    `vllm_version`: the release that serves it (None: 0.32.0, the release the arithmetic is read from)."""
    platform = "cpu" if hw.is_cpu else "gpu"
    gpu = None if hw.is_cpu else GPU_MEMORY.get(hw.id)
    if memory_gib is not None:
        total, total_why = int(memory_gib * GIB), "given"
    elif gpu is not None:
        total, total_why = gpu.cuda_total_bytes, f"one {gpu.name} as CUDA sees it: {gpu.source}"
    else:
        total, total_why = int(hw.per_gpu_vram_gb * GIB), ""
    memory = total / GIB
    arch = architecture_from_config(config.data)
    weights = weight_bytes(arch, precision, config.index_total_size)
    overrides = {"max_model_len": max_model_len, "max_num_seqs": max_num_seqs,
                 "gpu_memory_utilization": gpu_memory_utilization}
    settings = resolve_settings(argv, env, arch, platform=platform, memory_gib=memory, hardware_id=hw.id,
                                recipe_context_length=context_length, overrides=overrides, vllm_version=vllm_version)
    layout = cache_layout(arch, platform=platform, kv_dtype=settings.kv_cache_dtype,
                          conv_dtype=settings.conv_state_dtype, ssm_dtype=settings.ssm_state_dtype,
                          mamba_mode=settings.mamba_mode, num_speculative_tokens=settings.num_speculative_tokens,
                          tensor_parallel_size=settings.tensor_parallel_size, block_size=settings.block_size,
                          release=settings.release)
    budget = kv_budget(arch, settings, total, weights, overhead_gib, gpu, total_why)
    cap = capacity(layout, budget.available_bytes, settings.max_model_len, settings.num_gpu_blocks_override)
    model_max = max(settings.max_model_len, arch.max_position_embeddings or 0)
    rec = recommend(layout, cap, settings, budget.available_bytes, model_max)
    notes = ([config.note] if config.note else []) + _notes(arch, settings, flag_values(argv), budget, platform)
    if memory_gib is None and gpu is None and not budget.exact:
        notes.append(f"Memory: the taxonomy's {memory:g} GiB per GPU; pass --memory-gb with what vLLM sees "
                     "(nvidia-smi's total)." + (SPARK_MEMORY if hw.id == "dgx_spark_gb10" else ""))
    if weights is None and not budget.exact:
        notes.append("The weights could not be sized from config.json; the budget leaves them out.")
    table = context_table(layout, budget.available_bytes, model_max, settings.max_model_len,
                          settings.num_gpu_blocks_override)
    return MemoryPlan(model_id, hw.id, config.source, arch, settings, weights, budget, layout, cap, table, rec,
                      [], notes)


def plan_memory_from_config(plan: LaunchPlan, catalog: Catalog, config: ModelConfigFile,
                            **options: Any) -> MemoryPlan:
    """The memory plan of a rendered plan, given its model's config.json (no I/O), with the
    plan's known issues and, when the numbers show it, the Mamba-blocks one."""
    recipe = catalog.recipe(plan.recipe_id)
    hw = catalog.hardware[plan.hardware]
    variant = recipe.variants.get(plan.variant or "", {})
    memory = plan_command_memory(plan.model_id, plan.argv, plan.env, config, hw, precision=variant.get("precision"),
                                 context_length=recipe.model.get("context_length"), **options)
    memory.known_issues = list(plan.known_issues)
    if memory.recommendation.max_num_seqs_exceeds_mamba_blocks:
        for issue in matching_known_issues(recipe, hw, plan.argv, plan.docker_image, check="mamba_cache_blocks"):
            memory.known_issues.append(KnownIssue.from_dict({**issue.to_dict(), "matched": (
                f"max_num_seqs {memory.settings.max_num_seqs} > {memory.capacity.num_blocks:,} Mamba cache blocks "
                "(planner estimate)")}))
    return memory


def plan_memory(plan: LaunchPlan, catalog: Catalog | None = None, *, config_path: str | Path | None = None,
                memory_gib: float | None = None, gpu_memory_utilization: float | None = None,
                max_model_len: int | None = None, max_num_seqs: int | None = None,
                overhead_gib: float | None = None, vllm_version: str | None = None) -> MemoryPlan:
    """Read the plan's config.json (`config_path`, the local build, the HF cache or the Hub)
    and plan its memory. Raises PlannerError when config.json cannot be had."""
    if plan.engine != "vllm":
        raise PlannerError(f"This plan runs on {plan.engine}; the planner models vLLM's memory only.",
                           hint="Pick a vLLM command (no TensorRT-LLM preset).")
    catalog = catalog or load_catalog()
    local_dir = None
    if plan.local_build:
        local_dir = built_models_dir() / plan.local_build
    config = read_model_config(plan.model_id, config_path=config_path, local_dir=local_dir)
    return plan_memory_from_config(plan, catalog, config, memory_gib=memory_gib,
                                   gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                                   max_num_seqs=max_num_seqs, overhead_gib=overhead_gib, vllm_version=vllm_version)
