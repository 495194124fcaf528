"""The recipe catalog as data: hardware profiles, strategies, presets, recipes.

No I/O here (loading is `workbench.recipes.loading`); a `Recipe` keeps its YAML as
loaded, in the vllm-project/recipes schema plus the workbench's additive keys.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from workbench.errors import SelectionError

RECIPES_DIR_ENV = "WORKBENCH_RECIPES_DIR"
DEFAULT_RECIPE = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16"

Engine = Literal["vllm", "trtllm"]


def default_recipes_dir() -> Path:
    """`$WORKBENCH_RECIPES_DIR`, else the repository's `recipes/`."""
    env = os.environ.get(RECIPES_DIR_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "recipes"


@dataclass(frozen=True)
class HardwareProfile:
    id: str
    display_name: str
    brand: str
    generation: str
    gpu_count: int
    vram_gb: float
    description: str = ""
    scalable: bool = True
    restricted: bool = False

    @property
    def per_gpu_vram_gb(self) -> float:
        return self.vram_gb / self.gpu_count if self.gpu_count else 0.0

    @property
    def is_cpu(self) -> bool:
        return self.generation == "cpu"


@dataclass(frozen=True)
class Strategy:
    name: str
    deploy_type: str
    display_name: str
    description: str
    vllm_args: tuple[str, ...]
    parallel_flag: str
    env: Mapping[str, str]
    min_gpus: int = 1
    architecture: str | None = None
    parallelism: str | None = None  # upstream's layout key: "tp_dp", "tp_pp" (multi-node only)

    @property
    def multi_node(self) -> bool:
        return self.deploy_type == "multi_node"


@dataclass(frozen=True)
class Preset:
    """One verbatim command (from the model card), pickable by name."""

    name: str
    description: str
    command: tuple[str, ...]
    engine: Engine = "vllm"
    variant: str | None = None
    strategy: str | None = None
    hardware: tuple[str, ...] = ()
    docker_image: str | None = None
    config_files: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Recipe:
    """A recipe file: `data` is the YAML as loaded (upstream schema + additions)."""

    id: str
    path: Path
    data: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        return self.data.get("meta") or {}

    @property
    def model(self) -> dict[str, Any]:
        return self.data.get("model") or {}

    @property
    def title(self) -> str:
        return str(self.meta.get("title") or self.id)

    @property
    def description(self) -> str:
        return str(self.meta.get("description") or "")

    @property
    def variants(self) -> dict[str, dict[str, Any]]:
        return self.data.get("variants") or {}

    @property
    def default_variant(self) -> str:
        return "default" if "default" in self.variants else next(iter(self.variants))

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.data.get("features") or {}

    @property
    def opt_in_features(self) -> list[str]:
        return list(self.data.get("opt_in_features") or [])

    @property
    def default_features(self) -> list[str]:
        """All features that are not opt-in, in the recipe's order."""
        return [f for f in self.features if f not in self.opt_in_features]

    @property
    def compatible_strategies(self) -> list[str]:
        return list(self.data.get("compatible_strategies") or ["single_node_tp"])

    @property
    def workbench(self) -> dict[str, Any]:
        return self.data.get("workbench") or {}

    @property
    def local_build(self) -> str | None:
        return self.model.get("workbench_local_build")

    @property
    def rehearsal_build(self) -> str | None:
        """The local stand-in checkpoint a rehearsal serves (`workbench.rehearsal.build`), if any."""
        build = (self.workbench.get("rehearsal") or {}).get("build")
        return str(build) if build else None

    @property
    def presets(self) -> dict[str, Preset]:
        out = {}
        for name, p in (self.workbench.get("presets") or {}).items():
            out[name] = Preset(
                name=name,
                description=str(p.get("description", "")),
                command=tuple(str(t) for t in p["command"]),
                engine=p.get("engine", "vllm"),
                variant=p.get("variant"),
                strategy=p.get("strategy"),
                hardware=tuple(p.get("hardware") or ()),
                docker_image=p.get("docker_image"),
                config_files=dict(p.get("config_files") or {}),
            )
        return out

    @property
    def spec_modes(self) -> dict[str, dict[str, Any]]:
        return (self.features.get("spec_decoding") or {}).get("modes") or {}

    @property
    def engine_note(self) -> str | None:
        """What the engine serving this recipe is on the CPU, when it is not the model's own (the CPU demo)."""
        return self.engine_note_for("cpu", "cpu", "cpu")

    def engine_note_for(self, hardware_id: str, generation: str, brand: str) -> str | None:
        """The engine note for one hardware: `workbench.engine_note` is one text, or texts keyed by
        exact hardware id > generation > brand (lowercase) > default."""
        note = self.workbench.get("engine_note")
        if isinstance(note, dict):
            note = next((note[k] for k in (hardware_id, generation, brand.lower(), "default") if k in note), None)
        return str(note) if note else None

    def flag_help(self, flag: str) -> str | None:
        return (self.workbench.get("flags") or {}).get(flag)

    def hardware_note(self, hw: str) -> str | None:
        return (self.workbench.get("hardware_notes") or {}).get(hw)


@dataclass
class Catalog:
    root: Path
    recipes: dict[str, Recipe]
    hardware: dict[str, HardwareProfile]
    strategies: dict[str, Strategy]

    def default_recipe_id(self) -> str:
        return DEFAULT_RECIPE if DEFAULT_RECIPE in self.recipes else next(iter(self.recipes))

    def recipe(self, name: str) -> Recipe:
        """Find a recipe by id, file name, slug, or a unique part of its id."""
        if not isinstance(name, str) or not name.strip():
            raise SelectionError(f"No recipe named {name!r}.", hint="Recipes: " + ", ".join(sorted(self.recipes)))
        if name in self.recipes:
            return self.recipes[name]
        low = name.lower()
        aliases: dict[str, str] = {}
        for rid, r in self.recipes.items():
            aliases[rid.lower()] = rid
            aliases[rid.split("/")[-1].lower()] = rid
            if r.meta.get("slug"):
                aliases[str(r.meta["slug"]).lower()] = rid
        if low in aliases:
            return self.recipes[aliases[low]]
        hits = sorted({rid for rid in self.recipes if low in rid.lower()})
        if len(hits) == 1:
            return self.recipes[hits[0]]
        valid = sorted(self.recipes)
        if hits:
            raise SelectionError(
                f"recipe {name!r} matches several recipes: {', '.join(hits)}",
                hint="Name one of them in full.",
            )
        close = difflib.get_close_matches(low, list(aliases), n=1, cutoff=0.6)
        guess = f"; did you mean {aliases[close[0]]!r}?" if close else ""
        raise SelectionError(
            f"unknown recipe {name!r}{guess}", hint="valid recipes: " + ", ".join(valid)
        )

