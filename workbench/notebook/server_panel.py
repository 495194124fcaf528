"""ServerPanel (a server's phases and log tail) and ensure_server for notebooks.

Notebooks share servers to keep CI affordable: `ensure_server(plan)` reuses a
running server that the workbench started for the same command (the core's
workbench.server.ensure_server), and `NotebookServer.release()` stops a server
only if this notebook started it and WORKBENCH_KEEP_SERVER=1 is not set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ipywidgets as W
from IPython.display import display

from workbench import server
from workbench.notebook.html import esc, pre
from workbench.recipes import LaunchPlan

__all__ = ["KEEP_SERVER_ENV", "NotebookServer", "ServerPanel", "ensure_server"]

KEEP_SERVER_ENV = "WORKBENCH_KEEP_SERVER"
_STATUS_COLOURS = {"ready": "#198754", "failed": "#b02a37", "stopped": "#6c757d"}


class ServerPanel:
    """A server's status line (phases as they pass) and the tail of its log."""

    def __init__(self, title: str = "vLLM server", log_lines: int = 12) -> None:
        self.title = title
        self.log_lines = log_lines
        self.handle: server.ServerProcess | None = None
        self._messages: list[str] = []  # before the process exists: model build progress
        self.status = W.HTML(f"<b>{esc(title)}</b>: not started")
        self.log = W.HTML()
        self.widget = W.VBox([self.status, self.log])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def message(self, text: str) -> None:
        self._messages.append(text)
        self.log.value = pre("\n".join(self._messages[-self.log_lines:]), height="14em")

    def follow(self, handle: server.ServerProcess) -> None:
        self.handle = handle
        self.redraw()

    def on_event(self, _event: server.ServerEvent) -> None:
        # Called on the launcher's watcher thread; widgets may be updated from any thread.
        self.redraw()

    def redraw(self) -> None:
        h = self.handle
        if h is None:
            return
        done = {r.phase for r in h.phases}
        chips = []
        for phase in server.PHASE_ORDER:
            if phase not in done and phase in (server.StartupPhase.COMPILING, server.StartupPhase.CAPTURING_GRAPHS):
                continue  # the CPU engine with --enforce-eager skips these
            record = next((r for r in h.phases if r.phase is phase), None)
            if record is None:
                chips.append(f'<span style="color: #adb5bd">{phase.label}</span>')
            else:
                took = f" {record.duration_s:.1f}s" if record.duration_s else ""
                chips.append(f'<span style="color: #198754">✔ {phase.label}{took}</span>')
        colour = _STATUS_COLOURS.get(h.status.value, "#0d6efd")
        line = (f"<b>{esc(self.title)}</b>: <span style='color: {colour}'><b>{h.status.value}</b></span> · "
                f"<code>{esc(h.base_url)}</code> · model <code>{esc(h.model)}</code><br>" + " → ".join(chips))
        kv = next((r for r in h.phases if r.phase is server.StartupPhase.KV_CACHE), None)
        if kv is not None and kv.detail:
            line += f"<br><small>{esc(kv.detail)}</small>"
        if h.diagnosis is not None and h.status is server.Status.FAILED:
            line += f"<br><b style='color: #b02a37'>{esc(h.diagnosis.summary)}</b><br><i>{esc(h.diagnosis.fix)}</i>"
        self.status.value = line
        tail = h.log_tail(self.log_lines)
        if tail or not self._messages:
            self.log.value = pre("\n".join(tail) or "(no log: attached to a server started elsewhere)", height="14em")


@dataclass
class NotebookServer:
    """The server a notebook uses; `launched` says whether this notebook started it."""

    handle: server.ServerProcess
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
                       f"Stop it with: python -m workbench stop --server-port {self.handle.port}")
        else:
            result = self.handle.stop()
            message = f"Stopped the server this notebook started ({result.stage.value} in {result.seconds:.1f} s)."
        self.panel.redraw()
        self.panel.status.value += f"<br>{esc(message)}"
        return message


def ensure_server(plan: LaunchPlan, *, state_dir: str | Path | None = None, timeout: float = 900.0,
                  title: str | None = None, panel: ServerPanel | None = None) -> NotebookServer:
    """Reuse a running workbench server started for the same command, or launch `plan`,
    while `panel` (displayed by the caller, or by this function) shows the phases and the log."""
    if panel is None:
        panel = ServerPanel(title or f"vLLM server for {plan.served_model_name}")
        display(panel)
    keep = os.environ.get(KEEP_SERVER_ENV) == "1"
    try:
        found = server.ensure_server(plan, state_dir=state_dir, timeout=timeout, on_event=panel.on_event,
                                     on_handle=panel.follow, progress=panel.message, stop_at_exit=not keep)
    finally:
        panel.redraw()
    return NotebookServer(found.handle, found.launched, panel, found.note)
