"""A tiny random-weight Nemotron-H (Mamba-2 + attention + MLP, no MoE) that vLLM's CPU build serves.

Built with transformers from a config, with the forcing model's tokenizer. The MoE
of Nemotron-H is CUDA-only in vLLM, so the layers are Mamba-2 (`M`), attention (`*`)
and MLP (`-`); vLLM's CPU attention needs head_dim >= 32. Five Mamba layers and two
attention layers make vLLM group them as 1 attention + 3 Mamba groups of 2 layers
(one padding layer), so the planner's grouping is exercised.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

PATTERN = "M*M-M*M-M-"
CONFIG = {
    "hidden_size": 64,
    "hybrid_override_pattern": PATTERN,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "intermediate_size": 128,
    "mamba_num_heads": 4,
    "mamba_head_dim": 16,
    "n_groups": 2,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "chunk_size": 64,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}
_MARKER = "hybrid-build.json"


def build_tiny_hybrid(dest: Path, tokenizer_dir: Path) -> Path:
    """Build (once) the tiny Nemotron-H into `dest`; returns `dest`."""
    marker = dest / _MARKER
    if marker.is_file() and json.loads(marker.read_text()) == CONFIG:
        return dest
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = transformers.NemotronHConfig(
        vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=0, torch_dtype="float32", **CONFIG)
    torch.manual_seed(0)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    transformers.NemotronHForCausalLM(config).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / _MARKER).write_text(json.dumps(CONFIG))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest
