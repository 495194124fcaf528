"""A rehearsal: the recipe's exact command, served on any GPU with a tiny local stand-in model.

`rehearse(argv, env, facts, generation)` keeps every flag of a rendered Nemotron command
except the ones that cannot run without the real checkpoint or that need a kernel the
machine lacks, and says why for each (`Swap`). The checkpoint itself is swapped by the
plan (`local_build`): the launcher serves the built stand-in under the recipe's model id.

What decides a swap is data about the serving machine (`MachineFacts`: the optional
packages it has, the flags its vLLM knows), gathered by the caller
(workbench.server.machine.machine_facts), so this stays pure: the same argv and facts
give the same command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from workbench.recipes.argv import canonical_flag, units

__all__ = ["REHEARSAL_BUILD", "REHEARSAL_LAYER", "MachineFacts", "Swap", "rehearse"]

REHEARSAL_BUILD = "nemotron-h-rehearsal"
REHEARSAL_LAYER = "rehearsal"
STOCHASTIC_ROUNDING_ISSUE = "stochastic-rounding-triton-needs-sm100"

# GPUs with cvt.rs (the Triton stochastic-rounding path): the sm_100 family. GB10 and the RTX Pro
# 6000 are sm_12x and lack it, though the taxonomy files them under Blackwell.
_CVT_RS_HARDWARE = frozenset({"b200", "gb200", "b300", "gb300", "dgx_station_gb300"})
_CHECKPOINT = "the rehearsal checkpoint is an unquantized BF16 stand-in with random weights"


@dataclass(frozen=True)
class MachineFacts:
    """What the machine that serves a rehearsal has.

    `packages`: optional packages importable there (flashinfer, fastokens, fastsafetensors,
    instanttensor); `vllm_flags`: the canonical flags its `vllm serve` accepts (None: unknown,
    so no flag is dropped for that reason)."""

    vllm_version: str | None = None
    vllm_flags: tuple[str, ...] | None = None
    packages: tuple[str, ...] = ()

    def has(self, package: str) -> bool:
        return package in self.packages

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Swap:
    """One change a rehearsal made: `flag` (or environment variable) from `was` to `now`
    (None: removed), and why."""

    flag: str
    was: str | None
    now: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        what = f"{self.flag} {self.was}".strip() if self.was else self.flag
        if self.now is None:
            return f"removed {what}: {self.reason}"
        return f"{what} -> {self.now}: {self.reason}"


Rule = Callable[[str, str | None, MachineFacts], str | None]


def _spec_reason(value: str | None) -> str | None:
    try:
        config = json.loads(value or "{}")
    except ValueError:
        return "its speculative-decoding configuration is not JSON the rehearsal can read"
    if not isinstance(config, dict):
        return None
    if config.get("model"):
        return f"the draft checkpoint {config['model']} is not on this machine ({_CHECKPOINT})"
    if str(config.get("method", "")).lower() in ("mtp", "nemotron_h_mtp"):
        return f"MTP drafts with the checkpoint's own MTP layers, and {_CHECKPOINT} without them"
    return None


def _checkpoint_reason(flag: str, value: str | None, facts: MachineFacts) -> str | None:
    """Flags that only make sense with the real NVFP4 checkpoint (or its draft checkpoints)."""
    v = (value or "").lower()
    if flag == "--quantization":
        return f"{value} quantization needs the NVFP4 checkpoint; {_CHECKPOINT}"
    if flag in ("--moe-backend", "--linear-backend") and v in ("humming", "marlin", "cutlass"):
        return f"the {value} kernels serve quantized (NVFP4 / W4A16) weights; {_CHECKPOINT}, so vLLM picks its BF16 kernel"
    if flag == "--speculative-config":
        return _spec_reason(value)
    if flag.startswith("--speculative-config."):
        return f"part of the speculative-decoding configuration, which needs the real checkpoint's drafter"
    return None


def _kernel_reason(flag: str, value: str | None, facts: MachineFacts) -> str | None:
    """Flags that need a package this machine lacks."""
    v = (value or "").lower()
    no_flashinfer = not facts.has("flashinfer")
    if no_flashinfer and flag in ("--mamba-backend", "--attention-backend") and v == "flashinfer":
        return "FlashInfer is not installed here, so vLLM uses its Triton kernels"
    if no_flashinfer and flag == "--moe-backend" and v.startswith("flashinfer"):
        return "FlashInfer is not installed here, so vLLM picks its Triton MoE kernel"
    if no_flashinfer and flag == "--enable-flashinfer-autotune":
        return "FlashInfer is not installed here"
    if no_flashinfer and flag == "--attention-config" and "trtllm" in v:
        return "TensorRT-LLM attention comes through FlashInfer, which is not installed here"
    if flag == "--load-format" and v in ("fastsafetensors", "instanttensor") and not facts.has(v):
        return f"{value} is not installed here; vLLM's default loader reads the small checkpoint as fast"
    return None


def _vllm_reason(flag: str, value: str | None, facts: MachineFacts) -> str | None:
    if facts.vllm_flags is None:
        return None
    base = flag.split(".", 1)[0]
    if base in facts.vllm_flags or (base.startswith("--no-") and "--" + base[5:] in facts.vllm_flags):
        return None
    version = f"vLLM {facts.vllm_version}" if facts.vllm_version else "the installed vLLM"
    return f"{version} does not know this flag (the recipe asks for a newer vLLM)"


_RULES: Sequence[Rule] = (_checkpoint_reason, _kernel_reason, _vllm_reason)


def _fast_ssm_cache_swaps(kept: Mapping[str, str | None], hardware: str, generation: str) -> dict[str, str]:
    """The recipe's fast SSM cache where the known problem makes its failure certain: stochastic
    rounding on the Triton Mamba backend, on a GPU without cvt.rs."""
    if "--enable-mamba-cache-stochastic-rounding" not in kept or hardware in _CVT_RS_HARDWARE:
        return {}
    if (kept.get("--mamba-backend") or "").lower() == "flashinfer" or generation == "cpu":
        return {}
    why = (f"known problem {STOCHASTIC_ROUNDING_ISSUE}: the Triton Mamba kernel's stochastic rounding needs "
           "cvt.rs (sm_100 Blackwell), so the SSM cache stays at vLLM's float32 default")
    return {f: why for f in ("--mamba-ssm-cache-dtype", "--enable-mamba-cache-stochastic-rounding",
                             "--mamba-cache-philox-rounds") if f in kept}


def rehearse(argv: Sequence[str], env: Mapping[str, str], facts: MachineFacts, *, hardware: str,
             generation: str, head_length: int = 3, ignore_known_issues: Collection[str] = (),
             ) -> tuple[list[str], dict[str, str], list[Swap]]:
    """The rehearsal's argv and environment, and the swaps that made them from `argv` and `env`.

    `hardware` / `generation` are the plan's (the GPU the rehearsal runs on); a known problem
    named in `ignore_known_issues` keeps the flags that would meet it (to see it happen)."""
    head, rest = list(argv[:head_length]), units(argv[head_length:])
    swaps: list[Swap] = []
    kept_units = []
    for u in rest:
        if u.flag is None:
            kept_units.append(u)
            continue
        name = canonical_flag(u.flag.partition("=")[0])
        value = u.flag.partition("=")[2] if "=" in u.flag else u.value
        reason = next((why for rule in _RULES if (why := rule(name, value, facts))), None)
        if reason:
            swaps.append(Swap(u.flag, value, None, reason))
        else:
            kept_units.append(u)
    kept = {canonical_flag((u.flag or "").partition("=")[0]): u.value for u in kept_units if u.flag}
    ssm = {} if STOCHASTIC_ROUNDING_ISSUE in ignore_known_issues else _fast_ssm_cache_swaps(kept, hardware, generation)
    out_units = []
    for u in kept_units:
        name = canonical_flag((u.flag or "").partition("=")[0])
        if u.flag and name in ssm:
            swaps.append(Swap(u.flag, u.value, None, ssm[name]))
        else:
            out_units.append(u)
    out_env = dict(env)
    if out_env.get("VLLM_USE_FASTOKENS") == "1" and not facts.has("fastokens"):
        swaps.append(Swap("VLLM_USE_FASTOKENS", out_env.pop("VLLM_USE_FASTOKENS"), None,
                          "fastokens is not installed here; the stand-in's tokenizer loads without it"))
    return head + [t for u in out_units for t in u.tokens()], out_env, swaps
