"""A checkpoint's config.json as the numbers the memory model needs.

Two families: Nemotron-H (`model_type: nemotron_h`: Mamba-2, attention, MLP and
MoE layers, named by `layers_block_type` or the older `hybrid_override_pattern`)
and dense decoders whose every layer is full attention (Llama-style). Anything
the memory model would get wrong (sliding windows, MLA) is refused with the reason.
The field names are the Hugging Face config's, read as vLLM 0.32.0 reads them
(vllm/model_executor/models/nemotron_h.py, vllm/config/model.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from workbench.errors import PlannerError

__all__ = ["Architecture", "LayerKind", "MambaDims", "MoEDims", "architecture_from_config"]

LayerKind = Literal["attention", "mamba", "mlp", "moe"]

# Nemotron-H layer names: the pattern letters and the list forms (old and new spellings).
_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
_BLOCK_TYPES = {"mamba": "mamba", "linear_attention": "mamba", "attention": "attention",
                "full_attention": "attention", "mlp": "mlp", "moe": "moe"}
# NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE in vLLM 0.32.0.
NEMOTRON_H_DEFAULT_SSM_DTYPE = "float32"


@dataclass(frozen=True)
class MambaDims:
    """One Mamba-2 mixer: vLLM's mamba2_state_shape arguments."""

    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int

    @property
    def intermediate_size(self) -> int:
        # NemotronH passes mamba_num_heads * mamba_head_dim (not expand * hidden_size).
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.intermediate_size + 2 * self.n_groups * self.state_size


@dataclass(frozen=True)
class MoEDims:
    routed_experts: int
    experts_per_token: int
    intermediate_size: int
    shared_experts: int
    shared_intermediate_size: int
    latent_size: int | None


@dataclass(frozen=True)
class Architecture:
    model_type: str
    layer_kinds: tuple[LayerKind, ...]
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    config_dtype: str
    max_position_embeddings: int | None
    mlp_intermediate_size: int | None
    mamba: MambaDims | None = None
    moe: MoEDims | None = None
    ssm_cache_dtype: str | None = None  # the config's mamba_ssm_cache_dtype (vLLM's `auto`)
    quantization: Mapping[str, Any] | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    use_conv_bias: bool = True
    mamba_proj_bias: bool = False
    mtp_layers: int = 0

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def attention_layers(self) -> int:
        return self.layer_kinds.count("attention")

    @property
    def mamba_layers(self) -> int:
        return self.layer_kinds.count("mamba")

    @property
    def is_hybrid(self) -> bool:
        return self.mamba_layers > 0 and self.attention_layers > 0

    @property
    def model_dtype(self) -> str:
        """The dtype vLLM serves with for `--dtype auto`: float32 checkpoints are downcast
        to bfloat16 (vllm/config/model.py, _resolve_auto_dtype)."""
        return "bfloat16" if self.config_dtype in ("float32", "float") else self.config_dtype

    def describe(self) -> str:
        parts = [f"{self.num_layers} layers: {self.attention_layers} attention"]
        if self.mamba_layers:
            parts.append(f"{self.mamba_layers} Mamba-2")
        for kind, label in (("moe", "MoE"), ("mlp", "MLP")):
            if self.layer_kinds.count(kind):
                parts.append(f"{self.layer_kinds.count(kind)} {label}")
        kv = f"{self.num_kv_heads} KV heads x head_dim {self.head_dim}"
        return f"{self.model_type}, {', '.join(parts)}; {kv}"


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PlannerError(f"config.json has no whole number {key!r} (got {value!r}).",
                           hint="Give the checkpoint's own config.json.", settings=("config",))
    return value


def _dtype(config: Mapping[str, Any]) -> str:
    value = config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    return str(value).removeprefix("torch.")


def _nemotron_h_layers(config: Mapping[str, Any]) -> tuple[LayerKind, ...]:
    listed = config.get("layers_block_type") or config.get("layer_types")
    if isinstance(listed, list):
        unknown = sorted({str(t) for t in listed if t not in _BLOCK_TYPES})
        if unknown:
            raise PlannerError(f"config.json's layers_block_type has layer types the planner does not know: {unknown}")
        return tuple(_BLOCK_TYPES[t] for t in listed)  # type: ignore[misc]
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        unknown = sorted(set(pattern) - set(_PATTERN))
        if unknown:
            raise PlannerError(f"config.json's hybrid_override_pattern has letters the planner does not know: {unknown}")
        return tuple(_PATTERN[c] for c in pattern)  # type: ignore[misc]
    raise PlannerError("config.json of this Nemotron-H model names no layers "
                       "(neither layers_block_type nor hybrid_override_pattern).")


def _common(config: Mapping[str, Any], layers: tuple[LayerKind, ...]) -> dict[str, Any]:
    heads = _int(config, "num_attention_heads")
    hidden = _int(config, "hidden_size")
    head_dim = config.get("head_dim") or hidden // heads
    return {
        "model_type": str(config.get("model_type")),
        "layer_kinds": layers,
        "hidden_size": hidden,
        "vocab_size": _int(config, "vocab_size"),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
        "num_attention_heads": heads,
        "num_kv_heads": int(config.get("num_key_value_heads") or heads),
        "head_dim": int(head_dim),
        "config_dtype": _dtype(config),
        "max_position_embeddings": config.get("max_position_embeddings"),
        "quantization": config.get("quantization_config"),
        "attention_bias": bool(config.get("attention_bias", False)),
        "mlp_bias": bool(config.get("mlp_bias", False)),
    }


def architecture_from_config(config: Mapping[str, Any]) -> Architecture:
    """The Architecture of a config.json, or PlannerError saying what is not modelled."""
    model_type = str(config.get("model_type", ""))
    if model_type == "nemotron_h":
        layers = _nemotron_h_layers(config)
        moe = None
        if "moe" in layers:
            moe = MoEDims(
                routed_experts=_int(config, "n_routed_experts"),
                experts_per_token=_int(config, "num_experts_per_tok"),
                intermediate_size=_int(config, "moe_intermediate_size"),
                shared_experts=_int(config, "n_shared_experts", 1),
                shared_intermediate_size=_int(config, "moe_shared_expert_intermediate_size"),
                latent_size=config.get("moe_latent_size"),
            )
        mlp_size = config.get("intermediate_size")
        if isinstance(mlp_size, list):
            raise PlannerError("config.json gives one intermediate_size per MLP layer; the planner "
                               "counts weights for a single size.")
        return Architecture(
            **_common(config, layers),
            mlp_intermediate_size=mlp_size if "mlp" in layers else None,
            mamba=MambaDims(
                num_heads=_int(config, "mamba_num_heads"),
                head_dim=_int(config, "mamba_head_dim"),
                n_groups=_int(config, "n_groups"),
                state_size=_int(config, "ssm_state_size"),
                conv_kernel=_int(config, "conv_kernel"),
            ) if "mamba" in layers else None,
            moe=moe,
            ssm_cache_dtype=str(config.get("mamba_ssm_cache_dtype") or NEMOTRON_H_DEFAULT_SSM_DTYPE),
            use_conv_bias=bool(config.get("use_conv_bias", True)),
            mamba_proj_bias=bool(config.get("use_bias", False)),
            mtp_layers=int(config.get("num_nextn_predict_layers") or 0),
        )
    layer_types = config.get("layer_types")
    unmodelled = {
        "multi-head latent attention (MLA)": config.get("kv_lora_rank") is not None,
        "sliding-window attention": config.get("sliding_window") is not None
        and config.get("use_sliding_window") is not False,
        "attention other than full attention": isinstance(layer_types, list)
        and any(t != "full_attention" for t in layer_types),
        "a multimodal config": config.get("text_config") is not None,
    }
    for what, found in unmodelled.items():
        if found:
            raise PlannerError(f"This {model_type or 'model'} uses {what}, which the memory planner does not model.",
                               hint="The planner models Nemotron-H hybrids and dense full-attention decoders.")
    attention: LayerKind = "attention"
    dense = (attention,) * _int(config, "num_hidden_layers")
    return Architecture(**_common(config, dense), mlp_intermediate_size=config.get("intermediate_size"))
