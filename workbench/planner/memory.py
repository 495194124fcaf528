"""vLLM's KV-cache arithmetic (0.32.0's source; 0.26.0's where it differs), redone without a GPU.

The steps and where vLLM does them:

1. Attention page per layer and token: 2 x head_dim x KV heads per rank x the KV
   dtype (v1/kv_cache_interface.py, AttentionSpec); fp8 is one byte.
2. Mamba-2 state per layer and sequence: conv state (conv_dim/tp x (conv_kernel-1+S))
   in the conv dtype plus SSM state (heads/tp x head_dim x state) in the SSM dtype
   (model_executor/layers/mamba/mamba_utils.py, mamba2_state_shape).
3. Hybrid alignment: the attention block is raised to the smallest multiple of the
   kernel alignment whose page holds a Mamba state, and the Mamba page is padded to
   that page (platforms/interface.py, _align_hybrid_block_size).
4. Groups: attention and Mamba layers are split into groups of equal size (the
   smaller count, or the larger when it is under 1.5x the smaller), padding the
   last one (v1/core/kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size).
5. One shared block pool: num_blocks = available // (group size x page).
6. Per request at max_model_len: cdiv(len, block) blocks per attention group and
   2+S (align mode; 3+S from 0.32.0, which adds a prefill checkpoint block: see
   planner/versions.py) or 1+S (none) per Mamba group; concurrency = num_blocks / that,
   "KV cache size" = int(concurrency x max_model_len) (get_kv_cache_capacity).

Pure functions: pages, groups and the pool are the same on a CPU and a GPU; only the
kernel block alignment and the default block size differ.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from workbench.errors import PlannerError
from workbench.planner.architecture import Architecture
from workbench.planner.versions import VllmRelease, vllm_release

__all__ = ["CacheLayout", "Capacity", "KV_DTYPE_BYTES", "STATE_DTYPE_BYTES", "capacity", "cache_layout",
           "kernel_alignment", "longest_context"]

MambaMode = Literal["align", "none"]

# Bytes per element of a --kv-cache-dtype (vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE).
KV_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4,
                  "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
STATE_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Smallest kernel block of the attention backends: FLASH_ATTN, FLASHINFER and
# TRITON_ATTN take multiples of 16, CPU_ATTN of 32; the CPU platform's default
# block is 128 (platforms/cpu.py), CacheConfig.DEFAULT_BLOCK_SIZE is 16.
GPU_KERNEL_BLOCK, GPU_DEFAULT_BLOCK = 16, 16
CPU_KERNEL_BLOCK, CPU_DEFAULT_BLOCK = 32, 128


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kernel_alignment(platform: str, block_size: int | None) -> tuple[int, int, int]:
    """(block size before alignment, kernel alignment, backend alignment) for a platform."""
    kernel, default = (CPU_KERNEL_BLOCK, CPU_DEFAULT_BLOCK) if platform == "cpu" else (GPU_KERNEL_BLOCK,
                                                                                         GPU_DEFAULT_BLOCK)
    block = block_size or default
    return block, max(kernel, block), kernel


@dataclass(frozen=True)
class CacheLayout:
    """How vLLM lays the cache out for one model and its serving settings (per rank)."""

    kv_dtype: str
    attention_bytes_per_token_per_layer: int
    attention_layers: int
    mamba_layers: int
    conv_state_bytes: int
    ssm_state_bytes: int
    block_size: int
    page_bytes: int
    group_size: int
    attention_groups: int
    mamba_groups: int
    padding_layers: int
    mamba_mode: MambaMode
    mamba_blocks_per_group: int  # per request

    @property
    def kv_bytes_per_token(self) -> int:
        """All attention layers, one token: what grows with context."""
        return self.attention_bytes_per_token_per_layer * self.attention_layers

    @property
    def mamba_state_bytes(self) -> int:
        """One Mamba layer's state for one sequence, before padding."""
        return self.conv_state_bytes + self.ssm_state_bytes

    @property
    def mamba_padding_pct(self) -> float:
        return 100 * (self.page_bytes - self.mamba_state_bytes) / self.mamba_state_bytes if self.mamba_layers else 0.0

    @property
    def bytes_per_block(self) -> int:
        return self.group_size * self.page_bytes

    def blocks_per_request(self, max_model_len: int) -> int:
        return (self.attention_groups * _cdiv(max_model_len, self.block_size)
                + self.mamba_groups * self.mamba_blocks_per_group)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(kv_bytes_per_token=self.kv_bytes_per_token, mamba_state_bytes=self.mamba_state_bytes,
                 mamba_padding_pct=round(self.mamba_padding_pct, 2), bytes_per_block=self.bytes_per_block)
        return d


def _state_bytes(dtype: str, what: str) -> int:
    if dtype not in STATE_DTYPE_BYTES:
        raise PlannerError(f"The planner does not know the size of a {what} of dtype {dtype!r}.",
                           hint="Use bfloat16, float16 or float32.")
    return STATE_DTYPE_BYTES[dtype]


def cache_layout(arch: Architecture, *, platform: str, kv_dtype: str, conv_dtype: str, ssm_dtype: str,
                 mamba_mode: MambaMode, num_speculative_tokens: int = 0, tensor_parallel_size: int = 1,
                 block_size: int | None = None, release: VllmRelease | None = None) -> CacheLayout:
    """The cache layout vLLM builds (`release`: 0.32.0 unless given). `kv_dtype`, `conv_dtype`,
    `ssm_dtype` are resolved (no `auto`): the caller applies vLLM's defaults."""
    release = release or vllm_release()
    if kv_dtype not in KV_DTYPE_BYTES:
        raise PlannerError(f"The planner does not model --kv-cache-dtype {kv_dtype}.",
                           hint="It models auto, bfloat16, float16 and the fp8 formats.")
    if arch.attention_layers == 0:
        raise PlannerError("This model has no attention layers; the planner models attention and hybrid models.")
    tp = tensor_parallel_size
    kv_heads = max(1, arch.num_kv_heads // tp)
    attn_1tok = kv_heads * 2 * arch.head_dim * KV_DTYPE_BYTES[kv_dtype]
    block, kernel_align, backend_align = kernel_alignment(platform, block_size)
    conv = ssm = 0
    mamba_blocks = 0
    if arch.mamba_layers:
        m = arch.mamba
        assert m is not None
        groups = m.n_groups + (0 if m.n_groups % tp == 0 else tp - m.n_groups)
        conv_dim = m.intermediate_size + 2 * groups * m.state_size
        conv = (conv_dim // tp) * (m.conv_kernel - 1 + num_speculative_tokens) * _state_bytes(conv_dtype, "conv state")
        ssm = (m.num_heads // tp) * m.head_dim * m.state_size * _state_bytes(ssm_dtype, "SSM state")
        aligned = kernel_align * _cdiv(conv + ssm, kernel_align * attn_1tok)
        aligned = backend_align * _cdiv(aligned, backend_align)
        block = max(block, aligned)
        # Align mode keeps two states (and, from 0.32.0, a prefill checkpoint block) per request.
        mamba_blocks = (release.mamba_align_blocks if mamba_mode == "align" else 1) + num_speculative_tokens
    buckets = [n for n in (arch.attention_layers, arch.mamba_layers) if n]
    group_size = min(buckets)
    if max(buckets) < group_size * 1.5:
        group_size = max(buckets)
    padding = sum(-n % group_size for n in buckets)
    return CacheLayout(
        kv_dtype=kv_dtype,
        attention_bytes_per_token_per_layer=attn_1tok,
        attention_layers=arch.attention_layers,
        mamba_layers=arch.mamba_layers,
        conv_state_bytes=conv,
        ssm_state_bytes=ssm,
        block_size=block,
        page_bytes=block * attn_1tok,
        group_size=group_size,
        attention_groups=_cdiv(arch.attention_layers, group_size),
        mamba_groups=_cdiv(arch.mamba_layers, group_size) if arch.mamba_layers else 0,
        padding_layers=padding,
        mamba_mode=mamba_mode,
        mamba_blocks_per_group=mamba_blocks,
    )


@dataclass(frozen=True)
class Capacity:
    """What vLLM logs as "KV cache size: N tokens, Maximum concurrency for L tokens per request: Cx"."""

    max_model_len: int
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int
    fits_one_request: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def capacity(layout: CacheLayout, available_bytes: int, max_model_len: int,
             num_blocks_override: int | None = None) -> Capacity:
    num_blocks = max(0, available_bytes) // layout.bytes_per_block
    if num_blocks_override is not None:
        num_blocks = num_blocks_override
    per_request = layout.blocks_per_request(max_model_len)
    concurrency = num_blocks / per_request
    # vLLM's start-up check keeps the pool's null block out (kv_cache_utils.py, check_memory).
    fits = available_bytes - layout.bytes_per_block >= per_request * layout.bytes_per_block
    return Capacity(max_model_len, num_blocks, per_request, concurrency, int(concurrency * max_model_len), fits)


def longest_context(layout: CacheLayout, num_blocks: int, sequences: int, limit: int) -> int:
    """The longest max_model_len (a whole number of blocks, at most `limit`) at which
    `sequences` full-length requests fit the pool; 0 when not even one block does."""
    spare = num_blocks / max(1, sequences) - layout.mamba_groups * layout.mamba_blocks_per_group
    attention_blocks = int(spare // layout.attention_groups) if spare > 0 else 0
    return min(limit, attention_blocks * layout.block_size)

