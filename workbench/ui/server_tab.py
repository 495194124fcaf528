"""Server tab: launch the rendered plan, attach to a running server, watch the
phases and the log, read the diagnosis, stop."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import gradio as gr

from workbench import server
from workbench.errors import InputError, WorkbenchError
from workbench.recipes import Catalog, LaunchPlan
from workbench.recipes.plan import split_extra_flags
from workbench.server.cluster import node_rows
from workbench.server.logfile import without_exit_noise
from workbench.server.page_flags import check_page_flags, page_flag_problems, vllm_flag_table
from workbench.ui import agents_panel

# Lines of the log the tab shows (nanobind's leak report at exit folded first).
LOG_LINES = 30


# What a remote caller can reach, and what the handlers refuse (Gradio 6.31):
# api_visibility="private" only hides an event from the API docs and gradio_client;
# a raw POST to /gradio_api/queue/join with its fn_index still runs it. So:
# - the launch re-checks the plan's extra flags here, on the server (page_flags:
#   vLLM's own flag table plus an allowlist; no --host, --port, --api-key,
#   --trust-remote-code, plugins), and always binds the server to 127.0.0.1;
# - the plan is read from server-side session state (gr.State), which a caller
#   cannot set except by rendering through the Recipe tab's own handler;
# - beyond that, whoever reaches the app can do what its page does: bind it to
#   127.0.0.1 or put it behind --auth (the CLI refuses another host without it),
#   and give a room its own app (python -m workbench workshop) where attendees
#   reach only the chat.
SERVER_CONTROLS_NOTE = "launch, stop and attach are private events; the launch re-checks its flags"


def checked_page_plan(plan: dict, progress=None) -> LaunchPlan:
    """The plan from the page, refused (InputError) when its extra flags may not come from a page."""
    launch_plan = LaunchPlan.from_dict(plan)
    extra = split_extra_flags(launch_plan.selection.get("extra") or [])
    if extra:
        check_page_flags(extra, vllm_flag_table(progress=progress))
    return launch_plan


def page_plan_problems(plan: LaunchPlan) -> list[str]:
    """The same check, quick enough for every change: vLLM's flag table only if already cached."""
    try:
        extra = split_extra_flags(plan.selection.get("extra") or [])
    except InputError as exc:
        return [exc.message]
    return page_flag_problems(extra, vllm_flag_table(run=False)) if extra else []


class ServerSlot:
    """The server this workbench serves from. It is one per machine (one GPU, one
    port), so every browser session shares it; launches are serialised."""

    def __init__(self, state_dir=None) -> None:
        self.state_dir = state_dir
        self.handle: server.ServerProcess | None = None
        self.keep_on_exit = False
        self.lock = threading.Lock()
        self.build_messages: list[str] = []

    def current(self) -> server.ServerProcess | None:
        handle = self.handle
        if handle is not None and handle.status is not server.Status.STOPPED:
            return handle
        return server.find_running(self.state_dir)

    def ready_server(self) -> tuple[str | None, str]:
        """(base_url, model) of a ready server, or (None, why not)."""
        handle = self.current()
        if handle is None:
            return None, "No server is running: launch one in the Server tab, or attach to one."
        if handle.status is server.Status.READY or (not handle.supervised and handle.refresh() is server.Status.READY):
            return handle.base_url, handle.model
        return None, f"The server at {handle.base_url} is {handle.status.value}."


@dataclass
class ServerTab:
    plan_md: gr.Markdown
    launch: gr.Button
    stop: gr.Button
    keep: gr.Checkbox
    attach_url: gr.Textbox
    attach_key: gr.Textbox
    attach: gr.Button
    status: gr.Markdown
    phases: gr.Dataframe
    log: gr.Code
    timer: gr.Timer


def status_markdown(handle: server.ServerProcess | None, build_messages: list[str] | None = None,
                    engine_note: str | None = None, launching: bool = False) -> str:
    """The server's status, phase, readiness, how it failed (with the fix) or stopped.
    `engine_note` says what the engine is when it is not the model's own (the CPU demo);
    `launching`: a launch is being prepared (the demo model built, weights fetched), no server yet."""
    if handle is None:
        if launching:
            # No "ready" or "starting" here: those words are the status itself.
            lines = ["**Preparing the launch:** vLLM starts once the model is at hand (the first launch of the "
                     "CPU demo builds it from the packaged GGUF, about 40 s)."]
        else:
            lines = ["**No server.** Press **Launch** to start the plan from the Recipe tab, or attach to a "
                     "running server."]
        if build_messages:
            lines += ["", "```", *build_messages[-6:], "```"]
        return "\n".join(lines)
    status = handle.status
    phase = handle.phase.label if handle.phase else "–"
    # A phase is where a server is now; a stopped or failed one is nowhere: say where it got to.
    where = (f"phase **{phase}**" if status in (server.Status.STARTING, server.Status.READY)
             else f"it had reached **{phase}**")
    lines = [f"**{status.value}** · {where} · `{handle.base_url}` · model `{handle.model}` · {handle.mode}"]
    if handle.time_to_ready_s is not None and handle.status is server.Status.READY:
        lines.append(f"Ready in **{handle.time_to_ready_s:.1f} s**.")
    if engine_note:
        lines.append(f"\nThis is {engine_note}.")
    if handle.diagnosis:
        d = handle.diagnosis
        exit_part = f" (exit code {handle.exit_code})" if handle.exit_code is not None else ""
        lines += ["", f"**Why it failed{exit_part}:** {d.summary}", f"**Fix:** {d.fix}"]
        if d.evidence:
            lines.append(f"\n`{d.evidence.strip()[:300]}`")
        if handle.log_path:
            lines.append(f"\nThe log is kept at `{handle.log_path}`.")
    if handle.stop_result:
        lines.append(f"Stopped: {handle.stop_result.stage.value} in {handle.stop_result.seconds:.1f} s.")
    return "\n".join(lines)


def phase_rows(handle: server.ServerProcess | None) -> list[list]:
    if handle is None:
        return []
    return [[p.phase.label, round(p.started_s, 1),
             "…" if p.duration_s is None else round(p.duration_s, 1), p.detail[:120]] for p in handle.phases]


def node_table(handle: server.ServerProcess | None) -> list[list]:
    """A row per node: the head, and the workers of a multi-node deployment."""
    if handle is None or handle.mode == "attach":
        return []
    return [[r["rank"], r["role"], r["host"], r["status"], r["phase"], r["pid"], str(r["detail"])[:120]]
            for r in node_rows(handle)]


def create_ui(slot: ServerSlot, plan_state: gr.State, catalog: Catalog) -> ServerTab:
    plan_md = gr.Markdown(elem_id="server-plan")
    with gr.Row():
        launch_btn = gr.Button("Launch", variant="primary", elem_id="server-launch")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="server-stop")
        keep = gr.Checkbox(False, label="Keep the server running when the workbench exits")
    with gr.Accordion("Attach to a server started elsewhere", open=False):
        with gr.Row():
            attach_url = gr.Textbox(label="URL", placeholder="http://127.0.0.1:8000", elem_id="attach-url")
            attach_key = gr.Textbox(label="API key (if the server has one)", type="password")
            attach_btn = gr.Button("Attach", elem_id="server-attach")
    status = gr.Markdown(status_markdown(None), elem_id="server-status")
    phases = gr.Dataframe(headers=["phase", "at (s)", "took (s)", "detail"], label="Start-up phases",
                          interactive=False, elem_id="server-phases")
    nodes = gr.Dataframe(headers=["node", "role", "host", "status", "phase", "pid", "detail"], label="Nodes",
                         interactive=False, elem_id="server-nodes")
    log = gr.Code(label="Log (last lines)", language="shell", lines=14, max_lines=14, interactive=False,
                  elem_id="server-log")
    agents_panel.create_ui(slot)
    timer = gr.Timer(1.0)
    tab = ServerTab(plan_md, launch_btn, stop_btn, keep, attach_url, attach_key, attach_btn, status, phases, log, timer)

    def show_plan(plan):
        if not plan:
            return "*Render a plan in the Recipe tab first.*"
        p = LaunchPlan.from_dict(plan)
        head = "**Will launch** " + ("(CPU demo engine)" if p.local_build else f"on {p.hardware}")
        if p.engine != "vllm":
            head = f"**{p.engine} preset:** rendered only; the workbench launches vLLM."
        text = f"{head}\n```bash\n{p.shell_command()}\n```"
        problems = page_plan_problems(p)
        return text + ("\n\n**Launch will refuse this plan:** " + "; ".join(problems) + "." if problems else "")

    plan_state.change(show_plan, plan_state, plan_md)

    def refresh():
        # The live server, else the last one this app had (to show how it ended).
        handle = slot.current() or slot.handle
        if handle is not None and not handle.supervised:
            handle.refresh()
        lines = without_exit_noise(handle.log_tail(LOG_LINES * 8))[-LOG_LINES:] if handle else []
        recipe_id = (handle.plan or {}).get("recipe_id") if handle else None
        note = catalog.recipes[recipe_id].engine_note if recipe_id in catalog.recipes else None
        return (status_markdown(handle, slot.build_messages, note, launching=slot.lock.locked()), phase_rows(handle),
                "\n".join(lines), node_table(handle))

    def do_launch(plan, keep_on_exit):
        if not plan:
            raise gr.Error("Render a plan in the Recipe tab first.")
        if not slot.lock.acquire(blocking=False):
            raise gr.Error("A launch is already in progress.")
        try:
            running = slot.current()
            if running is not None and running.status in (server.Status.READY, server.Status.STARTING):
                raise gr.Error(f"A server is already {running.status.value} at {running.base_url}: stop it first.")
            slot.build_messages = []
            try:
                launch_plan = checked_page_plan(plan, slot.build_messages.append)
                # Loopback, whatever the plan says: the page never chooses where the server listens.
                handle = server.launch(launch_plan, host=server.DEFAULT_HOST, state_dir=slot.state_dir,
                                         progress=slot.build_messages.append, stop_at_exit=not keep_on_exit)
            except WorkbenchError as exc:
                raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
            slot.handle = handle
        finally:
            slot.lock.release()
        return (*refresh(), gr.Timer(active=True))

    def do_stop():
        handle = slot.current()
        if handle is None:
            return (*refresh(), gr.Timer(active=True))
        handle.stop()
        slot.handle = handle  # one found by its record too: the status then says how it ended
        return (*refresh(), gr.Timer(active=True))

    def do_attach(url, key):
        try:
            slot.handle = server.attach(url.strip(), api_key=key or None, state_dir=slot.state_dir)
        except WorkbenchError as exc:
            raise gr.Error(f"{exc.message} {exc.hint or ''}", print_exception=False) from exc
        return (*refresh(), gr.Timer(active=True))

    outputs = [status, phases, log, nodes, timer]
    # Not in the app's API (docs, gradio_client): see SERVER_CONTROLS_NOTE.
    private: dict[str, Any] = {"api_visibility": "private"}
    launch_btn.click(do_launch, [plan_state, keep], outputs, concurrency_limit=1, concurrency_id="launch", **private)
    stop_btn.click(do_stop, None, outputs, **private)
    attach_btn.click(do_attach, [attach_url, attach_key], outputs, **private)
    timer.tick(refresh, None, [status, phases, log, nodes], show_progress="hidden", **private)
    return tab
