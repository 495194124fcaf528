"""What a recipe picker offers, and what it says about a plan: shared by both UIs.

The Gradio Recipe tab and the notebooks' RecipePicker build their dropdowns from
`choices_for`, turn their values into a Selection with `selection_from_choices`,
and show `summarize_plan` (each in its own markup).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from workbench.errors import InputError
from workbench.recipes.catalog import Catalog
from workbench.recipes.known_issues import AppliedFix, KnownIssue
from workbench.recipes.plan import DEFAULT_PORT, LaunchPlan, Selection

__all__ = ["NO_SPEC", "PlanSummary", "RecipeChoices", "choices_for", "selection_from_choices", "summarize_plan"]

# The value of "no speculative decoding" in the spec list; "" means "the default" elsewhere.
NO_SPEC = "none"
Choice = tuple[str, str]  # (label, value)


@dataclass(frozen=True)
class RecipeChoices:
    """The options of one recipe, each list led by its "default" entry (value "")."""

    variants: list[Choice]
    strategies: list[Choice]
    features: list[Choice]  # optional features; spec decoding has its own list when it has modes
    default_features: list[str]
    spec_modes: list[Choice]  # led by (NO_SPEC, NO_SPEC)
    presets: list[Choice]


def choices_for(catalog: Catalog, recipe_id: str) -> RecipeChoices:
    recipe = catalog.recipe(recipe_id)
    has_modes = bool(recipe.spec_modes)
    # Multi-node strategies the recipe does not list are offered too: choosing one
    # renders the plan's fallback with its reason instead of hiding the option.
    strategies = recipe.compatible_strategies + [
        s for s in catalog.strategies if s.startswith("multi_node") and s not in recipe.compatible_strategies]
    features = [(name, name) for name in recipe.features if not (has_modes and name == "spec_decoding")]
    return RecipeChoices(
        variants=[("(recipe default)", "")]
        + [(f"{v.get('label') or name} ({name})", name) for name, v in recipe.variants.items()],
        strategies=[("(recommended)", "")] + [(s, s) for s in strategies],
        features=features,
        default_features=[f for f in recipe.default_features if any(v == f for _, v in features)],
        spec_modes=[(NO_SPEC, NO_SPEC)]
        + [(f"{m.get('label') or name} ({name})", name) for name, m in recipe.spec_modes.items()],
        presets=[("(none: build from the choices)", "")] + [(name, name) for name in recipe.presets],
    )


def _whole(value: float | int | str | None, what: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} must be a whole number, not {value!r}.") from exc
    if not number.is_integer():
        raise InputError(f"{what} must be a whole number, not {value!r}.")
    return int(number)


def selection_from_choices(
    *,
    recipe: str | None = None,
    hardware: str | None = None,
    variant: str | None = None,
    strategy: str | None = None,
    nodes: float | int | None = None,
    features: Sequence[str] | None = None,
    spec: str | None = None,
    preset: str | None = None,
    port: float | int | None = None,
    served_model_name: str | None = None,
    max_model_len: float | int | None = None,
    extra: str | None = None,
) -> Selection:
    """A Selection from a picker's values: "" and None mean the default, NO_SPEC no spec decoding."""
    chosen = list(features or [])
    spec_mode = None if not spec or spec == NO_SPEC else spec
    if spec_mode and "spec_decoding" not in chosen:
        chosen.append("spec_decoding")
    node_count = _whole(nodes, "Nodes")
    extra_text = (extra or "").strip()
    return Selection(
        recipe=recipe or None,
        hardware=hardware or None,
        variant=variant or None,
        strategy=strategy or None,
        nodes=node_count if node_count and node_count > 1 else None,
        features=chosen,
        spec=spec_mode,
        port=_whole(port, "Port") or DEFAULT_PORT,
        served_model_name=served_model_name or None,
        max_model_len=_whole(max_model_len, "Max model length") or None,  # an empty number box reads 0
        extra=[extra_text] if extra_text else [],
        preset=preset or None,
    )


@dataclass(frozen=True)
class PlanSummary:
    """The words both UIs show above a plan's command."""

    recipe_title: str
    model_id: str
    hardware_name: str
    other_engine: str | None = None  # set when the plan is for another engine (not launched)
    demo_engine: str | None = None  # the recipe's engine_note (the embedded CPU demo engine)
    facts: list[str] = field(default_factory=list)  # vLLM version, image, TP, env
    fallbacks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    install_steps: list[str] = field(default_factory=list)
    known_issues: list[KnownIssue] = field(default_factory=list)  # the plan's, shown as warnings
    applied_fixes: list[AppliedFix] = field(default_factory=list)  # known problems' changes in the command


def summarize_plan(plan: LaunchPlan, catalog: Catalog) -> PlanSummary:
    recipe = catalog.recipe(plan.recipe_id)
    hw = catalog.hardware.get(plan.hardware)
    facts = []
    if plan.min_vllm_version:
        facts.append(f"vLLM >= {plan.min_vllm_version}")
    if plan.docker_image:
        facts.append(f"image {plan.docker_image}")
    if plan.tensor_parallel_size:
        facts.append(f"TP {plan.tensor_parallel_size}")
    if plan.env:
        facts.append("env " + ", ".join(f"{k}={v}" for k, v in plan.env.items()))
    return PlanSummary(
        recipe_title=recipe.title,
        model_id=plan.model_id,
        hardware_name=hw.display_name if hw else plan.hardware,
        other_engine=(f"This preset runs on {plan.engine}, another engine: rendered here, not launched."
                      if plan.engine != "vllm" else None),
        demo_engine=f"This is {recipe.engine_note}." if recipe.engine_note else None,
        facts=facts,
        fallbacks=[f"{fb.choice}: asked {fb.asked}, using {fb.used} — {fb.reason}" for fb in plan.fallbacks],
        notes=list(plan.notes),
        install_steps=list(plan.install_steps),
        known_issues=list(plan.known_issues),
        applied_fixes=list(plan.applied_fixes),
    )
