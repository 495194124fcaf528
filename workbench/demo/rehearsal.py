"""The rehearsal model: a tiny random-weight Nemotron-H with MoE, built locally in seconds.

It stands in for Nemotron 3.5 Lightning in `serve --rehearsal` (workbench.recipes.rehearsal):
the same architecture class (NemotronHForCausalLM), the same 52-layer pattern of Mamba-2 (M),
MoE (E) and attention (*) layers as the published Nemotron 3 Nano 30B-A3B, whose backbone
Lightning shares (tests/fixtures/public-configs/README.md), a squared-ReLU MoE with a shared
expert, a float32 SSM cache by default, and BF16 weights; every dimension scaled down
(about 48 M parameters). The tokenizer is SmolLM2's from the packaged GGUF with the special
tokens Nemotron's parsers match by id (`<think>`, `</think>`, `<tool_call>`, ...) and a
ChatML template that opens `<think>` and writes tool calls in qwen3_coder's XML, so the
recipe's `nemotron_v3` reasoning parser and `qwen3_coder` tool parser run on it for real.

Its answers are noise (random weights): it rehearses serving (start-up phases, kernels,
memory, throughput, the UI), not quality. vLLM's Nemotron-H MoE is CUDA-only, so it serves
on an NVIDIA GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.demo.models import FORCING_CHAT_TEMPLATE, BuiltModel, Progress, build_tiny_random_model, print_progress
from workbench.recipes.rehearsal import REHEARSAL_BUILD

__all__ = ["REHEARSAL_CONFIG", "REHEARSAL_NAME", "build_rehearsal_model"]

REHEARSAL_NAME = REHEARSAL_BUILD

# Nemotron 3 Nano 30B-A3B's layer pattern (23 Mamba-2, 23 MoE, 6 attention), its activations,
# routing and cache dtype; dimensions scaled down (Mamba's inner width, heads x head dim, twice the hidden size).
REHEARSAL_CONFIG: dict[str, Any] = {
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "mamba_num_heads": 16,
    "mamba_head_dim": 32,
    "n_groups": 2,
    "ssm_state_size": 64,
    "conv_kernel": 4,
    "chunk_size": 128,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "moe_shared_expert_intermediate_size": 256,
    "n_shared_experts": 1,
    "routed_scaling_factor": 2.5,
    "intermediate_size": 128,
    "max_position_embeddings": 262144,
    "tie_word_embeddings": False,
    "mlp_hidden_act": "relu2",
    "mamba_hidden_act": "silu",
    "mamba_ssm_cache_dtype": "float32",
}


def build_rehearsal_model(dest: Path | None = None, *, force: bool = False,
                          progress: Progress = print_progress) -> BuiltModel:
    """Build (once) the rehearsal model into the cache folder; about 10 s on a CPU."""
    return build_tiny_random_model(
        REHEARSAL_NAME, FORCING_CHAT_TEMPLATE, architecture="nemotron_h",
        description="random weights, Nemotron 3's 52-layer Mamba-2 + MoE + attention pattern, BF16",
        config=REHEARSAL_CONFIG, dtype="bfloat16", dest=dest, force=force, progress=progress)
