"""From the pool to advice: concurrency against context, the longest context at a
concurrency, the --max-model-len / --max-num-seqs to use, and the Mamba-blocks limit.

The Mamba-blocks limit is vLLM 0.32.0's start-up check (vllm/config/compilation.py):
with full CUDA graphs, a hybrid model refuses to start when max_num_seqs exceeds
the pool's num_blocks (one Mamba block per decoding sequence). It does not apply
with --enforce-eager or on the CPU engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.planner.memory import CacheLayout, Capacity, capacity, longest_context
from workbench.planner.settings import ServingSettings

__all__ = ["ContextRow", "Recommendation", "context_table", "recommend"]

_FIRST_CONTEXT = 4096


@dataclass(frozen=True)
class ContextRow:
    context: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def context_table(layout: CacheLayout, available_bytes: int, model_max: int, asked: int,
                  num_blocks_override: int | None = None) -> list[ContextRow]:
    """Concurrency at each power-of-two context from 4K to the model's maximum, and at `asked`."""
    contexts = set()
    n = _FIRST_CONTEXT
    while n < model_max:
        contexts.add(n)
        n *= 2
    contexts |= {model_max, asked}
    rows = []
    for ctx in sorted(c for c in contexts if c > 0):
        cap = capacity(layout, available_bytes, ctx, num_blocks_override)
        rows.append(ContextRow(ctx, cap.blocks_per_request, cap.max_concurrency, cap.kv_cache_tokens))
    return rows


@dataclass(frozen=True)
class Recommendation:
    max_model_len: int
    max_num_seqs: int
    longest_context_at_max_num_seqs: int  # for the command's (or default) max_num_seqs
    mamba_block_limit: int | None  # max_num_seqs must not exceed it (hybrid, full CUDA graphs)
    max_num_seqs_exceeds_mamba_blocks: bool
    lines: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def recommend(layout: CacheLayout, cap: Capacity, settings: ServingSettings, available_bytes: int,
              model_max: int) -> Recommendation:
    seqs = settings.max_num_seqs
    lines: list[str] = []
    hybrid_graphs = layout.mamba_layers > 0 and settings.platform != "cpu" and not settings.enforce_eager
    limit = cap.num_blocks if hybrid_graphs else None
    exceeds = limit is not None and seqs > limit
    longest_at_seqs = longest_context(layout, cap.num_blocks, seqs, model_max)
    if cap.fits_one_request:
        length = settings.max_model_len
    else:
        length = longest_context(layout, max(0, cap.num_blocks - 1), 1, model_max)
        lines.append(f"--max-model-len {settings.max_model_len:,} does not fit one request: vLLM would refuse "
                     f"to start; at most about {length:,} fits.")
    at_length = capacity(layout, available_bytes, length, settings.num_gpu_blocks_override) if length else cap
    full = max(1, int(at_length.max_concurrency)) if length else 0
    recommended_seqs = min(seqs, full) if full else 0
    if limit is not None:
        recommended_seqs = min(recommended_seqs, limit)
    if length and at_length.max_concurrency >= seqs:
        lines.append(f"All {seqs} sequences (--max-num-seqs, {settings.max_num_seqs_why}) can hold "
                     f"{length:,} tokens at once ({at_length.max_concurrency:.2f}x).")
    elif length:
        at_seqs = (f"{seqs} sequences fit at full length up to {longest_at_seqs:,} tokens each" if longest_at_seqs
                   else f"{seqs} sequences do not fit at once at any length (each holds "
                   f"{layout.mamba_groups * layout.mamba_blocks_per_group} Mamba blocks before its first token)")
        lines.append(f"At --max-model-len {length:,}, {at_length.max_concurrency:.2f} sequences fit at full "
                     f"length; {at_seqs}. vLLM admits more sequences when they are shorter, and preempts when "
                     "the cache runs out.")
    if exceeds:
        lines.append(f"--max-num-seqs {seqs} exceeds the {limit:,} Mamba cache blocks: vLLM 0.32.0 refuses to "
                     f"start with full CUDA graphs. Use --max-num-seqs {limit} or less, or raise "
                     "--gpu-memory-utilization.")
    elif limit is not None:
        lines.append(f"--max-num-seqs {seqs} is within the {limit:,} Mamba cache blocks vLLM checks at start-up.")
    return Recommendation(length, recommended_seqs, longest_at_seqs, limit, exceeds, lines)
