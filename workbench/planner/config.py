"""Reading a checkpoint's config.json for the planner: a given path, else the local
build the launcher serves, else the Hugging Face cache, else the Hub.

Before anything is downloaded or built, figures stand in (planner/shipped.py): a
local build's from what it is built from, a recipe model's shipped with the workbench
(the nearest published architecture where the model's own is not public, said so).
They are never cached here, so the real config.json wins as soon as it exists.

Offline (HF_HUB_OFFLINE=1, or no route to the Hub) with nothing cached, it raises
PlannerError saying which file it needs and how to get it. The safetensors index
(`model.safetensors.index.json`) is read the same way when it is at hand; it is
optional (weights are then counted from the config).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from workbench.errors import PlannerError
from workbench.planner.shipped import StandIn, before_build, shipped_architecture

__all__ = ["CONFIG_FILE", "INDEX_FILE", "ModelConfigFile", "clear_cache", "read_model_config"]

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
_OFFLINE_VALUES = ("1", "true", "yes", "on")
# huggingface_hub retries an unreachable Hub for ~20 s; one quick connection says it first.
_REACH_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ModelConfigFile:
    model_id: str
    data: dict[str, Any]
    source: str  # where it was read from, said to the user
    index_total_size: int | None = None  # bytes of weights per the safetensors index
    note: str = ""  # said beside the plan: e.g. the figures are another model's (a stand-in)


_cache: dict[tuple[str, str | None, str | None], ModelConfigFile] = {}


def clear_cache() -> None:
    _cache.clear()


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _OFFLINE_VALUES


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlannerError(f"Cannot read {path} ({exc.strerror}).",
                           hint="Give the path of the checkpoint's config.json.", settings=("config",)) from exc
    except ValueError as exc:
        raise PlannerError(f"{path} is not valid JSON ({exc}).",
                           hint="Pass the checkpoint's config.json as it was downloaded.") from exc
    if not isinstance(data, dict):
        raise PlannerError(f"{path} is not a config.json (a JSON object).")
    return data


def _index_total(path: Path) -> int | None:
    try:
        total = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("total_size")
    except (OSError, ValueError, AttributeError):
        return None
    return int(total) if isinstance(total, int) else None


def _from_directory(model_id: str, folder: Path, source: str) -> ModelConfigFile:
    return ModelConfigFile(model_id, _read_json(folder / CONFIG_FILE), source,
                           _index_total(folder / INDEX_FILE) if (folder / INDEX_FILE).is_file() else None)


def _from_hub_cache(model_id: str) -> ModelConfigFile | None:
    from huggingface_hub import try_to_load_from_cache  # huggingface_hub: only when its cache is asked

    found = try_to_load_from_cache(model_id, CONFIG_FILE)
    if not isinstance(found, str):
        return None
    index = try_to_load_from_cache(model_id, INDEX_FILE)
    return ModelConfigFile(model_id, _read_json(Path(found)), f"the Hugging Face cache ({found})",
                           _index_total(Path(index)) if isinstance(index, str) else None)


def _hub_reachable() -> bool:
    from huggingface_hub import constants  # huggingface_hub: only when the Hub is asked

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname or "", url.port or 443), timeout=_REACH_TIMEOUT_S):
            return True
    except OSError:
        return False


def _from_hub(model_id: str) -> ModelConfigFile:
    # huggingface_hub (0.25 s): only when the Hub is asked.
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, OfflineModeIsEnabled

    if not _hub_reachable():
        raise PlannerError(f"The planner needs {model_id}'s config.json; it is not in the Hugging Face cache "
                           "and the Hub cannot be reached from here.", hint=_get_it_hint(model_id),
                           settings=("config",))
    try:
        path = hf_hub_download(model_id, CONFIG_FILE)
    except (OSError, HfHubHTTPError, EntryNotFoundError, OfflineModeIsEnabled, ValueError) as exc:
        raise PlannerError(
            f"The planner needs {model_id}'s config.json and could not download it ({type(exc).__name__}).",
            hint=_get_it_hint(model_id), settings=("config",)) from exc
    try:
        index: str | None = hf_hub_download(model_id, INDEX_FILE)
    except (OSError, HfHubHTTPError, EntryNotFoundError, ValueError):
        index = None
    return ModelConfigFile(model_id, _read_json(Path(path)), f"the Hub ({model_id}, downloaded to {path})",
                           _index_total(Path(index)) if index else None)


def _get_it_hint(model_id: str) -> str:
    return (f"Download it where there is network (`hf download {model_id} config.json`) and give its path "
            "(`plan_memory(..., config_path=PATH)`, or the Recipe tab's Planner inputs), "
            "or copy the Hugging Face cache here.")


def _stand_in(model_id: str, figures: StandIn) -> ModelConfigFile:
    return ModelConfigFile(model_id, figures.data, figures.source, note=figures.note)


def read_model_config(model_id: str, *, config_path: str | Path | None = None,
                      local_dir: str | Path | None = None) -> ModelConfigFile:
    """`model_id`'s config.json: from `config_path` (a file or its folder), `local_dir`
    (a local build), the Hugging Face cache, or the Hub (unless HF_HUB_OFFLINE is set)."""
    key = (model_id, str(config_path) if config_path else None, str(local_dir) if local_dir else None)
    if key in _cache:
        return _cache[key]
    if config_path:
        path = Path(config_path).expanduser()
        folder = path if path.is_dir() else path.parent
        if path.is_dir():
            path = path / CONFIG_FILE
        if not path.is_file():
            raise PlannerError(f"The config.json {config_path}: no such file.", hint=_get_it_hint(model_id),
                               settings=("config",))
        found = ModelConfigFile(model_id, _read_json(path), str(path),
                                _index_total(folder / INDEX_FILE) if (folder / INDEX_FILE).is_file() else None)
    elif local_dir and (Path(local_dir) / CONFIG_FILE).is_file():
        found = _from_directory(model_id, Path(local_dir), f"the local build ({local_dir})")
    elif local_dir and (planned := before_build(model_id, Path(local_dir))) is not None:
        return _stand_in(model_id, planned)
    else:
        cached = _from_hub_cache(model_id)
        if cached is not None:
            found = cached
        elif (shipped := shipped_architecture(model_id)) is not None:
            return _stand_in(model_id, shipped)
        elif _offline():
            raise PlannerError(
                f"The planner needs {model_id}'s config.json (layer counts, KV heads, Mamba state sizes); "
                "it is not in the Hugging Face cache and downloads are off (HF_HUB_OFFLINE=1).",
                hint=_get_it_hint(model_id), settings=("config",))
        else:
            found = _from_hub(model_id)
    _cache[key] = found
    return found
