"""Load and validate the recipe files: taxonomy, strategies and models.

Validation collects every problem of a file with its dotted key and raises them
together in one RecipeError, so a recipe author fixes them in one pass.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from workbench.errors import RecipeError
from workbench.recipes.catalog import (
    RECIPES_DIR_ENV,
    Catalog,
    HardwareProfile,
    Recipe,
    Strategy,
    default_recipes_dir,
)
from workbench.recipes.known_issues import NUMERIC_TESTS, OTHER_THAN, PLANNER_CHECKS

__all__ = ["load_catalog", "load_recipe"]


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


def _validate_recipe(p: _Problems, data: Any) -> None:
    if not isinstance(data, dict):
        p.add("(top level)", "a mapping with meta, model, variants", data)
        return
    _validate_meta_and_model(p, data)
    variants = data.get("variants")
    if not isinstance(variants, dict) or not variants:
        p.add("variants", "a non-empty mapping of variant name -> variant", variants)
        variants = {}
    for name, v in variants.items():
        _validate_variant(p, f"variants.{name}", v)
    features = data.get("features")
    if features is not None and not isinstance(features, dict):
        p.add("features", "a mapping of feature name -> feature", features)
        features = {}
    for name, f in (features or {}).items():
        _validate_feature(p, f"features.{name}", f)
    _validate_opt_in(p, data.get("opt_in_features"), features or {})
    # Upstream has more strategies (pd_cluster, dep, ...) than the workbench
    # renders; unknown names are offered nowhere rather than rejected.
    cs = data.get("compatible_strategies")
    if cs is not None and not _is_str_list(cs):
        p.add("compatible_strategies", "a list of strategy names", cs)
    _check_overrides(p, data.get("hardware_overrides"), "hardware_overrides")
    _validate_strategy_overrides(p, data.get("strategy_overrides"))
    _validate_dependencies(p, data.get("dependencies"))
    _validate_workbench(p, data.get("workbench"), variants)


def _validate_meta_and_model(p: _Problems, data: Mapping[str, Any]) -> None:
    meta = data.get("meta")
    if not isinstance(meta, dict):
        p.add("meta", "a mapping with at least title", meta)
    elif not isinstance(meta.get("title"), str):
        p.add("meta.title", "a string", meta.get("title"))
    model = data.get("model")
    if not isinstance(model, dict):
        p.add("model", "a mapping with model_id", model)
        return
    if not isinstance(model.get("model_id"), str):
        p.add("model.model_id", "a Hugging Face id string", model.get("model_id"))
    _check_args(p, model, "model", ("base_args",))
    _check_env(p, model, "model", ("base_env",))
    for k in ("min_vllm_version", "workbench_local_build"):
        if k in model and not isinstance(model[k], str):
            p.add(f"model.{k}", "a string", model[k])


def _validate_variant(p: _Problems, base: str, v: Any) -> None:
    if not isinstance(v, dict):
        p.add(base, "a mapping", v)
        return
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


def _validate_feature(p: _Problems, base: str, f: Any) -> None:
    if not isinstance(f, dict):
        p.add(base, "a mapping with description and args (or modes)", f)
        return
    _check_args(p, f, base, ("args",))
    _check_env(p, f, base, ("env",))
    _check_overrides(p, f.get("hardware_overrides"), f"{base}.hardware_overrides")
    with_features = f.get("with_features")
    if with_features is not None and not (isinstance(with_features, dict)
                                          and all(_is_str_list(a) for a in with_features.values())):
        p.add(f"{base}.with_features", "a mapping of other feature -> args added when both are on", with_features)
    modes = f.get("modes")
    if modes is None:
        return
    if not isinstance(modes, dict) or not modes:
        p.add(f"{base}.modes", "a non-empty mapping of mode -> args", modes)
        return
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


def _validate_opt_in(p: _Problems, opt_in: Any, features: Mapping[str, Any]) -> None:
    if opt_in is None:
        return
    if not _is_str_list(opt_in):
        p.add("opt_in_features", "a list of feature names", opt_in)
        return
    for i, f in enumerate(opt_in):
        if f not in features:
            p.add(f"opt_in_features[{i}]", "a feature defined under features", f)


def _validate_strategy_overrides(p: _Problems, so: Any) -> None:
    if so is None:
        return
    if not isinstance(so, dict):
        p.add("strategy_overrides", "a mapping of strategy -> overrides", so)
        return
    for s, ov in so.items():
        if not isinstance(ov, dict):
            p.add(f"strategy_overrides.{s}", "a mapping", ov)
            continue
        _check_args(p, ov, f"strategy_overrides.{s}", ("extra_args", "vllm_args"))
        _check_env(p, ov, f"strategy_overrides.{s}", ("env", "extra_env"))
        _check_overrides(p, ov.get("hardware_overrides"), f"strategy_overrides.{s}.hardware_overrides")


def _validate_dependencies(p: _Problems, deps: Any) -> None:
    if deps is None:
        return
    if not isinstance(deps, list):
        p.add("dependencies", "a list of {command, note}", deps)
        return
    for i, d in enumerate(deps):
        if not isinstance(d, dict) or not isinstance(d.get("command"), str):
            p.add(f"dependencies[{i}].command", "a string", d.get("command") if isinstance(d, dict) else d)


def _validate_workbench(p: _Problems, wb: Any, variants: Mapping[str, Any]) -> None:
    if wb is None:
        return
    if not isinstance(wb, dict):
        p.add("workbench", "a mapping (presets, flags, hardware_notes)", wb)
        return
    presets = wb.get("presets") or {}
    if not isinstance(presets, dict):
        p.add("workbench.presets", "a mapping of preset name -> preset", presets)
        presets = {}
    for name, pr in presets.items():
        _validate_preset(p, f"workbench.presets.{name}", pr, variants)
    note = wb.get("engine_note")
    if note is not None and not isinstance(note, str) and not (
            isinstance(note, dict) and all(isinstance(v, str) for v in note.values())):
        p.add("workbench.engine_note", "a string, or strings keyed by hardware id, generation or brand", note)
    for k in ("flags", "hardware_notes", "variables", "env"):
        v = wb.get(k)
        if v is not None and not (
            isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
        ):
            p.add(f"workbench.{k}", "a mapping of name -> text", v)
    rehearsal = wb.get("rehearsal")
    if rehearsal is not None and not (isinstance(rehearsal, dict) and isinstance(rehearsal.get("build"), str)):
        p.add("workbench.rehearsal", "a mapping with build: the name of a local stand-in build", rehearsal)
    _validate_known_issues(p, wb.get("known_issues"))


def _validate_known_issues(p: _Problems, issues: Any) -> None:
    if issues is None:
        return
    if not isinstance(issues, list):
        p.add("workbench.known_issues", "a list of known issues", issues)
        return
    seen: set[str] = set()
    for i, ki in enumerate(issues):
        base = f"workbench.known_issues[{i}]"
        if not isinstance(ki, dict):
            p.add(base, "a mapping with id, title, when, symptom, change, sources", ki)
            continue
        for k in ("id", "title", "symptom", "change"):
            if not isinstance(ki.get(k), str) or not ki[k].strip():
                p.add(f"{base}.{k}", "a non-empty string", ki.get(k))
        if ki.get("id") in seen:
            p.add(f"{base}.id", "an id no other known issue uses", ki.get("id"))
        seen.add(str(ki.get("id")))
        sources = ki.get("sources")
        if not _is_str_list(sources) or not sources or not all(s.startswith("https://") for s in sources):
            p.add(f"{base}.sources", "a non-empty list of public https:// URLs (issue or PR)", sources)
        pattern = ki.get("log_pattern")
        if pattern is not None:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                p.add(f"{base}.log_pattern", f"a regular expression ({exc})", pattern)
        if ki.get("check") is not None and ki["check"] not in PLANNER_CHECKS:
            p.add(f"{base}.check", f"one of {', '.join(PLANNER_CHECKS)}", ki["check"])
        _validate_when(p, f"{base}.when", ki.get("when"))
        if not isinstance(ki.get("certain", False), bool):
            p.add(f"{base}.certain", "true or false", ki.get("certain"))
        _validate_fix(p, f"{base}.fix", ki.get("fix"))


def _validate_fix(p: _Problems, base: str, fix: Any) -> None:
    if fix is None:
        return
    if not isinstance(fix, dict) or not fix or any(k not in ("set", "drop") for k in fix):
        p.add(base, "a mapping of set (flag -> value, true for a switch) and drop (a list of flags)", fix)
        return
    to_set = fix.get("set") or {}
    if not isinstance(to_set, dict) or not all(
            str(flag).startswith("--") and (value is True or (isinstance(value, (str, int, float))
                                                              and not isinstance(value, bool)))
            for flag, value in to_set.items()):
        p.add(f"{base}.set", "a mapping of --flag -> value (true for a switch)", to_set)
    drop = fix.get("drop") or []
    if not _is_str_list(drop) or not all(flag.startswith("--") for flag in drop):
        p.add(f"{base}.drop", "a list of --flags", drop)


def _validate_when(p: _Problems, base: str, when: Any) -> None:
    if when is None:
        return
    if not isinstance(when, dict):
        p.add(base, "a mapping of hardware, flags, images, vllm", when)
        return
    for k in when:
        if k not in ("hardware", "flags", "images", "vllm"):
            p.add(f"{base}.{k}", "one of hardware, flags, images, vllm", k)
    for k in ("hardware", "images"):
        if k in when and not _is_str_list(when[k]):
            p.add(f"{base}.{k}", "a list of strings", when[k])
    if "vllm" in when:
        try:
            SpecifierSet(str(when["vllm"]))
        except InvalidSpecifier:
            p.add(f"{base}.vllm", "a version specifier such as \">=0.28,<0.30\"", when["vllm"])
    flags = when.get("flags")
    if flags is None:
        return
    if not isinstance(flags, dict):
        p.add(f"{base}.flags", "a mapping of flag -> condition", flags)
        return
    for flag, cond in flags.items():
        fb = f"{base}.flags.{flag}"
        if not str(flag).startswith("--"):
            p.add(fb, "a flag name starting with --", flag)
        if isinstance(cond, str):
            try:
                re.compile(cond)
            except re.error as exc:
                p.add(fb, f"a regular expression ({exc})", cond)
        elif isinstance(cond, dict) and OTHER_THAN in cond:
            if set(cond) != {OTHER_THAN} or not isinstance(cond[OTHER_THAN], str):
                p.add(fb, f"{{{OTHER_THAN}: a regular expression}} and nothing else", cond)
        elif isinstance(cond, dict):
            tests = [k for k in cond if k in NUMERIC_TESTS]
            if not tests or any(k not in (*NUMERIC_TESTS, "default") for k in cond) or not all(
                    isinstance(cond[k], (int, float)) for k in tests):
                p.add(fb, f"a mapping of {'/'.join(NUMERIC_TESTS)}: number (and default)", cond)
        elif not isinstance(cond, bool):
            p.add(fb, "true, false, a regular expression or a numeric test", cond)


def _validate_preset(p: _Problems, base: str, pr: Any, variants: Mapping[str, Any]) -> None:
    if not isinstance(pr, dict):
        p.add(base, "a mapping with description and command", pr)
        return
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


def text_line_of(path: Path, offset: int) -> int:
    """The 1-based line holding byte `offset` of a file."""
    return path.read_bytes()[:offset].count(b"\n") + 1


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        line = text_line_of(path, exc.start)
        raise RecipeError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line})",
                          hint="Save the file as UTF-8.") from exc
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
        return {}  # not reached: the problem above raised
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
    if data.get("parallelism") is not None and data["parallelism"] not in ("tp_dp", "tp_pp"):
        p.add("parallelism", "tp_dp or tp_pp (upstream's multi-node layouts)", data["parallelism"])
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
        parallelism=data.get("parallelism"),
    )


def load_recipe(path: Path, root: Path) -> Recipe:
    """Load and validate one recipe file; its id is its path under models/."""
    data = _read_yaml(path)
    p = _Problems(path)
    _validate_recipe(p, data)
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
            r = load_recipe(rp, root)
            recipes[r.id] = r
        except RecipeError as exc:
            errors.append(exc.message)
    if errors:
        raise RecipeError("\n".join(errors), hint="Fix the recipe files named above.")
    if not recipes:
        raise RecipeError(f"no recipes under {root / 'models'}")
    return Catalog(root=root, recipes=recipes, hardware=hardware, strategies=strategies)

