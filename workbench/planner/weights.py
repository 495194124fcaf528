"""Weight bytes for a variant's quantization.

`weight_tensors` lists every tensor a checkpoint of the architecture holds, under
the Hugging Face names (so a quantization config's exclude patterns apply), with
routed experts one tensor per expert as checkpoints store them. `weight_bytes`
prices them: exactly from the checkpoint's safetensors index when a pre-quantized
checkpoint's index is at hand, else by counting (exact for unquantized weights,
an estimate for quantized ones: NVFP4 is 4 bits per value plus one FP8 scale per
group of 16, FP8 one byte).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.planner.architecture import Architecture

__all__ = ["DTYPE_BYTES", "WeightEstimate", "WeightTensor", "parameter_count", "quantization_of",
           "weight_bytes", "weight_tensors"]

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
_LLAMA_STYLE = ("llama", "mistral")


@dataclass(frozen=True)
class WeightTensor:
    name: str
    numel: int
    linear: bool  # a projection matrix: what weight quantization converts


@dataclass(frozen=True)
class WeightEstimate:
    bytes: int
    exact: bool
    how: str


def _t(name: str, numel: int, linear: bool = False) -> WeightTensor:
    return WeightTensor(name, numel, linear)


def _linear(prefix: str, out_features: int, in_features: int, bias: bool = False) -> list[WeightTensor]:
    out = [_t(f"{prefix}.weight", out_features * in_features, True)]
    if bias:
        out.append(_t(f"{prefix}.bias", out_features))
    return out


def _nemotron_h_layer(arch: Architecture, i: int, kind: str) -> list[WeightTensor]:
    base = f"backbone.layers.{i}"
    h = arch.hidden_size
    out = [_t(f"{base}.norm.weight", h)]
    mixer = f"{base}.mixer"
    if kind == "mamba":
        m = arch.mamba
        assert m is not None
        projection = m.intermediate_size + m.conv_dim + m.num_heads
        out += _linear(f"{mixer}.in_proj", projection, h, arch.mamba_proj_bias)
        out.append(_t(f"{mixer}.conv1d.weight", m.conv_dim * m.conv_kernel))
        if arch.use_conv_bias:
            out.append(_t(f"{mixer}.conv1d.bias", m.conv_dim))
        out += [_t(f"{mixer}.{n}", m.num_heads) for n in ("dt_bias", "A_log", "D")]
        out.append(_t(f"{mixer}.norm.weight", m.intermediate_size))
        out += _linear(f"{mixer}.out_proj", h, m.intermediate_size, arch.mamba_proj_bias)
    elif kind == "attention":
        q, kv = arch.num_attention_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
        out += _linear(f"{mixer}.q_proj", q, h) + _linear(f"{mixer}.k_proj", kv, h)
        out += _linear(f"{mixer}.v_proj", kv, h) + _linear(f"{mixer}.o_proj", h, q)
    elif kind == "mlp":
        size = arch.mlp_intermediate_size or 0
        out += _linear(f"{mixer}.up_proj", size, h, arch.mlp_bias) + _linear(f"{mixer}.down_proj", h, size, arch.mlp_bias)
    else:
        e = arch.moe
        assert e is not None
        width = e.latent_size or h
        out += [_t(f"{mixer}.gate.weight", e.routed_experts * h), _t(f"{mixer}.gate.e_score_correction_bias", e.routed_experts)]
        for j in range(e.routed_experts):
            out += _linear(f"{mixer}.experts.{j}.up_proj", e.intermediate_size, width, arch.mlp_bias)
            out += _linear(f"{mixer}.experts.{j}.down_proj", width, e.intermediate_size, arch.mlp_bias)
        shared = e.shared_intermediate_size
        out += _linear(f"{mixer}.shared_experts.up_proj", shared, h, arch.mlp_bias)
        out += _linear(f"{mixer}.shared_experts.down_proj", h, shared, arch.mlp_bias)
        if e.latent_size:
            out += _linear(f"{mixer}.fc1_latent_proj", e.latent_size, h, arch.mlp_bias)
            out += _linear(f"{mixer}.fc2_latent_proj", h, e.latent_size, arch.mlp_bias)
    return out


def _llama_layer(arch: Architecture, i: int) -> list[WeightTensor]:
    base, h = f"model.layers.{i}", arch.hidden_size
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    size, b = arch.mlp_intermediate_size or 0, arch.attention_bias
    out = [_t(f"{base}.input_layernorm.weight", h), _t(f"{base}.post_attention_layernorm.weight", h)]
    out += _linear(f"{base}.self_attn.q_proj", q, h, b) + _linear(f"{base}.self_attn.k_proj", kv, h, b)
    out += _linear(f"{base}.self_attn.v_proj", kv, h, b) + _linear(f"{base}.self_attn.o_proj", h, q, b)
    for name, o, i_ in (("gate_proj", size, h), ("up_proj", size, h), ("down_proj", h, size)):
        out += _linear(f"{base}.mlp.{name}", o, i_, arch.mlp_bias)
    return out


def weight_tensors(arch: Architecture) -> list[WeightTensor] | None:
    """Every weight of the main model (MTP heads left out, as vLLM's main model skips them);
    None for an architecture the planner cannot count."""
    h, v = arch.hidden_size, arch.vocab_size
    if arch.model_type == "nemotron_h":
        out = [_t("backbone.embeddings.weight", v * h)]
        for i, kind in enumerate(arch.layer_kinds):
            out += _nemotron_h_layer(arch, i, kind)
        out.append(_t("backbone.norm_f.weight", h))
    elif arch.model_type in _LLAMA_STYLE:
        out = [_t("model.embed_tokens.weight", v * h)]
        for i in range(arch.num_layers):
            out += _llama_layer(arch, i)
        out.append(_t("model.norm.weight", h))
    else:
        return None
    # NemotronH keeps its own lm_head even with tie_word_embeddings (neither vLLM's
    # nemotron_h.py nor transformers' modeling_nemotron_h.py ties it).
    if not arch.tie_word_embeddings or arch.model_type == "nemotron_h":
        out.append(_t("lm_head.weight", v * h))
    return out


def parameter_count(arch: Architecture) -> int | None:
    tensors = weight_tensors(arch)
    return None if tensors is None else sum(t.numel for t in tensors)


@dataclass(frozen=True)
class Quantization:
    algo: str  # "nvfp4" or "fp8"
    group_size: int
    excluded: tuple[str, ...]
    source: str

    def bytes_per_value(self) -> float:
        # NVFP4: a 4-bit value plus one FP8 scale per group; FP8: one byte.
        return 0.5 + 1 / self.group_size if self.algo == "nvfp4" else 1.0

    def converts(self, tensor: WeightTensor) -> bool:
        module = tensor.name.rsplit(".", 1)[0]
        return tensor.linear and not any(fnmatch.fnmatchcase(module, p) or fnmatch.fnmatchcase(tensor.name, p)
                                         for p in self.excluded)


def quantization_of(arch: Architecture, precision: str | None) -> Quantization | None:
    """The checkpoint's weight quantization: its quantization_config, else the recipe's precision."""
    q: Mapping[str, Any] = arch.quantization or {}
    nested = q.get("quantization")
    inner: Mapping[str, Any] = nested if isinstance(nested, Mapping) else q
    algo = str(inner.get("quant_algo") or q.get("quant_method") or "").lower()
    excluded: Sequence[str] = (inner.get("exclude_modules") or inner.get("ignore")
                               or q.get("modules_to_not_convert") or ["lm_head"])
    if algo in ("nvfp4", "fp8"):
        return Quantization(algo, int(inner.get("group_size") or 16), tuple(excluded), "the config's quantization_config")
    if q:
        return None
    if precision in ("nvfp4", "fp4"):
        return Quantization("nvfp4", 16, ("lm_head",), f"the recipe's precision {precision} (every projection but lm_head)")
    if precision == "fp8":
        return Quantization("fp8", 0, ("lm_head",), "the recipe's precision fp8 (every projection but lm_head)")
    return None


def weight_bytes(arch: Architecture, precision: str | None = None,
                 index_total_size: int | None = None) -> WeightEstimate | None:
    """Bytes of weights vLLM loads; None when neither the index nor a count can say."""
    quant = quantization_of(arch, precision)
    prequantized = quant is not None or bool(arch.quantization)
    if prequantized and index_total_size:
        return WeightEstimate(index_total_size, True, "the checkpoint's model.safetensors.index.json (total_size)")
    tensors = weight_tensors(arch)
    if tensors is None:
        if index_total_size:
            return WeightEstimate(index_total_size, False, "the checkpoint's safetensors index (as stored)")
        return None
    if arch.quantization and quant is None:
        return None
    element = DTYPE_BYTES.get(arch.model_dtype, 2)
    if quant is None:
        count = sum(t.numel for t in tensors)
        return WeightEstimate(count * element, True, f"{count:,} parameters counted from config.json, {arch.model_dtype}")
    converted = sum(t.numel for t in tensors if quant.converts(t))
    rest = sum(t.numel for t in tensors) - converted
    total = int(converted * quant.bytes_per_value()) + rest * element
    return WeightEstimate(total, False, f"estimate: {converted:,} parameters in {quant.algo.upper()} "
                          f"(from {quant.source}), {rest:,} in {arch.model_dtype}")
