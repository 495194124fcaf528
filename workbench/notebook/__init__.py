"""ipywidgets views for the notebooks: thin renderers over the workbench's core.

    recipe_picker.py    RecipePicker: recipes.choices + render -> command, docker command, provenance
    server_panel.py     ServerPanel, ensure_server (server.ensure_server) -> NotebookServer
    chat_view.py        ChatView: chat.TurnTranscript -> reasoning | answer | tool calls
    throughput_view.py  ThroughputView: metrics.MetricsPoller -> live figures
    bench_view.py       BenchView: bench.run_benchmark -> progress, summary, model-card figures
    experiment_view.py  ExperimentView: experiment.run_experiment -> plan, progress, winners, curves
    checks.py           checks_table: server.environment's checks

None talks HTTP to vLLM or redoes the core's work; every view owns its state.
"""

from workbench.notebook.bench_view import BenchView, bench_figures, bench_table, reference_table
from workbench.notebook.chat_view import ChatView
from workbench.notebook.experiment_view import ExperimentView, experiment_summary
from workbench.notebook.checks import checks_table
from workbench.notebook.recipe_picker import RecipePicker
from workbench.notebook.server_panel import KEEP_SERVER_ENV, NotebookServer, ServerPanel, ensure_server
from workbench.notebook.throughput_view import ThroughputView

__all__ = [
    "KEEP_SERVER_ENV",
    "BenchView",
    "ChatView",
    "ExperimentView",
    "NotebookServer",
    "RecipePicker",
    "ServerPanel",
    "ThroughputView",
    "bench_figures",
    "bench_table",
    "checks_table",
    "ensure_server",
    "experiment_summary",
    "reference_table",
]
