"""Where vLLM releases differ in what the planner redoes.

The planner's arithmetic is read from vLLM 0.32.0's source (the CPU engine's release,
checked against its servers by tests/test_planner_live.py). The CUDA vLLM that runs on
the project's lent GPU machines is 0.26.0 (its wheel pins the machines' torch); its
logs are kept in tests/fixtures/vllm-0.26.0-cuda-h100/ and its source was read for the
two differences below:

- Mamba-2 blocks per request in `align` mode: 0.32.0 adds a prefill checkpoint block
  (MambaMixer2.get_kv_cache_spec sets num_prefill_checkpoint_blocks=1; MambaSpec
  counts 2 + spec + checkpoint), 0.26.0 has none (2 + spec). The recorded tiny
  Nemotron-H's "GPU KV cache size" line holds only with 2.
- Batch defaults of the API server: 0.32.0 gives GPUs of 160 GiB or more 16384 batched
  tokens (EngineArgs.get_batch_defaults); 0.26.0 gives every GPU of 70 GiB or more 8192.

Releases between the two were not read: they are taken as 0.26.0, and said to be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workbench.errors import PlannerError

__all__ = ["REFERENCE_VLLM_VERSION", "VllmRelease", "vllm_release"]

REFERENCE_VLLM_VERSION = "0.32.0"
_CHECKPOINT_SINCE = (0, 32, 0)
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class VllmRelease:
    """The facts of one vLLM release that the planner's arithmetic depends on."""

    version: str
    mamba2_prefill_checkpoint_blocks: int  # per Mamba group and request, in align mode
    large_gpu_batch_tier: bool  # 16384 default batched tokens at >= 160 GiB
    basis: str  # how the planner knows: read, or assumed from the nearest read release

    @property
    def mamba_align_blocks(self) -> int:
        """Blocks one request holds per Mamba group in align mode, before speculative ones."""
        return 2 + self.mamba2_prefill_checkpoint_blocks


def _parse(version: str) -> tuple[int, int, int]:
    m = _VERSION.match(version.strip())
    if not m:
        raise PlannerError(f"{version!r} is not a vLLM version the planner can read.",
                           hint="Give it as MAJOR.MINOR.PATCH, for example 0.26.0.")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def vllm_release(version: str | None = None) -> VllmRelease:
    """The release facts for `version` (vLLM's own version string; None: the reference 0.32.0)."""
    version = version or REFERENCE_VLLM_VERSION
    parsed = _parse(version)
    if parsed >= _CHECKPOINT_SINCE:
        basis = ("read in vLLM 0.32.0's source" if parsed == _CHECKPOINT_SINCE
                 else "taken as vLLM 0.32.0 (the newest release the planner was checked against)")
        return VllmRelease(version, 1, True, basis)
    if parsed == (0, 26, 0):
        basis = "read in vLLM 0.26.0's source and checked against its recorded logs"
    elif parsed > (0, 26, 0):
        basis = "taken as vLLM 0.26.0 (releases between 0.26.0 and 0.32.0 were not read)"
    else:
        basis = "taken as vLLM 0.26.0 (the oldest release the planner was checked against)"
    return VllmRelease(version, 0, False, basis)
