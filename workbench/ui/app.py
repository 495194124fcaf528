"""The Gradio app: Recipe → Server → Chat → Throughput → Benchmark.

`build_app()` returns a WorkbenchApp (the Blocks, importable by tests, and the
server slot it drives); `serve_app()` launches it. The server slot and the
metrics poller are shared by every browser session: they stand for the one vLLM
server of this machine. Everything else (the chat session, the conversation) is
per session.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from workbench._version import __version__
from workbench.errors import InputError, WorkbenchError
from workbench.experiment.results import EXPERIMENTS_DIR
from workbench.metrics import SharedPoller
from workbench.recipes import load_catalog, recipe_for_hardware
from workbench.server.hardware import detect
from workbench.ui import bench_tab, chat_tab, experiment_tab, recipe_tab, server_tab, throughput_tab
from workbench.ui.exports import GRADIO_CACHE_CLEANUP
from workbench.ui.guards import HostCheck, LoginThrottle, allowed_hosts
from workbench.workshop.settings import check_password

# Pauses the page's timers while the browser tab is hidden, and resumes the
# visible tab's timer when it comes back, so a background tab costs nothing.
VISIBILITY_JS = """
() => {
  document.addEventListener('visibilitychange', () => {
    const id = document.hidden ? 'timers-pause' : 'timers-resume';
    const button = document.getElementById(id);
    if (button) button.click();
  });
}
"""

# Options every launch of the app passes (Gradio 6 takes `js` at launch time).
LAUNCH_OPTIONS = {"js": VISIBILITY_JS}

TAB_NAMES = ("recipe", "server", "chat", "throughput", "benchmark", "experiment")


@dataclass
class WorkbenchApp:
    """The Blocks and what they drive: the shared server slot and metrics poller."""

    blocks: gr.Blocks
    slot: server_tab.ServerSlot
    poller: SharedPoller
    # Folders the page links into (the experiments' results, their reports opened in the browser).
    allowed_paths: tuple[str, ...] = ()

    def launch(self, **kwargs: Any) -> Any:
        return self.blocks.launch(**{**LAUNCH_OPTIONS, "allowed_paths": list(self.allowed_paths), **kwargs})

    def close(self) -> None:
        self.blocks.close()


@dataclass
class AppParts:
    """What an extra tab may build on: the shared server slot and poller, the Recipe tab's plan."""

    slot: server_tab.ServerSlot
    poller: SharedPoller
    plan: gr.State
    catalog: Any


# (tab label, builder): the builder lays out the tab's content and returns its live
# timer (run only while the tab is visible) or None. The workshop's Room tab is one.
ExtraTab = tuple[str, Callable[[AppParts], "gr.Timer | None"]]


def build_app(state_dir: str | Path | None = None, default_hardware: str | None = None,
              chat_request_hook=None, extra_tab: ExtraTab | None = None,
              experiments_dir: str | Path | None = None) -> WorkbenchApp:
    """The app. `chat_request_hook` (see ChatSession) lets a demo or a test force
    what a random-weight model says; the default sends requests unchanged.
    `extra_tab` adds a tab after Benchmark (the workshop's Room). `experiments_dir`:
    where experiments' results go (default experiments/ in the current folder)."""
    results_root = Path(experiments_dir or EXPERIMENTS_DIR).resolve()
    catalog = load_catalog()
    hardware = default_hardware or detect()
    slot = server_tab.ServerSlot(state_dir)

    def server_url() -> str | None:
        return slot.ready_server()[0]

    poller = SharedPoller(server_url, interval=throughput_tab.TICK_S, window=throughput_tab.WINDOW_S)

    def chat_server() -> str:
        url, why = slot.ready_server()
        if url is None:
            raise WorkbenchError(why, hint="Launch or attach in the Server tab, then send again.")
        return url

    default_recipe = recipe_for_hardware(catalog, hardware)[0]
    with gr.Blocks(title="Nemotron vLLM Workbench", delete_cache=GRADIO_CACHE_CLEANUP) as demo:
        header = (f"## Nemotron vLLM Workbench <small>v{__version__}</small>\n"
                  "Serve NVIDIA Nemotron 3.5 Lightning with vLLM: pick a recipe, launch, chat, measure.")
        if default_recipe.engine_note:
            header += (f"\n\n> No NVIDIA GPU here: preselected is {default_recipe.engine_note}. "
                       "The GPU recipes still render.")
        gr.Markdown(header)
        active_tab = gr.State("recipe")
        saved_chat = chat_tab.browser_state()
        with gr.Tabs():
            with gr.Tab("Recipe", id="recipe") as t_recipe:
                recipe = recipe_tab.create_ui(catalog, hardware)
            with gr.Tab("Server", id="server") as t_server:
                server = server_tab.create_ui(slot, recipe.plan, catalog)
            with gr.Tab("Chat", id="chat") as t_chat:
                strip = gr.Markdown(throughput_tab.strip_markdown(None), elem_id="chat-strip")
                strip_timer = gr.Timer(2.0, active=False)
                chat = chat_tab.create_ui(chat_server, request_hook=chat_request_hook,
                                          sampling=default_recipe.workbench.get("chat_defaults"),
                                          saved=saved_chat)
            with gr.Tab("Throughput", id="throughput") as t_throughput:
                throughput = throughput_tab.create_ui(poller)
            with gr.Tab("Benchmark", id="benchmark") as t_bench:
                bench_tab.create_ui(server_url)
            with gr.Tab("Experiment", id="experiment") as t_experiment:
                experiment = experiment_tab.create_ui(catalog, hardware, state_dir, results_root)
            extra_timer, tabs = None, [t_recipe, t_server, t_chat, t_throughput, t_bench, t_experiment]
            if extra_tab is not None:
                with gr.Tab(extra_tab[0], id="extra") as t_extra:
                    extra_timer = extra_tab[1](AppParts(slot, poller, recipe.plan, catalog))
                tabs.append(t_extra)
        pause = gr.Button("pause", elem_id="timers-pause", visible="hidden")
        resume = gr.Button("resume", elem_id="timers-resume", visible="hidden")

        strip_timer.tick(lambda: throughput_tab.strip_markdown(poller.tick()), None, strip, show_progress="hidden")

        # One live timer at a time: the visible tab's.
        timers = {"server": server.timer, "chat": strip_timer, "throughput": throughput.timer}
        if extra_timer is not None:
            timers["extra"] = extra_timer
        timer_list = list(timers.values())

        def activate(name: str):
            return [name, *[gr.Timer(active=(key == name)) for key in timers]]

        # Restore the saved chat when its tab opens: a component in a tab that
        # was hidden at page load does not keep a value set by demo.load.
        t_chat.select(chat_tab.restore, [chat.saved, chat.chatbot], chat.chatbot, show_progress="hidden")
        # What already holds the machine (a server the Server tab runs), said before a run is pressed.
        t_experiment.select(experiment.check_machine, experiment.inputs, [experiment.machine, experiment.occupied],
                            show_progress="hidden")
        for name, tab in zip((*TAB_NAMES, "extra"), tabs):
            tab.select(lambda n=name: activate(n), None, [active_tab, *timer_list], show_progress="hidden")
        pause.click(lambda: [gr.Timer(active=False) for _ in timers], None, timer_list, queue=False)
        resume.click(lambda name: activate(name)[1:], active_tab, timer_list, queue=False)

        def on_load(saved, *recipe_values):
            return (chat_tab.restore(saved), *recipe_tab.render_outputs(catalog, *recipe_values))

        demo.load(on_load, [chat.saved, *recipe.inputs],
                  [chat.chatbot, recipe.summary, recipe.command, recipe.docker, recipe.provenance, recipe.plan])
    return WorkbenchApp(demo, slot, poller, (str(results_root),))


# Files a view of the single-user UI may take (a saved chat, a plan): none is larger.
MAX_FILE_SIZE = "20mb"


def guard_middleware(host: str, share: bool) -> list[Any]:
    """The app's own middleware: answer only its host names (a share link's name is
    Gradio's, and wildcard binds need --auth), and throttle wrong --auth logins."""
    return [Middleware(HostCheck, hosts=None if share else allowed_hosts(host)), Middleware(LoginThrottle)]


def serve_app(host: str = "127.0.0.1", port: int = 7860, auth: tuple[str, str] | None = None,
              share: bool = False, state_dir: str | None = None, open_browser: bool = False) -> None:
    app = build_app(state_dir=state_dir)
    # api_open=False: queued events only through the queue, not as direct REST calls.
    app.blocks.queue(default_concurrency_limit=8, api_open=False)
    app.launch(server_name=host, server_port=port, auth=auth, share=share, inbrowser=open_browser,
               show_error=True, max_file_size=MAX_FILE_SIZE,
               app_kwargs={"middleware": guard_middleware(host, share)})


def auth_from(value: str | None) -> tuple[str, str] | None:
    value = value or os.environ.get("WORKBENCH_AUTH")
    if not value:
        return None
    if ":" not in value:
        raise InputError("The UI's login must look like user:password.", hint="For example admin:a-long-secret",
                         settings=("auth",))
    user, password = value.split(":", 1)
    if not user.strip() or not password:
        raise InputError("The UI's login needs both a user name and a password (user:password); one is empty.",
                         hint="For example admin:a-long-secret", settings=("auth",))
    check_password(password, "The UI login's", "admin:a-long-secret", setting="auth")
    return user, password
