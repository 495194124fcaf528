"""Turn a Selection into resolved choices for one recipe and machine.

Each `resolve_*` function takes what the user asked for and returns what will be
used, recording a `Fallback` (with its reason) when a valid choice cannot be
honoured here and raising SelectionError for a name that exists nowhere.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.errors import SelectionError
from workbench.recipes.catalog import Catalog, HardwareProfile, Preset, Recipe, Strategy
from workbench.recipes.multinode import strategy_tensor_parallel
from workbench.recipes.plan import Fallback, Selection

# Precision -> hardware a checkpoint needs, when the variant does not say
# (`precision_hardware`). NVFP4 math is Blackwell-only.
_PRECISION_HARDWARE = {
    "nvfp4": {"brand": "NVIDIA", "generation": "blackwell"},
    "fp4": {"brand": "NVIDIA", "generation": "blackwell"},
}
# What a choice may look like: anything else is a typo, never a fallback.
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def constraint(variant: Mapping[str, Any]) -> dict[str, str] | None:
    return variant.get("precision_hardware") or _PRECISION_HARDWARE.get(str(variant.get("precision", "")))


def precision_ok(hw: HardwareProfile, variant: Mapping[str, Any]) -> bool:
    c = constraint(variant)
    if not c:
        return True
    if c.get("brand") and hw.brand != c["brand"]:
        return False
    if c.get("generation") and hw.generation != c["generation"]:
        return False
    return True


def variant_runs(hw: HardwareProfile, variant: Mapping[str, Any]) -> bool:
    supported = variant.get("supported_hardware")
    if supported and hw.id not in supported:
        return False
    return precision_ok(hw, variant)


def why_variant_not(hw: HardwareProfile, name: str, variant: Mapping[str, Any]) -> str:
    supported = variant.get("supported_hardware")
    if supported and hw.id not in supported:
        return f"variant {name} runs only on {', '.join(supported)}"
    c = constraint(variant) or {}
    need = " ".join(x for x in (c.get("brand"), c.get("generation")) if x)
    return f"variant {name} ({variant.get('precision', '?')}) needs {need} hardware; {hw.id} is {hw.brand} {hw.generation}"


def hardware_supported(recipe: Recipe, hw: HardwareProfile) -> bool:
    if (recipe.meta.get("hardware") or {}).get(hw.id) == "unsupported":
        return False
    return any(variant_runs(hw, v) for v in recipe.variants.values())


def keyed(map_: Any, hw: HardwareProfile) -> Any:
    """Hardware-keyed lookup: exact id > generation > brand (lowercase) > default."""
    if not isinstance(map_, dict):
        return None
    for k in (hw.id, hw.generation, hw.brand.lower(), "default"):
        if k in map_:
            return map_[k]
    return None


def gen_override(node: Any, hw: HardwareProfile) -> dict[str, Any] | None:
    if not isinstance(node, dict):
        return None
    got = node.get(hw.generation)
    if got is None and hw.brand == "NVIDIA":
        got = node.get("nvidia")
    return got


class Resolver:
    """Turns a Selection into resolved choices, recording fallbacks and notes."""

    def __init__(self, catalog: Catalog, sel: Selection) -> None:
        self.c = catalog
        self.sel = sel
        self.fallbacks: list[Fallback] = []
        self.notes: list[str] = []

    def choose(self, kind: str, asked: str, valid: Sequence[str], vocabulary: Sequence[str],
               default: Any, why: str | None = None, listed: Sequence[str] | None = None) -> Any:
        """`asked` if valid; a name nobody knows raises SelectionError (with the valid
        values, or `listed` when more than `valid` works, and a did-you-mean); a known
        one that does not fit falls back to default."""
        if asked in valid:
            return asked
        if asked not in vocabulary:
            close = difflib.get_close_matches(asked, list(vocabulary), n=3, cutoff=0.6)
            guess = f"; did you mean {close[0]!r}?" if close else ""
            raise SelectionError(
                f"unknown {kind} {asked!r}{guess}",
                hint=f"valid {kind} values: {', '.join(listed if listed is not None else valid) or '(none)'}",
            )
        self.fallbacks.append(Fallback(kind, asked, default, why or f"{asked!r} is not available here"))
        return default


def default_hardware(catalog: Catalog, recipe: Recipe) -> str:
    ok = [h for h in catalog.hardware.values() if hardware_supported(recipe, h)]
    ids = [h.id for h in ok]
    authored = recipe.meta.get("default_hardware")
    if authored in ids:
        return str(authored)
    for v in recipe.variants.values():
        c = constraint(v) or {}
        if c.get("generation") == "blackwell":
            for cand in ("b200", "gb200"):
                if cand in ids:
                    return cand
        break
    if "h200" in ids:
        return "h200"
    return ids[0] if ids else next(iter(catalog.hardware))


def recipe_for_hardware(catalog: Catalog, hardware_id: str | None) -> tuple[Recipe, str | None]:
    """The recipe to use when none is named: the catalog's default if it runs on
    the hardware, else the first that does; with the note that says why it changed."""
    default = catalog.recipes[catalog.default_recipe_id()]
    hw = catalog.hardware.get(hardware_id or "")
    if hw is None or hardware_supported(default, hw):
        return default, None
    for rid in sorted(catalog.recipes):
        cand = catalog.recipes[rid]
        if hardware_supported(cand, hw):
            why = default.hardware_note(hw.id) or f"{default.title} does not run on {hw.id}"
            return cand, (f"No --recipe given, and {default.title} does not run on {hw.display_name}: "
                          f"{why.rstrip('.')}. The plan uses the {cand.title} recipe ({cand.id}).")
    return default, None


def pick_recipe(r: Resolver) -> Recipe:
    sel, c = r.sel, r.c
    if sel.recipe:
        return c.recipe(sel.recipe)
    if sel.preset:
        return c.recipes[c.default_recipe_id()]
    recipe, note = recipe_for_hardware(c, sel.hardware)
    if note:
        r.notes.append(note)
    return recipe


def feature_mode(feat: Mapping[str, Any], key: str, vname: str, variant: Mapping[str, Any],
                  hw: HardwareProfile, picked: str | None = None) -> str | None:
    modes = feat.get("modes") or {}
    allowed = [m for m in modes if mode_allowed(modes[m], vname, hw)]
    if not allowed:
        return None
    for cand in (picked, (variant.get("default_modes") or {}).get(key), feat.get("default_mode")):
        if cand and cand in allowed:
            return str(cand)
    return str(allowed[0])


def mode_allowed(mode: Mapping[str, Any], vname: str, hw: HardwareProfile) -> bool:
    vs = mode.get("variants")
    if vs and vname not in vs:
        return False
    gate = mode.get("hardware") or {}
    return gate.get(hw.generation) != "unsupported" and gate.get(hw.id) != "unsupported"


def resolve_preset(r: Resolver, recipe: Recipe) -> Preset | None:
    if not r.sel.preset:
        return None
    presets = recipe.presets
    name = r.choose("preset", r.sel.preset, list(presets), list(presets), None,
                    f"{recipe.title} has no preset {r.sel.preset!r}; rendering the recipe instead")
    return presets.get(name) if name else None


def resolve_variant(r: Resolver, recipe: Recipe, hw: HardwareProfile, preset: Preset | None) -> str:
    sel = r.sel
    default = recipe.default_variant
    names = list(recipe.variants)
    runs = [v for v in names if variant_runs(hw, recipe.variants[v])]
    if preset is not None:
        want = preset.variant or default
        if sel.variant and sel.variant != want:
            r.fallbacks.append(Fallback("variant", sel.variant, want,
                                        f"preset {preset.name} is written for the {want} variant"))
        return want
    fallback = default if default in runs else (max(runs, key=lambda v: recipe.variants[v].get("vram_minimum_gb") or 0) if runs else default)
    if sel.variant is None:
        if default not in runs and runs:
            r.notes.append(f"{why_variant_not(hw, default, recipe.variants[default])}; using variant {fallback}.")
            return fallback
        return default
    why = None
    if sel.variant in recipe.variants and sel.variant not in runs:
        why = why_variant_not(hw, sel.variant, recipe.variants[sel.variant])
        why += f"; falling back to {fallback}"
    elif sel.variant not in recipe.variants:
        why = f"{recipe.title} has no {sel.variant!r} variant (variants: {', '.join(names)})"
    return str(r.choose("variant", sel.variant, runs, names, fallback, why))


def strategy_fits(recipe: Recipe, s: Strategy, hw: HardwareProfile, nodes: int) -> str | None:
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


def resolve_strategy(r: Resolver, recipe: Recipe, hw: HardwareProfile) -> tuple[Strategy, int]:
    sel, c = r.sel, r.c
    asked_nodes = sel.nodes
    nodes_hint = asked_nodes or 1
    offered = [s for s in recipe.compatible_strategies if s in c.strategies]
    fitting = [s for s in offered if strategy_fits(recipe, c.strategies[s], hw, max(2, nodes_hint)) is None]
    default = recipe.data.get("default_strategy")
    if default not in fitting:
        default = "single_node_tp" if "single_node_tp" in fitting else (fitting[0] if fitting else "single_node_tp")
    if nodes_hint > 1 and not sel.strategy:
        sibling = default.replace("single_node_", "multi_node_")
        for cand in (sibling, "multi_node_tp", "multi_node_tep", "multi_node_tp_dp"):
            if cand in fitting:
                default = cand
                break
    if sel.strategy:
        why = None
        if sel.strategy in c.strategies and sel.strategy not in fitting:
            why = strategy_fits(recipe, c.strategies[sel.strategy], hw, max(2, nodes_hint))
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


def resolve_features(r: Resolver, recipe: Recipe, strategy: Strategy) -> list[str]:
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


def resolve_spec(r: Resolver, recipe: Recipe, features: list[str], vname: str,
                  variant: Mapping[str, Any], hw: HardwareProfile) -> str | None:
    sel = r.sel
    feat = recipe.features.get("spec_decoding") or {}
    modes = feat.get("modes") or {}
    if sel.spec is not None and not modes:
        r.choose("spec", sel.spec, [], [], None, f"{recipe.title} has no speculative decoding modes")
        return None
    if "spec_decoding" not in features or not modes:
        return None
    allowed = [m for m in modes if mode_allowed(modes[m], vname, hw)]
    resolved = feature_mode(feat, "spec_decoding", vname, variant, hw, sel.spec)
    if sel.spec is not None and sel.spec != resolved:
        why = None
        if sel.spec in modes:
            why = why_mode_not(modes[sel.spec], sel.spec, vname, hw) + f"; using {resolved}"
        r.choose("spec", sel.spec, allowed, list(modes), resolved, why)
    elif sel.spec is None and feat.get("default_mode") and feat["default_mode"] != resolved:
        dm = feat["default_mode"]
        r.notes.append(f"spec_decoding defaults to {dm}, but "
                       f"{why_mode_not(modes[dm], dm, vname, hw)}; using {resolved}.")
    return resolved


def why_mode_not(mode: Mapping[str, Any], name: str, vname: str, hw: HardwareProfile) -> str:
    label = mode.get("label", name)
    vs = mode.get("variants")
    if vs and vname not in vs:
        return f"no {label} draft exists for the {vname} variant ({label} is published for: {', '.join(vs)})"
    return f"{label} is not supported on {hw.id}"


def single_node_tp(recipe: Recipe, variant: Mapping[str, Any], hw: HardwareProfile) -> int:
    for raw in (variant.get("tp"), ((recipe.data.get("strategy_overrides") or {}).get("single_node_tp") or {}).get("tp")):
        val = raw if isinstance(raw, int) else keyed(raw, hw)
        if isinstance(val, int) and val > 0:
            return val if hw.is_cpu else min(val, hw.gpu_count)
    need = variant.get("vram_minimum_gb") or 0
    per = hw.per_gpu_vram_gb
    if not need or per <= 0:
        return hw.gpu_count
    return 1 if need <= per else hw.gpu_count



def resolve_hardware(r: Resolver, recipe: Recipe, preset: Preset | None) -> HardwareProfile:
    """Explicit hardware > the preset's > this machine's (when the recipe runs on it) > the recipe's default."""
    sel, c = r.sel, r.c
    hw_default = default_hardware(c, recipe)
    if sel.hardware:
        compatible = [h for h in c.hardware if hardware_supported(recipe, c.hardware[h])]
        why = None
        if sel.hardware in c.hardware and sel.hardware not in compatible:
            why = recipe.hardware_note(sel.hardware) or f"{recipe.title} does not run on {sel.hardware}"
            why = f"{recipe.title} cannot run on {sel.hardware}: {why}"
        # Every id works when no recipe is named (the recipe follows the hardware, cpu's is the demo);
        # with one named, the others work with another recipe.
        others = [h for h in c.hardware if h not in compatible]
        listed = list(c.hardware) if not (sel.recipe or sel.preset) else \
            compatible + [f"{h} (with another recipe)" for h in others]
        hw_id = r.choose("hardware", sel.hardware, compatible, list(c.hardware), hw_default, why, listed)
    elif preset and preset.hardware and preset.hardware[0] in c.hardware:
        hw_id = preset.hardware[0]
    elif sel.detected_hardware in c.hardware and hardware_supported(recipe, c.hardware[sel.detected_hardware]):
        hw_id = str(sel.detected_hardware)  # this machine's, when the recipe runs on it
    else:
        hw_id = hw_default
    if preset and preset.hardware and hw_id not in preset.hardware:
        r.notes.append(
            f"Preset {preset.name} was written for {', '.join(preset.hardware)}; "
            f"it is rendered unchanged for {hw_id}."
        )
    return c.hardware[hw_id]


def tensor_parallel_size(recipe: Recipe, variant: Mapping[str, Any], hw: HardwareProfile,
                         strategy: Strategy, nodes: int) -> int:
    if strategy.multi_node:
        return strategy_tensor_parallel(strategy, hw.gpu_count, nodes)
    if strategy.name == "single_node_tp":
        return single_node_tp(recipe, variant, hw)
    return hw.gpu_count
