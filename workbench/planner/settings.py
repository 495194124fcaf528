"""What a rendered command asks of vLLM's cache, with vLLM's defaults filled in (0.32.0's,
or the release's given: planner/versions.py).

Reads the plan's argv and env (flags in any spelling vLLM accepts), and resolves
what vLLM resolves before sizing the cache: `auto` KV dtype (the model's, or a
ModelOpt checkpoint's kv_cache_quant_algo), NemotronH's float32 SSM default, the
Mamba cache mode that prefix caching implies, and the default --max-num-seqs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from workbench.errors import PlannerError
from workbench.planner.architecture import Architecture
from workbench.planner.memory import MambaMode
from workbench.planner.versions import VllmRelease, vllm_release
from workbench.recipes.argv import flag_values

__all__ = ["GIB", "ServingSettings", "default_max_num_batched_tokens", "default_max_num_seqs",
           "resolve_settings"]

GIB = 1 << 30
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # CacheConfig.gpu_memory_utilization
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _human_int(text: str, flag: str) -> int:
    """vLLM's human_readable_int: '1k' is 1000, '1K' is 1024."""
    m = _HUMAN_INT.fullmatch(text.strip())
    try:
        if m:
            number, suffix = m.groups()
            if suffix in _DECIMAL:
                return int(float(number) * _DECIMAL[suffix])
            return int(number) * _BINARY[suffix]
        return int(text)
    except ValueError as exc:
        raise PlannerError(f"{flag} {text!r} is not a whole number.") from exc


def default_max_num_seqs(platform: str, memory_gib: float, hardware_id: str, world_size: int = 1) -> int:
    """vLLM 0.32.0's default for the API server (EngineArgs.get_batch_defaults)."""
    if platform == "cpu":
        return 128 * world_size
    if memory_gib >= 160 or (memory_gib >= 70 and "a100" not in hardware_id):
        return 1024
    return 256


def default_max_num_batched_tokens(platform: str, memory_gib: float, hardware_id: str, world_size: int = 1,
                                   release: VllmRelease | None = None) -> int:
    if platform == "cpu":
        return 2048 * world_size
    if memory_gib >= 160 and (release or vllm_release()).large_gpu_batch_tier:
        return 16384
    if memory_gib >= 70 and "a100" not in hardware_id:
        return 8192
    return 2048


@dataclass(frozen=True)
class ServingSettings:
    """The cache-relevant settings of one launch, resolved as vLLM resolves them."""

    platform: str  # "gpu" or "cpu"
    tensor_parallel_size: int
    kv_cache_dtype: str  # resolved: no "auto"
    kv_cache_dtype_why: str
    conv_state_dtype: str
    ssm_state_dtype: str
    prefix_caching: bool
    mamba_mode: MambaMode
    num_speculative_tokens: int
    speculative_method: str | None
    max_model_len: int
    max_model_len_why: str
    max_num_seqs: int
    max_num_seqs_why: str
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    block_size: int | None
    kv_cache_memory_bytes: int | None
    kv_cache_memory_why: str
    enforce_eager: bool
    num_gpu_blocks_override: int | None
    vllm_version: str = ""  # the release whose arithmetic and defaults apply
    vllm_version_basis: str = ""

    @property
    def release(self) -> VllmRelease:
        return vllm_release(self.vllm_version or None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _speculation(flags: Mapping[str, str | None]) -> tuple[int, str | None]:
    tokens: Any = None
    method: Any = None
    raw = flags.get("--speculative-config")
    if raw:
        try:
            config = json.loads(raw)
        except ValueError as exc:
            raise PlannerError(f"--speculative-config is not JSON: {raw}") from exc
        tokens, method = config.get("num_speculative_tokens"), config.get("method")
        if method is None and config.get("model"):
            method = "draft model"
    for key, value in flags.items():
        if key.startswith("--speculative-config."):
            field = key.split(".", 1)[1].replace("-", "_")
            if field == "num_speculative_tokens":
                tokens = value
            elif field == "method":
                method = value
            elif field == "model" and method is None:
                method = "draft model"
    return (int(tokens) if tokens is not None else 0), method


def _checkpoint_kv_dtype(arch: Architecture) -> str | None:
    """vLLM's resolve_kv_cache_dtype_string: a ModelOpt checkpoint's kv_cache_quant_algo."""
    q: Mapping[str, Any] = arch.quantization or {}
    if not str(q.get("quant_method", "")).startswith("modelopt"):
        return None
    nested = q.get("quantization")
    inner: Mapping[str, Any] = nested if isinstance(nested, Mapping) else q
    algo = inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo") \
        or q.get("kv_cache_quant_algo")
    if isinstance(algo, Mapping):
        return "fp8" if algo.get("num_bits") == 8 and algo.get("type") == "float" else None
    return "fp8_e4m3" if isinstance(algo, str) and algo.lower() == "fp8" else None


def _kv_dtype(flags: Mapping[str, str | None], arch: Architecture) -> tuple[str, str]:
    asked = flags.get("--kv-cache-dtype") or "auto"
    if asked != "auto":
        return asked, f"--kv-cache-dtype {asked}"
    from_checkpoint = _checkpoint_kv_dtype(arch)
    if from_checkpoint:
        return from_checkpoint, "auto: the checkpoint's quantization_config names an FP8 KV cache"
    return arch.model_dtype, f"auto: the model's dtype ({arch.model_dtype})"


def resolve_settings(argv: Sequence[str], env: Mapping[str, str], arch: Architecture, *, platform: str,
                     memory_gib: float, hardware_id: str, recipe_context_length: int | None = None,
                     overrides: Mapping[str, Any] | None = None, vllm_version: str | None = None) -> ServingSettings:
    """The settings of a `vllm serve` argv; `overrides` (max_model_len, max_num_seqs,
    gpu_memory_utilization) are what the planner's user asks instead; `vllm_version` the
    release that will serve it (None: 0.32.0)."""
    release = vllm_release(vllm_version)
    flags = flag_values(argv)
    over = dict(overrides or {})

    def number(flag: str) -> int | None:
        value = flags.get(flag)
        return _human_int(value, flag) if value else None

    tp = number("--tensor-parallel-size") or number("-tp") or 1
    kv_dtype, kv_why = _kv_dtype(flags, arch)
    conv = flags.get("--mamba-cache-dtype") or "auto"
    conv = arch.model_dtype if conv == "auto" else conv
    ssm = flags.get("--mamba-ssm-cache-dtype") or "auto"
    if ssm == "auto":
        ssm = arch.ssm_cache_dtype or conv
    prefix = "--no-enable-prefix-caching" not in flags
    spec_tokens, spec_method = _speculation(flags)

    model_max = arch.max_position_embeddings or recipe_context_length
    if over.get("max_model_len"):
        max_len, len_why = int(over["max_model_len"]), "asked here"
    elif number("--max-model-len"):
        max_len, len_why = int(number("--max-model-len") or 0), "--max-model-len in the command"
    elif model_max:
        max_len, len_why = int(model_max), "the model's max_position_embeddings (vLLM's default)"
    else:
        raise PlannerError("Neither the command nor config.json gives a maximum context.",
                           hint="Pass --max-model-len.")
    if over.get("max_num_seqs"):
        seqs, seqs_why = int(over["max_num_seqs"]), "asked here"
    elif number("--max-num-seqs"):
        seqs, seqs_why = int(number("--max-num-seqs") or 0), "--max-num-seqs in the command"
    else:
        seqs = default_max_num_seqs(platform, memory_gib, hardware_id, tp)
        seqs_why = (f"vLLM {release.version}'s default for {memory_gib:g} GiB" if platform != "cpu"
                    else "vLLM's CPU default")
    util = over.get("gpu_memory_utilization") or _float(flags.get("--gpu-memory-utilization")) \
        or DEFAULT_GPU_MEMORY_UTILIZATION

    kv_bytes, kv_mem_why = number("--kv-cache-memory-bytes"), "--kv-cache-memory-bytes"
    cpu_space = env.get("VLLM_CPU_KVCACHE_SPACE", "")
    if platform == "cpu" and cpu_space.strip():
        # platforms/cpu.py: the legacy setting, whole GiB, wins over --kv-cache-memory-bytes.
        kv_bytes, kv_mem_why = int(cpu_space) * GIB, f"VLLM_CPU_KVCACHE_SPACE={cpu_space} (GiB)"
    return ServingSettings(
        platform=platform,
        tensor_parallel_size=tp,
        kv_cache_dtype=kv_dtype,
        kv_cache_dtype_why=kv_why,
        conv_state_dtype=conv,
        ssm_state_dtype=ssm,
        prefix_caching=prefix,
        mamba_mode="align" if prefix else "none",
        num_speculative_tokens=spec_tokens,
        speculative_method=spec_method,
        max_model_len=max_len,
        max_model_len_why=len_why,
        max_num_seqs=seqs,
        max_num_seqs_why=seqs_why,
        max_num_batched_tokens=number("--max-num-batched-tokens")
        or default_max_num_batched_tokens(platform, memory_gib, hardware_id, tp, release),
        gpu_memory_utilization=float(util),
        block_size=number("--block-size"),
        kv_cache_memory_bytes=kv_bytes,
        kv_cache_memory_why=kv_mem_why if kv_bytes else "",
        enforce_eager="--enforce-eager" in flags,
        num_gpu_blocks_override=number("--num-gpu-blocks-override"),
        vllm_version=release.version,
        vllm_version_basis=release.basis,
    )


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError as exc:
        raise PlannerError(f"--gpu-memory-utilization {text!r} is not a number.") from exc
