"""Architecture figures the planner has before anything is downloaded or built.

Two sources, each used only when no config.json is at hand (a given path, the local
build, the Hugging Face cache: those always win, see planner/config.py):

* shipped_architectures.yaml (this package): the public config of each recipe model,
  or, where a model's own is not public, of the nearest published architecture,
  labelled as such;
* a local build not yet built: the config.json it will write, read from what it is
  built from (workbench.demo.build_config: the SmolLM2 demo's GGUF).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workbench.demo.build_config import planned_build_config

__all__ = ["SHIPPED_FILE", "StandIn", "before_build", "shipped_architecture"]

SHIPPED_FILE = Path(__file__).with_name("shipped_architectures.yaml")


@dataclass(frozen=True)
class StandIn:
    """Architecture figures standing in for a config.json not at hand: where they are from
    (said to the user) and, when they are not the model's own, why (a note on the plan)."""

    data: dict[str, Any]
    source: str
    note: str = ""


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, Any]:
    data = yaml.safe_load(SHIPPED_FILE.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def shipped_architecture(model_id: str) -> StandIn | None:
    """The shipped figures for `model_id`, or None when the workbench ships none."""
    entry = (_shipped().get("models") or {}).get(model_id)
    if not entry:
        return None
    arch = _shipped()["architectures"][entry["architecture"]]
    get_it = f"`hf download {model_id} config.json` puts its own in the Hugging Face cache, which the planner prefers"
    if entry.get("exact"):
        return StandIn(dict(arch["config"]), f"the workbench's copy of {arch['title']}'s public config.json "
                       f"({arch['sources'][0]})")
    return StandIn(dict(arch["config"]),
                   f"the nearest published architecture, {arch['title']}'s public config (shipped with the workbench)",
                   f"Planned with {arch['title']}'s architecture, not {model_id}'s own: {entry['why'].strip()}. "
                   f"{get_it}.")


def before_build(model_id: str, local_dir: Path) -> StandIn | None:
    """The figures of a local build that does not exist yet, from what it is built from."""
    planned = planned_build_config(local_dir.name)
    if planned is None:
        return None
    config, origin = planned
    return StandIn(config, f"{origin}, the file the first launch builds {model_id} from (not built yet)")
