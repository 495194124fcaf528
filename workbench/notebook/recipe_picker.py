"""RecipePicker: dropdowns and checkboxes from the recipe data -> the rendered commands,
the known issues they meet, and the memory planner's concurrency against context.

The choices, the Selection and the summary come from workbench.recipes.choices,
the same functions the Gradio Recipe tab uses, and the planner from
workbench.planner; this view only lays them out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as W

from workbench.errors import WorkbenchError
from workbench.notebook.html import error_html, esc, layer_badge, pre, table
from workbench.planner import MemoryPlan, plan_memory
from workbench.recipes import Catalog, LaunchPlan, Selection, load_catalog, provenance_rows, recipe_for_hardware, render
from workbench.recipes.choices import NO_SPEC, PlanSummary, choices_for, selection_from_choices, summarize_plan
from workbench.server import hardware

__all__ = ["RecipePicker", "planner_html", "summary_html"]


def summary_html(summary: PlanSummary) -> str:
    lines = [f"<b>{esc(summary.recipe_title)}</b> · <code>{esc(summary.model_id)}</code> on "
             f"<b>{esc(summary.hardware_name)}</b>"]
    for special in (summary.other_engine, summary.demo_engine):
        if special:
            lines.append(f"<i>{esc(special)}</i>")
    for issue in summary.known_issues:
        links = ", ".join(f'<a href="{esc(url)}" target="_blank">{esc(url)}</a>' for url in issue.sources)
        lines.append(f'<div style="border-left: 4px solid #b02a37; padding-left: 6px; color: #842029">'
                     f"⚠ <b>Known issue: {esc(issue.title)}</b> ({esc(issue.matched)})<br>{esc(issue.change)}"
                     f"<br>Sources: {links}</div>")
    lines += [f"⚠ {esc(text)}" for text in summary.fallbacks]
    lines += [f"• {esc(note)}" for note in summary.notes]
    if summary.install_steps:
        lines.append("Install first: " + " &amp;&amp; ".join(f"<code>{esc(s)}</code>" for s in summary.install_steps))
    return "<br>".join(lines)


def planner_html(memory: MemoryPlan) -> str:
    """The memory planner's summary and its concurrency-against-context table."""
    head = (f"<b>Memory planner</b> · <code>{esc(memory.model_id)}</code> on <b>{esc(memory.hardware)}</b> "
            f"(config.json from {esc(memory.config_source)})")
    lines = "".join(f"<li>{esc(line)}</li>" for line in memory.summary_lines())
    rows = [[f"{r.context:,}", f"{r.max_concurrency:.2f}", f"{r.kv_cache_tokens:,}"] for r in memory.table]
    return (f"{head}<ul style='margin: 2px 0'>{lines}</ul>"
            + table(["context (tokens)", "max concurrent sequences", "KV cache (tokens)"], rows))


class RecipePicker:
    """Dropdowns and checkboxes built from the recipe data; shows the rendered command.

    `plan` is the LaunchPlan of the current choices (None while they cannot be
    rendered; `error` then says why). `on_change(callback)` calls back with each new plan.
    """

    def __init__(self, catalog: Catalog | None = None, hardware_id: str | None = None, *,
                 port: int | None = None, config_path: str | None = None, memory_gib: float | None = None) -> None:
        self.catalog = catalog or load_catalog()
        self.port = port
        self.config_path = config_path  # the checkpoint's config.json for the planner (else HF cache / Hub)
        self.memory_gib = memory_gib
        self.plan: LaunchPlan | None = None
        self.memory: MemoryPlan | None = None  # the planner's answer for `plan` (None: see planner.value)
        self.error: WorkbenchError | None = None
        self._callbacks: list[Callable[[LaunchPlan], None]] = []
        self._recipe_id: str | None = None
        self._quiet = False  # set while option lists are rebuilt, so each rebuild renders once
        layout = {"description_width": "110px"}
        wide = W.Layout(width="420px")
        detected = hardware_id or hardware.detect()
        self.hardware = W.Dropdown(
            options=[(f"{h.display_name} ({hid})", hid) for hid, h in self.catalog.hardware.items()],
            value=detected, description="Hardware", style=layout, layout=wide)
        self.recipe = W.Dropdown(
            options=[("(the best one for this hardware)", "")]
            + [(r.title, rid) for rid, r in self.catalog.recipes.items()],
            value="", description="Recipe", style=layout, layout=wide)
        self.variant = W.Dropdown(description="Variant", style=layout, layout=wide)
        self.strategy = W.Dropdown(description="Strategy", style=layout, layout=wide)
        self.spec = W.Dropdown(description="Spec decoding", style=layout, layout=wide)
        self.preset = W.Dropdown(description="Card preset", style=layout, layout=wide)
        self.extra = W.Text(description="Extra flags", placeholder="e.g. --max-num-seqs 8",
                            continuous_update=False, style=layout, layout=wide)
        self.features = W.VBox()
        self._feature_boxes: dict[str, W.Checkbox] = {}
        self.summary = W.HTML()
        self.command = W.HTML()
        self.docker = W.HTML()
        self.provenance = W.HTML()
        self.planner = W.HTML()
        choices = W.VBox([self.hardware, self.recipe, self.variant, self.strategy, self.spec, self.preset,
                          self.extra, W.HTML("<b>Features</b>"), self.features])
        outputs = W.VBox([self.summary, W.HTML("<b>vllm serve</b>"), self.command,
                          W.HTML("<b>docker run</b>"), self.docker, self.planner,
                          W.HTML("<b>Where each flag comes from</b>"), self.provenance],
                         layout=W.Layout(width="100%"))
        self.widget = W.VBox([choices, outputs])
        for control in (self.hardware, self.recipe):
            control.observe(self._on_recipe_inputs, names="value")
        for control in (self.variant, self.strategy, self.spec, self.preset, self.extra):
            control.observe(self._on_choice, names="value")
        self._rebuild_choices()
        self.refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def on_change(self, callback: Callable[[LaunchPlan], None]) -> None:
        self._callbacks.append(callback)

    def _current_recipe_id(self) -> str:
        """The recipe picked, else the one render() picks for the hardware."""
        return self.recipe.value or recipe_for_hardware(self.catalog, self.hardware.value)[0].id

    def _rebuild_choices(self) -> None:
        recipe_id = self._current_recipe_id()
        if recipe_id == self._recipe_id:
            return
        self._recipe_id = recipe_id
        recipe = self.catalog.recipe(recipe_id)
        offered = choices_for(self.catalog, recipe_id)
        self._quiet = True
        try:
            self.variant.options, self.variant.value = offered.variants, ""
            self.strategy.options, self.strategy.value = offered.strategies, ""
            self.spec.options, self.spec.value = offered.spec_modes, NO_SPEC
            self.preset.options, self.preset.value = offered.presets, ""
            boxes = {}
            for _, name in offered.features:
                box = W.Checkbox(value=name in offered.default_features, description=name, indent=False,
                                 tooltip=str(recipe.features[name].get("description", "")))
                box.observe(self._on_choice, names="value")
                boxes[name] = box
            self._feature_boxes = boxes
            self.features.children = list(boxes.values()) or [W.HTML("<i>(this recipe has no optional features)</i>")]
        finally:
            self._quiet = False

    def _on_recipe_inputs(self, _change: Any) -> None:
        self._rebuild_choices()
        self.refresh()

    def _on_choice(self, _change: Any) -> None:
        if not self._quiet:
            self.refresh()

    def selection(self) -> Selection:
        """The Selection the widgets describe."""
        return selection_from_choices(
            recipe=self.recipe.value, hardware=self.hardware.value, variant=self.variant.value,
            strategy=self.strategy.value, spec=self.spec.value, preset=self.preset.value,
            features=[name for name, box in self._feature_boxes.items() if box.value],
            port=self.port, extra=self.extra.value)

    def refresh(self) -> LaunchPlan | None:
        """Render the current choices and redraw the outputs."""
        try:
            plan = render(self.selection(), self.catalog)
        except WorkbenchError as exc:
            self.plan, self.error = None, exc
            self.summary.value = error_html(exc)
            self.command.value = self.docker.value = self.provenance.value = self.planner.value = ""
            self.memory = None
            return None
        self.plan, self.error = plan, None
        self.summary.value = summary_html(summarize_plan(plan, self.catalog))
        self.command.value = pre(plan.shell_command(multiline=True))
        self.docker.value = pre(plan.docker_command(multiline=True)) if plan.docker_argv else "<i>none</i>"
        rows = [[esc(f), esc(v), layer_badge(layer) if layer else "", esc(why)]
                for f, v, layer, why in provenance_rows(plan, self.catalog)]
        self.provenance.value = table(
            ["flag / env", "value", "from layer", "why"], rows, raw=True,
            column_styles=("white-space: nowrap;", "max-width: 22em; overflow-wrap: anywhere;", "white-space: nowrap;"))
        self._plan_memory(plan)
        for callback in self._callbacks:
            callback(plan)
        return plan

    def _plan_memory(self, plan: LaunchPlan) -> None:
        # After render (which stays pure): the planner reads config.json.
        if plan.engine != "vllm":
            self.memory, self.planner.value = None, ""
            return
        try:
            self.memory = plan_memory(plan, self.catalog, config_path=self.config_path, memory_gib=self.memory_gib)
        except WorkbenchError as exc:
            self.memory = None
            self.planner.value = "<b>Memory planner</b>" + error_html(exc)
            return
        self.planner.value = planner_html(self.memory)
