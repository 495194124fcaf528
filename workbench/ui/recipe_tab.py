"""Recipe tab: choices → the exact `vllm serve` / `docker run` commands and where each flag comes from."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.recipes import Catalog, LaunchPlan, Selection, provenance_rows, render

NO_SPEC = "none"
NO_PRESET = "(none: build from the choices)"


@dataclass
class RecipeTab:
    recipe: gr.Dropdown
    hardware: gr.Dropdown
    variant: gr.Dropdown
    strategy: gr.Dropdown
    nodes: gr.Number
    features: gr.CheckboxGroup
    spec: gr.Dropdown
    preset: gr.Dropdown
    port: gr.Number
    served_model_name: gr.Textbox
    max_model_len: gr.Number
    extra: gr.Textbox
    summary: gr.Markdown
    command: gr.Code
    docker: gr.Code
    provenance: gr.Dataframe
    plan: gr.State

    @property
    def inputs(self) -> list:
        return [
            self.recipe, self.hardware, self.variant, self.strategy, self.nodes, self.features,
            self.spec, self.preset, self.port, self.served_model_name, self.max_model_len, self.extra,
        ]


def _hardware_choices(catalog: Catalog) -> list[tuple[str, str]]:
    return [(f"{hw.display_name} ({hw_id})", hw_id) for hw_id, hw in catalog.hardware.items()]


def recipe_for_hardware(catalog: Catalog, hardware: str) -> str:
    """The CPU engine only serves the demo recipe; every GPU serves Nemotron."""
    if hardware == "cpu":
        for rid, r in catalog.recipes.items():
            if r.local_build:
                return rid
    return catalog.default_recipe_id()


def choices_for(catalog: Catalog, recipe_id: str) -> dict:
    recipe = catalog.recipe(recipe_id)
    return {
        "variants": [(f"{v.get('label') or name} ({name})", name) for name, v in recipe.variants.items()],
        "strategies": recipe.compatible_strategies
        + [s for s in catalog.strategies if s.startswith("multi_node") and s not in recipe.compatible_strategies],
        "features": list(recipe.features),
        "default_features": recipe.default_features,
        "spec": [NO_SPEC, *recipe.spec_modes],
        "presets": [NO_PRESET, *recipe.presets],
    }


def selection_from_values(
    recipe, hardware, variant, strategy, nodes, features, spec, preset, port, served, max_len, extra
) -> Selection:
    import shlex

    try:
        extra_args = shlex.split(extra or "")
    except ValueError as exc:
        raise WorkbenchError(f"Extra flags are not valid shell words: {exc}.", hint="Close the quote.") from exc
    features = list(features or [])
    if spec and spec != NO_SPEC and "spec_decoding" not in features:
        features.append("spec_decoding")
    return Selection(
        recipe=recipe or None,
        hardware=hardware or None,
        variant=variant or None,
        strategy=strategy or None,
        nodes=int(nodes) if nodes and int(nodes) > 1 else None,
        features=features,
        spec=None if not spec or spec == NO_SPEC else spec,
        port=int(port or 8000),
        served_model_name=served or None,
        max_model_len=int(max_len) if max_len else None,
        extra=extra_args,
        preset=None if not preset or preset == NO_PRESET else preset,
    )


def describe_plan(plan: LaunchPlan, catalog: Catalog) -> str:
    recipe = catalog.recipe(plan.recipe_id)
    hw = catalog.hardware.get(plan.hardware)
    lines = [f"**{recipe.title}** · `{plan.model_id}` on **{hw.display_name if hw else plan.hardware}**"]
    if plan.engine != "vllm":
        lines.append(f"> This preset runs on **{plan.engine}**, another engine: rendered here, not launched.")
    if plan.local_build:
        lines.append(
            "> This is the **embedded CPU demo engine** (vLLM's CPU build serving SmolLM2-135M-Instruct), "
            "not Nemotron: Nemotron's MoE kernels need an NVIDIA GPU."
        )
    facts = []
    if plan.min_vllm_version:
        facts.append(f"vLLM >= {plan.min_vllm_version}")
    if plan.docker_image:
        facts.append(f"image `{plan.docker_image}`")
    if plan.tensor_parallel_size:
        facts.append(f"TP {plan.tensor_parallel_size}")
    if plan.env:
        facts.append("env " + ", ".join(f"`{k}={v}`" for k, v in plan.env.items()))
    if facts:
        lines.append(" · ".join(facts))
    for fb in plan.fallbacks:
        lines.append(f"- ⚠ **{fb.choice}**: asked `{fb.asked}`, using `{fb.used}` — {fb.reason}")
    for note in plan.notes:
        lines.append(f"- {note}")
    if plan.install_steps:
        lines.append("\n**Install**\n```bash\n" + "\n".join(plan.install_steps) + "\n```")
    return "\n".join(lines)


def render_outputs(catalog: Catalog, *values):
    """Render the selection; a bad choice shows its message instead of a command."""
    try:
        plan = render(selection_from_values(*values), catalog)
    except WorkbenchError as exc:
        message = f"**Cannot render:** {exc.message}" + (f"\n\n{exc.hint}" if exc.hint else "")
        return message, "", "", [], None
    return (
        describe_plan(plan, catalog),
        plan.shell_command(multiline=True),
        plan.docker_command(multiline=True) if plan.docker_argv else "",
        # Flags only here; the command box above already leads with the env vars.
        [row for row in provenance_rows(plan, catalog) if row[2] != "env"],
        plan.to_dict(),
    )


def create_ui(catalog: Catalog, default_hardware: str) -> RecipeTab:
    recipe_id = recipe_for_hardware(catalog, default_hardware)
    c = choices_for(catalog, recipe_id)
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            recipe = gr.Dropdown(
                [(r.title, rid) for rid, r in catalog.recipes.items()], value=recipe_id, label="Recipe"
            )
            hardware = gr.Dropdown(_hardware_choices(catalog), value=default_hardware, label="Hardware")
            preset = gr.Dropdown(c["presets"], value=NO_PRESET, label="Model-card preset")
            variant = gr.Dropdown(c["variants"], value=None, label="Variant (empty: recipe default)")
            strategy = gr.Dropdown(c["strategies"], value=None, label="Strategy (empty: recommended)")
            nodes = gr.Number(value=1, precision=0, minimum=1, maximum=16, label="Nodes (multi-node strategies)")
            features = gr.CheckboxGroup(c["features"], value=c["default_features"], label="Features")
            spec = gr.Dropdown(c["spec"], value=NO_SPEC, label="Speculative decoding")
            with gr.Accordion("Server options", open=False):
                port = gr.Number(value=8000, precision=0, label="Port", elem_id="recipe-port")
                served = gr.Textbox(label="Served model name", placeholder="(model id)")
                max_len = gr.Number(value=None, precision=0, label="Max model length")
                extra = gr.Textbox(label="Extra flags (appended last, override earlier ones)")
        with gr.Column(scale=2):
            summary = gr.Markdown(elem_id="recipe-summary")
            command = gr.Code(language="shell", label="vllm serve", elem_id="serve-command", interactive=False)
            docker = gr.Code(language="shell", label="docker run", elem_id="docker-command", interactive=False)
            provenance = gr.Dataframe(
                headers=["flag", "value", "from layer", "why"],
                label="Where each flag comes from",
                interactive=False,
                wrap=True,
            )
    tab = RecipeTab(
        recipe, hardware, variant, strategy, nodes, features, spec, preset, port, served, max_len,
        extra, summary, command, docker, provenance, gr.State(None),
    )

    def on_recipe_change(recipe_id):
        c = choices_for(catalog, recipe_id)
        return (
            gr.Dropdown(choices=c["variants"], value=None),
            gr.Dropdown(choices=c["strategies"], value=None),
            gr.CheckboxGroup(choices=c["features"], value=c["default_features"]),
            gr.Dropdown(choices=c["spec"], value=NO_SPEC),
            gr.Dropdown(choices=c["presets"], value=NO_PRESET),
        )

    def on_hardware_change(hardware, current_recipe):
        wanted = recipe_for_hardware(catalog, hardware)
        cur_is_demo = bool(catalog.recipe(current_recipe).local_build)
        if (hardware == "cpu") != cur_is_demo:
            return gr.Dropdown(value=wanted)
        return gr.Dropdown()

    outputs = [summary, command, docker, provenance, tab.plan]
    recipe.change(on_recipe_change, recipe, [variant, strategy, features, spec, preset]).then(
        lambda *v: render_outputs(catalog, *v), tab.inputs, outputs
    )
    hardware.change(on_hardware_change, [hardware, recipe], recipe)
    for comp in [hardware, variant, strategy, nodes, features, spec, preset, port, served, max_len, extra]:
        event = comp.submit if isinstance(comp, gr.Textbox) else comp.change
        event(lambda *v: render_outputs(catalog, *v), tab.inputs, outputs)
    return tab
