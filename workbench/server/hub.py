"""The Hugging Face cache: where it is, whether a model's weights are complete in it, and a
download with progress (huggingface_hub's own cache scan and snapshot download).

huggingface_hub and tqdm take a quarter of a second to load: modules every command imports
(launch.py) import this one only when a download is due."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from huggingface_hub import scan_cache_dir, snapshot_download
from huggingface_hub.errors import CacheNotFound, HfHubHTTPError, LocalEntryNotFoundError
from tqdm.auto import tqdm

from workbench.errors import LaunchError
from workbench.server.checks import EnvironmentCheck

__all__ = ["WEIGHT_SUFFIXES", "download_weights", "hf_cache_dir", "model_cache_folder", "weights_check"]

log = logging.getLogger("workbench.server")

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"


def model_cache_folder(model_id: str, cache: Path | None = None) -> Path:
    """The folder a model's files have in the cache (models--org--name)."""
    return (cache or hf_cache_dir()) / ("models--" + model_id.replace("/", "--"))


def weights_check(model_id: str, *, cache_dir: Path | None = None) -> EnvironmentCheck:
    """Are the model's weights complete in the Hugging Face cache (every shard its index names)?"""
    cache = cache_dir or hf_cache_dir()
    fix = (f"Download it before the room arrives (the NVFP4 checkpoint is about 18 GB) with the workshop's "
           f"download, which shows progress, or `hf download {model_id}`. vLLM downloads it at the first "
           "launch otherwise, which on a shared workshop network can take most of the session.")
    missing = partial(EnvironmentCheck, "weights in the Hugging Face cache", "missing", fix=fix,
                      settings=("download",))
    try:
        info = scan_cache_dir(cache)
    except CacheNotFound:
        return missing(f"no cache at {cache}")
    repo = next((r for r in info.repos if r.repo_id == model_id and r.repo_type == "model"), None)
    if repo is None:
        return missing(f"{model_id} is not in {cache}")
    best: tuple[int, int, int] = (0, 0, 0)  # (weight files, expected, bytes)
    for revision in repo.revisions:
        names = {f.file_name for f in revision.files}
        weights = [f for f in revision.files if f.file_name.endswith(WEIGHT_SUFFIXES)]
        expected = len(weights)
        index = next((f for f in revision.files if f.file_name.endswith(".safetensors.index.json")), None)
        if index is not None:
            try:
                shards = set(json.loads(Path(index.file_path).read_text()).get("weight_map", {}).values())
            except (OSError, ValueError):
                shards = set()
            expected = len(shards)
            weights = [f for f in weights if f.file_name in shards]
            if not shards <= names:
                expected = max(expected, 1)
        size = sum(f.size_on_disk for f in weights)
        best = max(best, (len(weights), expected, size))
    present, expected, size = best
    if present and present >= expected:
        return EnvironmentCheck("weights in the Hugging Face cache", "ok",
                                f"{model_id}: {present} weight file(s), {size / 1e9:.1f} GB in {cache}")
    return missing(f"{model_id} is only partly in {cache} ({present} of {expected or '?'} weight files)")


def download_weights(model_id: str, *, progress: Callable[[str], None] | None = None,
                     cache_dir: Path | None = None) -> Path:
    """Download the model into the Hugging Face cache with huggingface_hub, reporting progress
    (default: the `workbench.server` logger); a LaunchError says what to do when it cannot
    (offline, no access, no space)."""
    say = progress or log.info

    class Reported(tqdm):  # type: ignore[misc]
        """tqdm that also tells `progress` at each 10 % of the bytes."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("disable", False)
            super().__init__(*args, **kwargs)
            self._told = -1

        def update(self, n: float | None = 1) -> bool | None:
            out: bool | None = super().update(n)
            if self.total and self.unit == "B":
                tenth = int(10 * self.n / self.total)
                if tenth != self._told:
                    self._told = tenth
                    say(f"{model_id}: {self.n / 1e9:.1f} of {self.total / 1e9:.1f} GB")
            return out

    say(f"Downloading {model_id} into {cache_dir or hf_cache_dir()} ...")
    try:
        path = snapshot_download(model_id, cache_dir=cache_dir, tqdm_class=Reported)
    except LocalEntryNotFoundError as exc:
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        raise LaunchError(
            f"Cannot download {model_id}: " + ("downloads are disabled (HF_HUB_OFFLINE=1)." if offline
                                               else "the Hugging Face Hub cannot be reached."),
            hint="Connect this machine to the network (and unset HF_HUB_OFFLINE), or copy the model's "
            f"folder models--{model_id.replace('/', '--')} from a machine that has it into {cache_dir or hf_cache_dir()}.",
        ) from exc
    except HfHubHTTPError as exc:
        raise LaunchError(f"The Hugging Face Hub refused the download of {model_id}: {exc}",
                          hint="Log in with `hf auth login` if the model needs accepting its licence, "
                          "and check the model id.") from exc
    say(f"{model_id} is in the cache: {path}")
    return Path(path)
