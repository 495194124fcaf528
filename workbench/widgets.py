"""ipywidgets views for the notebooks: thin renderers over the workbench's core.

Each view reads the core's own objects and draws them; none talks HTTP to vLLM
itself or re-does the core's work:

    RecipePicker      recipes.render(Selection)  -> command, docker command, provenance
    ensure_server     launcher.list_servers/launch -> NotebookServer (+ ServerPanel: phases, log)
    ChatView          chat.ChatSession events     -> reasoning | answer | tool calls, side by side
    ThroughputView    metrics.MetricsPoller       -> live tok/s, queue, KV cache, spec acceptance
    BenchView         bench.run_benchmark         -> progress bar, summary table, model-card figures
    environment_checks()                          -> what notebook 05 checks before a DGX Spark launch

Notebooks share servers to keep CI affordable: `ensure_server(plan)` reuses a
running server that the workbench started for the same command, and
`NotebookServer.release()` stops a server only if this notebook started it and
WORKBENCH_KEEP_SERVER=1 is not set. Every view owns its state; nothing here is
shared between users at module level.
"""

from __future__ import annotations

import dataclasses
import html
import os
import shlex
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import ipywidgets as W

from workbench import hardware, launcher
from workbench.chat import (
    ChatEvent,
    ChatSession,
    ContentDelta,
    ErrorEvent,
    Notice,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallComplete,
    ToolCallStarted,
    ToolResult,
    TurnFinished,
    TurnResult,
)
from workbench.errors import WorkbenchError
from workbench.recipes import Catalog, LaunchPlan, Selection, load_catalog, provenance_rows, render

__all__ = [
    "KEEP_SERVER_ENV",
    "BenchView",
    "ChatView",
    "EnvironmentCheck",
    "NotebookServer",
    "RecipePicker",
    "ServerPanel",
    "ThroughputView",
    "bench_table",
    "checks_table",
    "ensure_server",
    "environment_checks",
    "forcing_plan",
    "provenance_rows",
    "reference_table",
]

KEEP_SERVER_ENV = "WORKBENCH_KEEP_SERVER"
NO_SPEC = "none"
_MONO = "font-family: var(--jp-code-font-family, monospace); font-size: 12px;"
_PRE = f"white-space: pre-wrap; word-break: break-word; margin: 0; {_MONO}"
_LAYER_COLOURS = {
    "base": "#6c757d", "variant": "#0d6efd", "strategy": "#6610f2", "hardware": "#d63384",
    "feature": "#198754", "mode": "#20c997", "preset": "#fd7e14", "user": "#dc3545", "env": "#495057",
}


def _esc(text: Any) -> str:
    return html.escape(str(text))


def _pre(text: str, *, height: str | None = None) -> str:
    box = f"max-height: {height}; overflow-y: auto;" if height else ""
    return f'<pre style="{_PRE} {box}">{_esc(text)}</pre>'


def _error_html(exc: WorkbenchError) -> str:
    hint = f"<br><i>{_esc(exc.hint)}</i>" if exc.hint else ""
    return f'<div style="color: #b02a37"><b>{_esc(exc.message)}</b>{hint}</div>'


def _table(header: list[str], rows: list[list[str]], *, raw: bool = False,
           column_styles: tuple[str, ...] = ("white-space: nowrap;",)) -> str:
    """An HTML table; cells are escaped unless `raw` (then they are HTML already).
    `column_styles` are extra CSS for the first columns (by default: names stay on one line)."""
    cell = (lambda v: str(v)) if raw else _esc
    head = "".join(f'<th style="text-align: left; padding: 2px 8px">{_esc(h)}</th>' for h in header)
    td = "padding: 1px 8px; vertical-align: top; line-height: 1.3;"
    body = "".join(
        "<tr>" + "".join(f'<td style="{td} {column_styles[i] if i < len(column_styles) else ""}">{cell(v)}</td>'
                         for i, v in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table style="border-collapse: collapse; {_MONO}"><tr>{head}</tr>{body}</table>'


# ── recipe choice -> command and provenance ─────────────────────────────────


def _layer_badge(layer: str) -> str:
    colour = _LAYER_COLOURS.get(layer.split(":")[0], "#6c757d")
    return (f'<span style="background: {colour}; color: white; border-radius: 4px; '
            f'padding: 0 5px">{_esc(layer)}</span>')


class RecipePicker:
    """Dropdowns and checkboxes built from the recipe data; shows the rendered command.

    `plan` is the LaunchPlan of the current choices (None while they cannot be
    rendered; `error` then says why). `on_change(callback)` calls back with each new plan.
    """

    def __init__(self, catalog: Catalog | None = None, hardware_id: str | None = None, *,
                 port: int | None = None) -> None:
        self.catalog = catalog or load_catalog()
        self.port = port
        self.plan: LaunchPlan | None = None
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
        choices = W.VBox([self.hardware, self.recipe, self.variant, self.strategy, self.spec, self.preset,
                          self.extra, W.HTML("<b>Features</b>"), self.features])
        outputs = W.VBox([self.summary, W.HTML("<b>vllm serve</b>"), self.command,
                          W.HTML("<b>docker run</b>"), self.docker,
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

    # the recipe the choices apply to: the one picked, else what render() picks for the hardware
    def _current_recipe_id(self) -> str:
        if self.recipe.value:
            return self.recipe.value
        try:
            return render(Selection(hardware=self.hardware.value), self.catalog).recipe_id
        except WorkbenchError:
            return self.catalog.default_recipe_id()

    def _rebuild_choices(self) -> None:
        recipe_id = self._current_recipe_id()
        if recipe_id == self._recipe_id:
            return
        self._recipe_id = recipe_id
        recipe = self.catalog.recipe(recipe_id)
        self._quiet = True
        try:
            self.variant.options = [("(recipe default)", "")] + [
                (f"{v.get('label') or name} ({name})", name) for name, v in recipe.variants.items()]
            self.variant.value = ""
            self.strategy.options = [("(recommended)", "")] + [(s, s) for s in recipe.compatible_strategies]
            self.strategy.value = ""
            self.spec.options = [(NO_SPEC, NO_SPEC)] + [
                (f"{m.get('label') or name} ({name})", name) for name, m in recipe.spec_modes.items()]
            self.spec.value = NO_SPEC
            self.preset.options = [("(none: build from the choices)", "")] + [
                (name, name) for name in recipe.presets]
            self.preset.value = ""
            boxes = {}
            for name, feature in recipe.features.items():
                if name == "spec_decoding" and recipe.spec_modes:
                    continue  # chosen with the spec decoding dropdown
                box = W.Checkbox(value=name in recipe.default_features, description=name, indent=False,
                                 tooltip=str(feature.get("description", "")))
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
        """The Selection the widgets describe (raises WorkbenchError for unusable extra flags)."""
        extra = (self.extra.value or "").strip()
        try:
            shlex.split(extra)  # render() splits it; say here what is wrong with it
        except ValueError as exc:
            raise WorkbenchError(f"The extra flags are not valid shell words: {exc}.",
                                 hint="Close the quote, or remove the stray character.") from exc
        features = [name for name, box in self._feature_boxes.items() if box.value]
        spec = None if self.spec.value in ("", NO_SPEC) else self.spec.value
        if spec:
            features.append("spec_decoding")
        return Selection(
            recipe=self.recipe.value or None, hardware=self.hardware.value, variant=self.variant.value or None,
            strategy=self.strategy.value or None, features=features, spec=spec, extra=[extra] if extra else [],
            preset=self.preset.value or None, **({"port": self.port} if self.port else {}))

    def refresh(self) -> LaunchPlan | None:
        """Render the current choices and redraw the outputs."""
        try:
            plan = render(self.selection(), self.catalog)
        except WorkbenchError as exc:
            self.plan, self.error = None, exc
            self.summary.value = _error_html(exc)
            self.command.value = self.docker.value = self.provenance.value = ""
            return None
        self.plan, self.error = plan, None
        self.summary.value = self._summary_html(plan)
        self.command.value = _pre(plan.shell_command(multiline=True))
        self.docker.value = _pre(plan.docker_command(multiline=True)) if plan.docker_argv else "<i>none</i>"
        rows = [[_esc(f), _esc(v), _layer_badge(layer) if layer else "", _esc(why)]
                for f, v, layer, why in provenance_rows(plan, self.catalog)]
        self.provenance.value = _table(
            ["flag / env", "value", "from layer", "why"], rows, raw=True,
            column_styles=("white-space: nowrap;", "max-width: 22em; overflow-wrap: anywhere;", "white-space: nowrap;"))
        for callback in self._callbacks:
            callback(plan)
        return plan

    def _summary_html(self, plan: LaunchPlan) -> str:
        recipe = self.catalog.recipe(plan.recipe_id)
        hw = self.catalog.hardware.get(plan.hardware)
        lines = [f"<b>{_esc(recipe.title)}</b> · <code>{_esc(plan.model_id)}</code> on "
                 f"<b>{_esc(hw.display_name if hw else plan.hardware)}</b>"]
        if plan.engine != "vllm":
            lines.append(f"<i>This preset runs on {_esc(plan.engine)}: rendered here, not launched.</i>")
        for fb in plan.fallbacks:
            lines.append(f"⚠ <b>{_esc(fb.choice)}</b>: asked <code>{_esc(fb.asked)}</code>, using "
                         f"<code>{_esc(fb.used)}</code> — {_esc(fb.reason)}")
        lines += [f"• {_esc(note)}" for note in plan.notes]
        if plan.install_steps:
            lines.append("Install first: " + " &amp;&amp; ".join(f"<code>{_esc(s)}</code>" for s in plan.install_steps))
        return "<br>".join(lines)


def forcing_plan(catalog: Catalog | None = None, *, port: int | None = None) -> LaunchPlan:
    """The CPU demo recipe's plan, serving the tiny forcing model with Nemotron's parsers.

    The forcing model (workbench.demo_model.build_forcing_model) has random weights:
    every word it says is forced by the request (workbench.forcing). It exists so the
    reasoning and tool-call parsers can be shown on a CPU; it is not a recipe of its own.
    """
    from workbench.demo_model import FORCING_MODEL_NAME
    from workbench.forcing import FORCING_SERVER_FLAGS

    catalog = catalog or load_catalog()
    plan = render(Selection(hardware="cpu", served_model_name=FORCING_MODEL_NAME,
                            extra=[shlex.join(FORCING_SERVER_FLAGS)], **({"port": port} if port else {})), catalog)
    argv = [plan.argv[0], plan.argv[1], FORCING_MODEL_NAME, *plan.argv[3:]]
    return dataclasses.replace(
        plan, argv=argv, model_id=FORCING_MODEL_NAME, local_build=FORCING_MODEL_NAME,
        notes=[*plan.notes, "The model is the tiny random-weight forcing model, built locally: "
               "its text is forced by each request, and vLLM's real parsers split it."])


# ── servers: launch or reuse, with a live status and log ────────────────────

_PHASE_LABELS = {
    launcher.Phase.STARTED: "started", launcher.Phase.LOADING_WEIGHTS: "loading weights",
    launcher.Phase.COMPILING: "compiling", launcher.Phase.KV_CACHE: "KV cache",
    launcher.Phase.CAPTURING_GRAPHS: "graph capture", launcher.Phase.HTTP_UP: "HTTP up",
    launcher.Phase.READY: "ready",
}


class ServerPanel:
    """A server's status line (phases as they pass) and the tail of its log."""

    def __init__(self, title: str = "vLLM server", log_lines: int = 12) -> None:
        self.title = title
        self.log_lines = log_lines
        self.handle: launcher.ServerProcess | None = None
        self._messages: list[str] = []  # before the process exists: model build progress
        self.status = W.HTML(f"<b>{_esc(title)}</b>: not started")
        self.log = W.HTML()
        self.widget = W.VBox([self.status, self.log])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def message(self, text: str) -> None:
        self._messages.append(text)
        self.log.value = _pre("\n".join(self._messages[-self.log_lines:]), height="14em")

    def follow(self, handle: launcher.ServerProcess) -> None:
        self.handle = handle
        self.redraw()

    def on_event(self, _event: launcher.ServerEvent) -> None:
        # Called on the launcher's watcher thread; widgets may be updated from any thread.
        self.redraw()

    def redraw(self) -> None:
        h = self.handle
        if h is None:
            return
        done = {r.phase for r in h.phases}
        chips = []
        for phase in launcher.PHASE_ORDER:
            if phase not in done and phase in (launcher.Phase.COMPILING, launcher.Phase.CAPTURING_GRAPHS):
                continue  # the CPU engine with --enforce-eager skips these
            record = next((r for r in h.phases if r.phase is phase), None)
            if record is None:
                chips.append(f'<span style="color: #adb5bd">{_PHASE_LABELS[phase]}</span>')
            else:
                took = f" {record.duration_s:.1f}s" if record.duration_s else ""
                chips.append(f'<span style="color: #198754">✔ {_PHASE_LABELS[phase]}{took}</span>')
        colour = {"ready": "#198754", "failed": "#b02a37", "stopped": "#6c757d"}.get(h.status.value, "#0d6efd")
        line = (f"<b>{_esc(self.title)}</b>: <span style='color: {colour}'><b>{h.status.value}</b></span> · "
                f"<code>{_esc(h.base_url)}</code> · model <code>{_esc(h.model)}</code><br>" + " → ".join(chips))
        if h.diagnosis is not None and h.status is launcher.Status.FAILED:
            line += f"<br><b style='color: #b02a37'>{_esc(h.diagnosis.summary)}</b><br><i>{_esc(h.diagnosis.fix)}</i>"
        self.status.value = line
        tail = h.log_tail(self.log_lines)
        if tail or not self._messages:
            self.log.value = _pre("\n".join(tail) or "(no log: attached to a server started elsewhere)", height="14em")


@dataclass
class NotebookServer:
    """The server a notebook uses; `launched` says whether this notebook started it."""

    handle: launcher.ServerProcess
    launched: bool
    panel: ServerPanel
    note: str = ""

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def model(self) -> str:
        return self.handle.model

    def release(self, *, keep: bool | None = None) -> str:
        """Stop the server if this notebook started it, unless kept (WORKBENCH_KEEP_SERVER=1)."""
        keep = os.environ.get(KEEP_SERVER_ENV) == "1" if keep is None else keep
        if not self.launched:
            message = f"Left running: {self.base_url} was already running before this notebook (not ours to stop)."
        elif keep:
            self.handle.keep()
            message = (f"Left running for the next notebook ({KEEP_SERVER_ENV}=1): {self.base_url}. "
                       f"Stop it with: python -m workbench stop --port {self.handle.port}")
        else:
            result = self.handle.stop()
            message = f"Stopped the server this notebook started ({result.stage.value} in {result.seconds:.1f} s)."
        self.panel.redraw()
        self.panel.status.value += f"<br>{_esc(message)}"
        return message


def _same_command(running: launcher.ServerProcess, plan: LaunchPlan) -> bool:
    recorded = running.plan or {}
    return recorded.get("argv") == plan.argv and recorded.get("env", {}) == plan.env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((launcher.DEFAULT_HOST, 0))
        return s.getsockname()[1]


def ensure_server(plan: LaunchPlan, *, state_dir: str | Path | None = None, timeout: float = 900.0,
                  title: str | None = None, panel: ServerPanel | None = None) -> NotebookServer:
    """Reuse a running workbench server started for the same command, or launch `plan`.

    Blocks until the server is ready while `panel` (displayed by the caller, or by
    this function) shows the phases and the log. If the plan's port is taken by
    something else, the server is launched on a free port and the note says so.
    Raises LaunchError (with the log's diagnosis) when the server cannot start.
    """
    from IPython.display import display

    if panel is None:
        panel = ServerPanel(title or f"vLLM server for {plan.served_model_name}")
        display(panel)
    for running in launcher.list_servers(state_dir):
        if running.status is launcher.Status.STOPPED or not _same_command(running, plan):
            continue
        if running.is_alive() and running.refresh() in (launcher.Status.READY, launcher.Status.STARTING):
            panel.follow(running)
            running.wait_ready(timeout)
            panel.redraw()
            return NotebookServer(running, False, panel, f"Reusing the server already running at {running.base_url}.")
    keep = os.environ.get(KEEP_SERVER_ENV) == "1"
    port, note = plan.port, f"Launched a new server on port {plan.port}."
    holder = launcher.port_holder(port)
    if holder is not None:
        port = _free_port()
        note = f"Port {plan.port} is in use by {holder.describe()}, so this server listens on {port} instead."
    panel.message(note)
    attempts = 3  # another program may take the port between the check and vLLM's bind
    while True:
        attempts -= 1
        handle = launcher.launch(plan, port=port, state_dir=state_dir, on_event=panel.on_event,
                                 progress=panel.message, stop_at_exit=not keep)
        panel.follow(handle)
        try:
            handle.wait_ready(timeout)
            return NotebookServer(handle, True, panel, note)
        except WorkbenchError:
            if not attempts or handle.diagnosis is None or handle.diagnosis.cause != "address_in_use":
                raise
            taken, port = port, _free_port()
            note = f"Port {taken} was taken while the server started, so it listens on {port} instead."
            panel.message(note)
        finally:
            panel.redraw()


# ── chat: reasoning | answer | tool calls, side by side ─────────────────────


@dataclass
class _ToolCallView:
    name: str
    arguments: str = ""
    result: str = ""
    error: str | None = None
    seconds: float | None = None


class ChatView:
    """One turn at a time: the reasoning, the answer and the tool calls in three columns."""

    def __init__(self, title: str = "", *, redraw_every_s: float = 0.1) -> None:
        self.redraw_every_s = redraw_every_s
        box = W.Layout(width="33%", border="1px solid #dee2e6", padding="4px", min_height="6em")
        self.title = W.HTML(f"<b>{_esc(title)}</b>" if title else "")
        self.reasoning = W.HTML(layout=box)
        self.answer = W.HTML(layout=box)
        self.tools = W.HTML(layout=box)
        self.footer = W.HTML()
        self.widget = W.VBox([self.title, W.HBox([self.reasoning, self.answer, self.tools]), self.footer])
        self._clear()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _clear(self) -> None:
        self._reasoning: list[str] = []  # one entry per step
        self._answer: list[str] = []
        self._calls: dict[tuple[int, int], _ToolCallView] = {}
        self._notices: list[Notice] = []
        self._error: ErrorEvent | None = None
        self._finished: TurnFinished | None = None
        self._drawn_at = 0.0
        self._draw()

    def run(self, session: ChatSession, text: str | None) -> TurnResult:
        """Send `text` through `session`, drawing events as they stream; returns the turn."""
        self._clear()
        events: list[ChatEvent] = []
        for event in session.stream(text):
            events.append(event)
            self.add(event)
        self._draw()
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        return TurnResult(events, content, reasoning,
                          self._finished.finish_reason if self._finished else None,
                          self._finished.stats if self._finished else None, self._error)

    def add(self, event: ChatEvent) -> None:
        """Take one event; redraws at most every `redraw_every_s` (always on the last)."""
        step = getattr(event, "step", 0)
        if isinstance(event, ReasoningDelta):
            self._at(self._reasoning, step).append(event.text)
        elif isinstance(event, ContentDelta):
            self._at(self._answer, step).append(event.text)
        elif isinstance(event, ToolCallStarted):
            self._calls[(event.step, event.index)] = _ToolCallView(event.name)
        elif isinstance(event, ToolCallArgumentsDelta):
            call = self._calls.get((event.step, event.index))
            if call:
                call.arguments += event.text
        elif isinstance(event, ToolCallComplete):
            call = self._calls.setdefault((event.step, event.index), _ToolCallView(event.name))
            call.arguments = event.raw_arguments
            if event.parse_error:
                call.error = f"arguments did not parse: {event.parse_error}"
        elif isinstance(event, ToolResult):
            call = next((c for (s, _), c in self._calls.items() if s == event.step and c.name == event.name
                         and c.seconds is None), None)
            if call:
                call.result, call.error, call.seconds = event.content, event.error, event.seconds
        elif isinstance(event, Notice):
            self._notices.append(event)
        elif isinstance(event, ErrorEvent):
            self._error = event
        elif isinstance(event, TurnFinished):
            self._finished = event
        now = time.monotonic()
        if isinstance(event, (TurnFinished, ErrorEvent)) or now - self._drawn_at >= self.redraw_every_s:
            self._draw()

    @staticmethod
    def _at(steps: list, step: int) -> list[str]:
        while len(steps) <= step:
            steps.append([])
        return steps[step]

    def _steps_html(self, steps: list[list[str]], empty: str, style: str = "") -> str:
        parts = [f'<div style="{style}">{_pre("".join(s))}</div>' if len(steps) == 1 else
                 f'<div style="{style}"><small>step {i}</small>{_pre("".join(s))}</div>'
                 for i, s in enumerate(steps) if "".join(s)]
        return "".join(parts) or f"<i style='color: #adb5bd'>{empty}</i>"

    def _draw(self) -> None:
        self._drawn_at = time.monotonic()
        self.reasoning.value = "<b>Reasoning</b>" + self._steps_html(self._reasoning, "(none)", "color: #6c757d")
        self.answer.value = "<b>Answer</b>" + self._steps_html(self._answer, "(no answer yet)")
        calls = []
        for (step, _), c in self._calls.items():
            result = (f"<span style='color: #b02a37'>error: {_esc(c.error)}</span>" if c.error
                      else _esc(c.result) if c.result else "<i>running…</i>")
            took = f" ({c.seconds * 1000:.0f} ms)" if c.seconds is not None else ""
            calls.append(f"<div><small>step {step}</small> <code>{_esc(c.name)}({_esc(c.arguments)})</code>"
                         f"<br>→ <code>{result}</code>{took}</div>")
        self.tools.value = "<b>Tool calls</b>" + ("".join(calls) or "<br><i style='color: #adb5bd'>(none)</i>")
        lines = [f"<div style='background: #fff3cd; padding: 2px 6px'>⚠ <b>{_esc(n.code)}</b>: {_esc(n.message)}"
                 + (f"<br><i>{_esc(n.hint)}</i>" if n.hint else "") + "</div>" for n in self._notices]
        if self._error:
            lines.append(_error_html(WorkbenchError(self._error.message, hint=self._error.hint)))
        if self._finished:
            s = self._finished.stats
            figures = [f"finish: <code>{_esc(self._finished.finish_reason)}</code>",
                       f"requests {s.requests}", f"prompt {s.prompt_tokens} tok",
                       f"completion {s.completion_tokens} tok"]
            if s.reasoning_tokens is not None:
                figures.append(f"of which reasoning {s.reasoning_tokens}")
            if s.ttft_s is not None:
                figures.append(f"TTFT {s.ttft_s * 1000:.0f} ms")
            if s.decode_tokens_per_s:
                figures.append(f"decode {s.decode_tokens_per_s:.1f} tok/s")
            if s.tool_calls:
                figures.append(f"{s.tool_calls} tool call(s), {s.tool_s * 1000:.0f} ms in tools")
            lines.append("<small>" + " · ".join(figures) + "</small>")
        self.footer.value = "".join(lines)


# ── live throughput from /metrics ───────────────────────────────────────────

_SPARK = "▁▂▃▄▅▆▇█"


def _sparkline(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    top = max(known, default=0.0) or 1.0
    return "".join(" " if v is None else _SPARK[min(7, int(v / top * 7.999))] for v in values)


_LIVE_FIGURES = (
    ("decode_tps", "decode tok/s"), ("prefill_tps", "prefill tok/s"), ("running", "requests running"),
    ("waiting", "requests waiting"), ("kv_cache_pct", "KV cache used %"),
    ("spec_acceptance_rate", "spec-decode acceptance rate"),
    ("spec_mean_acceptance_length", "spec-decode mean acceptance length"),
)


class ThroughputView:
    """Scrapes the server's /metrics every `interval` s (a MetricsPoller) and redraws the figures."""

    def __init__(self, base_url: str, *, interval: float = 1.0, window: float = 5.0, spark_points: int = 60) -> None:
        from workbench.metrics import MetricsPoller

        self.poller = MetricsPoller(base_url, interval=interval, window=window)
        self.spark_points = spark_points
        self.table = W.HTML("<i>not started</i>")
        self.widget = W.VBox([W.HTML(f"<b>Live throughput</b> from <code>{_esc(self.poller.url)}</code> "
                                     f"(rates over the last {window:g} s)"), self.table])
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_decode_tps = 0.0

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def scrape(self) -> None:
        """One scrape and redraw (the thread calls this every `interval`)."""
        try:
            figures = self.poller.scrape_once()
        except WorkbenchError as exc:
            self.table.value = _error_html(exc)
            return
        self.peak_decode_tps = max(self.peak_decode_tps, figures.decode_tps or 0.0)
        history = [row["decode_tps"] for row in self.poller.series_frame()[-self.spark_points:]]
        rows = [[label, figures.display(name)] for name, label in _LIVE_FIGURES]
        rows.append(["decode tok/s history", _sparkline(history)])
        rows.append(["peak decode tok/s", f"{self.peak_decode_tps:.1f}"])
        self.table.value = _table(["figure", "value"], rows)

    def start(self) -> ThroughputView:
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                self.scrape()
                self._stop.wait(self.poller.interval)

        self._thread = threading.Thread(target=loop, name="throughput-view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(self.poller.timeout + self.poller.interval + 1)
        self.scrape()  # the final figures stay on screen
        self.poller.close()


# ── benchmark: progress, summary, model-card reference ──────────────────────


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def bench_table(result: Any) -> str:
    """HTML: the run's distributions, then what was measured here next to the model card's figures."""
    s, c = result.summary, result.config
    rows = []
    for name in type(s).DISTRIBUTIONS:
        d = getattr(s, name)
        rows.append([name, d.unit, _num(d.mean), _num(d.p50), _num(d.p90), _num(d.p99), str(d.count)])
    shape = (f"{c.input_tokens} input / {c.output_tokens} output tokens, concurrency {c.concurrency}, "
             f"{s.requests} requests ({s.succeeded} ok, {s.errors} errors) in {_num(s.duration_s)} s: "
             f"{_num(s.output_tok_s)} output tok/s, {_num(s.request_throughput, 2)} req/s")
    out = [f"<b>Benchmark of <code>{_esc(result.model)}</code></b><br>{_esc(shape)}",
           _table(["metric", "unit", "mean", "p50", "p90", "p99", "n"], rows)]
    return "".join(out)


def reference_table(result: Any, reference: dict[str, Any], here: str) -> str:
    """The model card's DGX Spark figures beside this run's, with both machines named."""
    s = result.summary
    e2e = None if s.e2e_ms.mean is None else s.e2e_ms.mean / 1000
    rows = [
        ["machine", reference["hardware"], here],
        ["model / server", reference["server"], f"{result.model}, vLLM CPU build"],
        ["shape (input / output / concurrency)",
         f"{reference['shape']['input_tokens']} / {reference['shape']['output_tokens']} / {reference['shape']['concurrency']}",
         f"{result.config.input_tokens} / {result.config.output_tokens} / {result.config.concurrency}"],
        ["prefill tok/s per user", _num(reference["prefill_tok_s_per_user"]), _num(s.prefill_tok_s_per_user.mean)],
        ["decode tok/s per user", _num(reference["decode_tok_s_per_user"]), _num(s.decode_tok_s_per_user.mean)],
        ["E2E mean, s", _num(reference["e2e_mean_s"], 2), _num(e2e, 2)],
    ]
    return _table(["", f"model card (NVIDIA, {reference['measured']})", "measured here"], rows)


class BenchView:
    """A progress bar fed by run_benchmark's progress callback, then the result table."""

    def __init__(self) -> None:
        self.bar = W.IntProgress(value=0, min=0, max=1, description="benchmark", bar_style="info")
        self.phase = W.HTML()
        self.result = W.HTML()
        self.widget = W.VBox([W.HBox([self.bar, self.phase]), self.result])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def progress(self, p: Any) -> None:
        self.bar.max = max(1, p.total or 1)
        self.bar.value = min(p.done, self.bar.max)
        errors = f", {p.errors} errors" if p.errors else ""
        self.phase.value = f"{_esc(p.phase)}: {p.done}/{p.total or '?'}{errors} {_esc(p.message or '')}"
        if p.phase == "done":
            self.bar.bar_style = "success"

    def run(self, config: Any) -> Any:
        from workbench.bench import run_benchmark

        result = run_benchmark(config, progress=self.progress)
        self.result.value = bench_table(result)
        return result


# ── environment checks before a DGX Spark launch (notebook 05) ──────────────

CheckStatus = Literal["ok", "missing", "warning"]


@dataclass
class EnvironmentCheck:
    """One thing a DGX Spark launch needs: what was found here, and what to do if it is missing."""

    name: str
    status: CheckStatus
    found: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"


def environment_checks(model_id: str, *, min_memory_gb: float = 100.0, min_disk_gb: float = 80.0,
                       meminfo: Path = Path("/proc/meminfo")) -> list[EnvironmentCheck]:
    """GPU, memory, Docker, the model in the Hugging Face cache, free disk. Reports; never raises.

    GB10's memory is unified with the CPU's and nvidia-smi reports it as "Not
    Supported", so memory is read from /proc/meminfo (workbench.hardware)."""
    checks: list[EnvironmentCheck] = []
    detection = hardware.detect_hardware()
    if detection.gpus:
        gpu = detection.gpus[0]
        ok = detection.hardware_id == "dgx_spark_gb10"
        checks.append(EnvironmentCheck(
            "GPU", "ok" if ok else "warning", f"{detection.reason} → hardware id {detection.hardware_id}",
            "" if ok else f"{gpu.name} is not a GB10: the notebook still works, with the command for "
            f"{detection.hardware_id}."))
    else:
        checks.append(EnvironmentCheck(
            "GPU", "missing", f"no NVIDIA GPU ({detection.reason})",
            "On a DGX Spark, `nvidia-smi` lists an NVIDIA GB10. If it fails there, the NVIDIA driver "
            "is not loaded: install the pending DGX OS updates (`sudo apt update && sudo apt full-upgrade`) "
            "and reboot. On a machine without a GPU, the GPU steps below only render their commands."))
    try:
        memory_gb = hardware.parse_meminfo_gb(meminfo.read_text())
    except OSError:
        memory_gb = None
    if memory_gb is None:
        checks.append(EnvironmentCheck("memory", "missing", f"could not read {meminfo}", "Run on Linux."))
    else:
        enough = memory_gb >= min_memory_gb
        checks.append(EnvironmentCheck(
            "memory (unified, /proc/meminfo)", "ok" if enough else "warning", f"{memory_gb:.0f} GB MemTotal",
            "" if enough else f"The DGX Spark recipe gives vLLM 70% of a GB10's 128 GB; {memory_gb:.0f} GB "
            "here is too little for the NVFP4 checkpoint (18 GB of weights plus KV cache). Close other "
            "programs, or lower --gpu-memory-utilization and --max-model-len."))
    problem = launcher.docker_engine_problem()
    checks.append(EnvironmentCheck(
        "docker", "ok" if problem is None else "missing", "the Docker engine answers" if problem is None else problem,
        "" if problem is None else "DGX OS ships Docker with the NVIDIA runtime: `sudo systemctl start docker`, "
        "and add yourself to the docker group (`sudo usermod -aG docker $USER`, then log in again). "
        "Without Docker, install vLLM with pip instead (the plan's install steps)."))
    cache = _hf_cache_dir()
    cached = cache / ("models--" + model_id.replace("/", "--"))
    checks.append(EnvironmentCheck(
        "model in the Hugging Face cache", "ok" if cached.is_dir() else "missing",
        f"{cached}" if cached.is_dir() else f"{model_id} is not in {cache}",
        "" if cached.is_dir() else f"Download it once (about 18 GB): `huggingface-cli download {model_id}`; "
        "the first launch also downloads it, which takes long on a slow link."))
    probe = cache if cache.exists() else Path.home()
    free_gb = shutil.disk_usage(probe).free / 1e9
    enough_disk = cached.is_dir() or free_gb >= min_disk_gb
    checks.append(EnvironmentCheck(
        f"free disk ({probe})", "ok" if enough_disk else "warning", f"{free_gb:.0f} GB free",
        "" if enough_disk else f"The checkpoint, a draft model and the image need about {min_disk_gb:.0f} GB: "
        "free space, or point HF_HOME at a bigger disk."))
    return checks


def checks_table(checks: list[EnvironmentCheck]) -> str:
    marks = {"ok": "✅ ok", "missing": "❌ missing", "warning": "⚠️ check"}
    return _table(["check", "result", "found here", "what to do"],
                  [[c.name, marks[c.status], c.found, c.fix] for c in checks])
