"""Recipe tab: choices → the exact `vllm serve` / `docker run` commands, where each flag comes from,
the known issues the command meets (with their change one click away where it is mechanical), and
the memory planner (concurrency against context).

Renders follow the person's own input (`.input` events), never a value a handler set: a
handler that switches the recipe sets the dependent choices and renders once after, so no
render runs with the old recipe's features against the new recipe's choices."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.planner import MemoryPlan, plan_memory
from workbench.recipes import Catalog, LaunchPlan, provenance_rows, recipe_for_hardware, render
from workbench.recipes.choices import NO_SPEC, PlanSummary, choices_for, selection_from_choices, summarize_plan
from workbench.recipes.resolve import hardware_supported
from workbench.ui import manifests_panel


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
    planner: gr.Markdown
    planner_table: gr.Dataframe
    planner_memory: gr.Number
    planner_config: gr.Textbox
    fixes: gr.State  # ids of the known problems whose change is applied ([]: the seed's command)
    apply_fix: gr.Button
    undo_fix: gr.Button

    @property
    def inputs(self) -> list:
        return [
            self.recipe, self.hardware, self.variant, self.strategy, self.nodes, self.features,
            self.spec, self.preset, self.port, self.served_model_name, self.max_model_len, self.extra, self.fixes,
        ]


def _recipe_choices(catalog: Catalog) -> list[tuple[str, str]]:
    return [(r.title, rid) for rid, r in catalog.recipes.items()]


def _hardware_choices(catalog: Catalog) -> list[tuple[str, str]]:
    return [(f"{hw.display_name} ({hw_id})", hw_id) for hw_id, hw in catalog.hardware.items()]


def summary_markdown(summary: PlanSummary) -> str:
    lines = [f"**{summary.recipe_title}** · `{summary.model_id}` on **{summary.hardware_name}**"]
    for special in (summary.other_engine, summary.demo_engine):
        if special:
            lines.append(f"> {special}")
    if summary.facts:
        lines.append(" · ".join(summary.facts))
    for fix in summary.applied_fixes:
        lines.append(f"> **Changed for known problem `{fix.id}`:** {fix.title}  \n> "
                     f"{'; '.join(f'`{c.describe()}`' for c in fix.changes)} (layer *known problem {fix.id}* "
                     "below). **Back to the seed's command** undoes it.\n")
    for issue in summary.known_issues:
        sources = ", ".join(f"[{_source_label(url)}]({url})" for url in issue.sources)
        offer = f"  \n> One click: **Apply the change** (`{issue.fix_summary()}`)." if issue.fix else ""
        lines.append(f"> ⚠ **Known issue: {issue.title}** ({issue.matched})  \n> {issue.change}  \n> "
                     f"Sources: {sources}{offer}\n")  # the blank line ends the quote: one box per issue
    lines += [f"- ⚠ {text}" for text in summary.fallbacks]
    lines += [f"- {note}" for note in summary.notes]
    if summary.install_steps:
        lines.append("\n**Install**\n```bash\n" + "\n".join(summary.install_steps) + "\n```")
    return "\n".join(lines)


def _source_label(url: str) -> str:
    """`owner/repo#123` for a GitHub issue or PR URL."""
    parts = url.rstrip("/").split("/")
    if len(parts) >= 7 and parts[2] == "github.com":
        return f"{parts[3]}/{parts[4]}#{parts[6]}"
    return url


PLANNER_HEADERS = ["context (tokens)", "max concurrent sequences", "KV cache (tokens)"]


def planner_markdown(memory: MemoryPlan) -> str:
    lines = [f"**Memory planner** · `{memory.model_id}` on **{memory.hardware}** (config.json from "
             f"{memory.config_source})"]
    lines += [f"- {line}" for line in memory.summary_lines()]
    return "\n".join(lines)


def planner_outputs(catalog: Catalog, plan: dict[str, Any] | None, memory_gib: float | None,
                    config_path: str | None) -> tuple[str, list[list[str]]]:
    """The planner for the rendered plan: its summary and the concurrency-against-context table."""
    if not plan:
        return "", []
    try:
        memory = plan_memory(LaunchPlan.from_dict(plan), catalog, config_path=(config_path or "").strip() or None,
                             memory_gib=float(memory_gib) if memory_gib else None)
    except WorkbenchError as exc:
        return f"**Memory planner:** {exc.message}" + (f"\n\n{exc.hint}" if exc.hint else ""), []
    rows = [[f"{r.context:,}", f"{r.max_concurrency:.2f}", f"{r.kv_cache_tokens:,}"] for r in memory.table]
    return planner_markdown(memory), rows


def render_outputs(catalog: Catalog, recipe, hardware, variant, strategy, nodes, features, spec, preset, port,
                   served, max_len, extra, fixes=None):
    """Render the selection; a bad choice shows its message instead of a command. `fixes`: ids of
    known problems whose change to apply, those the seed's command meets (others are let go)."""
    try:
        selection = selection_from_choices(
            recipe=recipe, hardware=hardware, variant=variant, strategy=strategy, nodes=nodes, features=features,
            spec=spec, preset=preset, port=port, served_model_name=served, max_model_len=max_len, extra=extra)
        plan = render(selection, catalog)
        met = [i.id for i in plan.known_issues if i.fix and i.id in (fixes or [])]
        if met:
            plan = render(dataclasses.replace(selection, apply_fixes=met), catalog)
    except WorkbenchError as exc:
        message = f"**Cannot render:** {exc.message}" + (f"\n\n{exc.hint}" if exc.hint else "")
        return message, "", "", [], None
    return (
        summary_markdown(summarize_plan(plan, catalog)),
        plan.shell_command(multiline=True),
        plan.docker_command(multiline=True) if plan.docker_argv else "",
        # Flags only here; the command box above already leads with the env vars.
        [row for row in provenance_rows(plan, catalog) if row[2] != "env"],
        plan.to_dict(),
    )


def fix_buttons(plan: dict[str, Any] | None) -> tuple[Any, Any]:
    """Apply the change (a known problem the command meets has a mechanical one) and Back to the
    seed's command (a change is applied): each shown only when it does something."""
    plan = plan or {}
    fixable = [i for i in plan.get("known_issues") or [] if i.get("fix")]
    label = ("Apply the change: " + "; ".join(f"known problem {i['id']}" for i in fixable)) if fixable else ""
    return (gr.Button(value=label or "Apply the change", visible=bool(fixable)),
            gr.Button(visible=bool(plan.get("applied_fixes"))))


def fixes_to_apply(plan: dict[str, Any] | None, fixes: list[str] | None) -> list[str]:
    """The fixes after Apply the change: those applied, and every one the command still meets."""
    plan = plan or {}
    return list(dict.fromkeys([*(fixes or []), *(i["id"] for i in plan.get("known_issues") or [] if i.get("fix"))]))


def recipe_switch(catalog: Catalog, recipe_id: str) -> tuple[Any, ...]:
    """A new recipe's choices, each at its default, and no fix applied."""
    try:
        c = choices_for(catalog, recipe_id)
    except WorkbenchError as exc:
        raise gr.Error(exc.message) from None
    return (
        gr.Dropdown(choices=c.variants, value=""),
        gr.Dropdown(choices=c.strategies, value=""),
        gr.CheckboxGroup(choices=c.features, value=c.default_features),
        gr.Dropdown(choices=c.spec_modes, value=NO_SPEC),
        gr.Dropdown(choices=c.presets, value=""),
        [],
    )


def hardware_switch(catalog: Catalog, hardware: str, current_recipe: str) -> tuple[Any, ...]:
    """The recipe for new hardware: kept when it runs there (the CPU demo is left for the GPU
    recipe), else switched, with its choices, in this one update (see the module docstring)."""
    if hardware not in catalog.hardware:
        raise gr.Error(f"No hardware named {hardware!r}.")
    wanted = recipe_for_hardware(catalog, hardware)[0].id
    try:
        current = catalog.recipe(current_recipe)
    except WorkbenchError:
        current = None
    if current is None or (wanted != current_recipe and (
            current.local_build or not hardware_supported(current, catalog.hardware[hardware]))):
        return (gr.Dropdown(choices=_recipe_choices(catalog), value=wanted), *recipe_switch(catalog, wanted))
    return (gr.Dropdown(), *(gr.skip() for _ in range(5)), [])


def create_ui(catalog: Catalog, default_hardware: str) -> RecipeTab:
    recipe_id = recipe_for_hardware(catalog, default_hardware)[0].id
    c = choices_for(catalog, recipe_id)
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            recipe = gr.Dropdown(_recipe_choices(catalog), value=recipe_id, label="Recipe")
            hardware = gr.Dropdown(_hardware_choices(catalog), value=default_hardware, label="Hardware",
                                   elem_id="recipe-hardware")
            preset = gr.Dropdown(c.presets, value="", label="Model-card preset")
            variant = gr.Dropdown(c.variants, value="", label="Variant")
            strategy = gr.Dropdown(c.strategies, value="", label="Strategy")
            nodes = gr.Number(value=1, precision=0, minimum=1, maximum=16, label="Nodes (multi-node strategies)")
            features = gr.CheckboxGroup(c.features, value=c.default_features, label="Features")
            spec = gr.Dropdown(c.spec_modes, value=NO_SPEC, label="Speculative decoding")
            with gr.Accordion("Server options", open=False):
                port = gr.Number(value=8000, precision=0, label="Port", elem_id="recipe-port")
                served = gr.Textbox(label="Served model name", placeholder="(model id)")
                max_len = gr.Number(value=None, precision=0, label="Max model length")
                extra = gr.Textbox(label="Extra flags (appended last, override earlier ones)")
        with gr.Column(scale=2):
            summary = gr.Markdown(elem_id="recipe-summary")
            with gr.Row():
                apply_fix = gr.Button("Apply the change", visible=False, size="sm", elem_id="recipe-apply-fix")
                undo_fix = gr.Button("Back to the seed's command", visible=False, size="sm",
                                     elem_id="recipe-undo-fix")
            command = gr.Code(language="shell", label="vllm serve", elem_id="serve-command", interactive=False)
            docker = gr.Code(language="shell", label="docker run", elem_id="docker-command", interactive=False)
            manifests = manifests_panel.create_ui()
            with gr.Group():
                planner = gr.Markdown(elem_id="recipe-planner")
                planner_table = gr.Dataframe(
                    headers=PLANNER_HEADERS, label="Sequences that fit at each context (vLLM's 'Maximum concurrency')",
                    interactive=False, elem_id="recipe-planner-table")
                with gr.Accordion("Planner inputs", open=False):
                    planner_memory = gr.Number(value=None, label="Memory per GPU in GiB (0: the hardware profile's)")
                    planner_config = gr.Textbox(label="config.json of the checkpoint (path; empty: HF cache or Hub)",
                                                elem_id="recipe-planner-config")
            provenance = gr.Dataframe(
                headers=["flag", "value", "from layer", "why"],
                label="Where each flag comes from",
                interactive=False,
                wrap=True,
                # Widths that add up to the column: the "why" text wraps instead of running off the right.
                column_widths=["24%", "16%", "18%", "42%"],
                elem_id="recipe-provenance",
            )
    tab = RecipeTab(
        recipe, hardware, variant, strategy, nodes, features, spec, preset, port, served, max_len,
        extra, summary, command, docker, provenance, gr.State(None), planner, planner_table,
        planner_memory, planner_config, gr.State([]), apply_fix, undo_fix,
    )

    def rerender(*values):
        return render_outputs(catalog, *values)

    outputs = [summary, command, docker, provenance, tab.plan]
    dependents = [variant, strategy, features, spec, preset, tab.fixes]
    recipe.input(lambda r: recipe_switch(catalog, r), recipe, dependents).then(rerender, tab.inputs, outputs)
    hardware.input(lambda h, r: hardware_switch(catalog, h, r), [hardware, recipe], [recipe, *dependents]).then(
        rerender, tab.inputs, outputs)
    tab.plan.change(fix_buttons, tab.plan, [apply_fix, undo_fix], show_progress="hidden")
    apply_fix.click(fixes_to_apply, [tab.plan, tab.fixes], tab.fixes).then(rerender, tab.inputs, outputs)
    undo_fix.click(lambda: [], None, tab.fixes).then(rerender, tab.inputs, outputs)
    # The planner reads config.json (I/O), so it runs after render, on each new plan.
    planner_inputs = [tab.plan, planner_memory, planner_config]
    tab.plan.change(lambda *v: planner_outputs(catalog, *v), planner_inputs, [planner, planner_table])
    planner_memory.change(lambda *v: planner_outputs(catalog, *v), planner_inputs, [planner, planner_table])
    planner_config.submit(lambda *v: planner_outputs(catalog, *v), planner_inputs, [planner, planner_table])
    tab.plan.change(lambda *v: manifests_panel.manifest_outputs(catalog, *v), [tab.plan, planner_config],
                    manifests.outputs)
    # The choices a handler also sets re-render on the person's input only; the others never change by handler.
    for choice in (variant, strategy, features, spec, preset):
        choice.input(rerender, tab.inputs, outputs)
    for number in (nodes, port, max_len):
        number.change(rerender, tab.inputs, outputs)
    for box in (served, extra):
        box.submit(rerender, tab.inputs, outputs)
    return tab
