"""Nemotron vLLM Workbench: render, launch, chat with and measure vLLM servers.

The flow, one subpackage per stage:

    recipes/   YAML catalog --render(Selection)--> LaunchPlan (with the known issues it meets)
    planner/   LaunchPlan + config.json --plan_memory--> MemoryPlan (KV cache, concurrency vs context)
    deploy/    LaunchPlan --render_manifests--> Kubernetes YAML (Deployment, LeaderWorkerSet, Helm values)
    server/    LaunchPlan --launch--> ServerProcess (phases, log, diagnosis, stop)
    chat/      base_url --ChatSession.stream--> typed events --TurnTranscript--> a view
    agents/    base_url --verify_endpoint--> VerifyReport;  --render_harness--> an agent harness's config
    metrics/   base_url --MetricsPoller--> ThroughputFigures
    telemetry/ this machine's GPUs --read_gpus/GpuPoller--> GpuReading (NVML; nvidia-smi; or none)
    bench/     base_url --run_benchmark--> BenchResult
    experiment/ configurations x concurrency --run_experiment--> winners, crossover, report.html
    ui/        the Gradio app;  notebook/  the ipywidgets views;  cli/  the command line
    demo/      the CPU demo's local models and forcing

The names below are the notebook user's API. Each is imported on first use, so
`import workbench` stays cheap for the command line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workbench._version import __version__

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # recipes
    "Catalog": "workbench.recipes",
    "LaunchPlan": "workbench.recipes",
    "Selection": "workbench.recipes",
    "load_catalog": "workbench.recipes",
    "provenance_rows": "workbench.recipes",
    "render": "workbench.recipes",
    # planner
    "MemoryPlan": "workbench.planner",
    "plan_memory": "workbench.planner",
    "startup_capacity": "workbench.planner",
    # Kubernetes manifests
    "DeployOptions": "workbench.deploy",
    "render_manifests": "workbench.deploy",
    "validate_manifests": "workbench.deploy",
    # server
    "ServerProcess": "workbench.server",
    "attach": "workbench.server",
    "detect_hardware": "workbench.server.hardware",
    "environment_checks": "workbench.server.environment",
    "day_of_checks": "workbench.workshop.day_of",
    "find_running": "workbench.server",
    "launch": "workbench.server",
    "list_servers": "workbench.server",
    # demo
    "build_forcing_model": "workbench.demo.models",
    "forcing_extra_body": "workbench.demo.forcing",
    "forcing_plan": "workbench.demo.forcing",
    "reasoning_then_answer": "workbench.demo.forcing",
    "reasoning_then_tool_call": "workbench.demo.forcing",
    "special_token_ids": "workbench.demo.models",
    # chat
    "ChatOptions": "workbench.chat",
    "ChatSession": "workbench.chat",
    "McpConnections": "workbench.chat.tools",
    "ToolApprovals": "workbench.chat.approval",
    "ToolRegistry": "workbench.chat.tools",
    "builtin_tools": "workbench.chat.tools",
    # metrics
    "MetricsPoller": "workbench.metrics",
    # telemetry (the GPUs beside the server)
    "GpuPoller": "workbench.telemetry",
    "read_gpus": "workbench.telemetry",
    # bench
    "BenchConfig": "workbench.bench",
    "DGX_SPARK_REFERENCE": "workbench.bench",
    "check_fits": "workbench.bench",
    "preset_config": "workbench.bench",
    "run_benchmark": "workbench.bench",
    # agents
    "ExpectedParsers": "workbench.agents.verify",
    "connection_for": "workbench.agents.harnesses",
    "render_harness": "workbench.agents.harnesses",
    "verify_endpoint": "workbench.agents.verify",
    "verify_request_fields": "workbench.demo.forcing",
    # experiments
    "ExperimentConfig": "workbench.experiment",
    "ExperimentSettings": "workbench.experiment",
    "QualitySettings": "workbench.experiment",
    "builtin_workload": "workbench.experiment",
    "configs_from_specs": "workbench.experiment",
    "load_dataset": "workbench.experiment",
    "load_experiment": "workbench.experiment",
    "new_experiment": "workbench.experiment",
    "run_experiment": "workbench.experiment",
    "SloSearch": "workbench.experiment",
    "parse_slos": "workbench.experiment",
    # errors: every class of the tree, so a notebook can catch exactly what it means
    "BenchError": "workbench.errors",
    "BenchShapeError": "workbench.errors",
    "BenchStopped": "workbench.errors",
    "InputError": "workbench.errors",
    "LaunchError": "workbench.errors",
    "MetricsError": "workbench.errors",
    "PlannerError": "workbench.errors",
    "RecipeError": "workbench.errors",
    "RoomError": "workbench.errors",
    "SelectionError": "workbench.errors",
    "ToolError": "workbench.errors",
    "WorkbenchError": "workbench.errors",
    # notebook views
    "BenchView": "workbench.notebook",
    "ChatView": "workbench.notebook",
    "ExperimentView": "workbench.notebook",
    "RecipePicker": "workbench.notebook",
    "ServerPanel": "workbench.notebook",
    "ThroughputView": "workbench.notebook",
    "bench_figures": "workbench.notebook",
    "bench_table": "workbench.notebook",
    "checks_table": "workbench.notebook",
    "ensure_server": "workbench.notebook",
    "experiment_summary": "workbench.notebook",
    "reference_table": "workbench.notebook",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from workbench.agents.harnesses import connection_for, render_harness
    from workbench.agents.verify import ExpectedParsers, verify_endpoint
    from workbench.bench import DGX_SPARK_REFERENCE, BenchConfig, check_fits, preset_config, run_benchmark
    from workbench.chat import ChatOptions, ChatSession
    from workbench.chat.approval import ToolApprovals
    from workbench.chat.tools import McpConnections, ToolRegistry, builtin_tools
    from workbench.demo.forcing import (
        forcing_extra_body,
        forcing_plan,
        reasoning_then_answer,
        reasoning_then_tool_call,
        verify_request_fields,
    )
    from workbench.demo.models import build_forcing_model, special_token_ids
    from workbench.deploy import DeployOptions, render_manifests, validate_manifests
    from workbench.errors import (
        BenchError,
        BenchShapeError,
        BenchStopped,
        InputError,
        LaunchError,
        MetricsError,
        PlannerError,
        RecipeError,
        RoomError,
        SelectionError,
        ToolError,
        WorkbenchError,
    )
    from workbench.experiment import (
        ExperimentConfig,
        ExperimentSettings,
        QualitySettings,
        SloSearch,
        builtin_workload,
        configs_from_specs,
        load_dataset,
        load_experiment,
        new_experiment,
        parse_slos,
        run_experiment,
    )
    from workbench.metrics import MetricsPoller
    from workbench.telemetry import GpuPoller, read_gpus
    from workbench.notebook import (
        BenchView,
        ChatView,
        ExperimentView,
        RecipePicker,
        ServerPanel,
        ThroughputView,
        bench_figures,
        bench_table,
        checks_table,
        ensure_server,
        experiment_summary,
        reference_table,
    )
    from workbench.planner import MemoryPlan, plan_memory, startup_capacity
    from workbench.recipes import Catalog, LaunchPlan, Selection, load_catalog, provenance_rows, render
    from workbench.server import ServerProcess, attach, find_running, launch, list_servers
    from workbench.server.hardware import detect_hardware
    from workbench.server.environment import environment_checks
    from workbench.workshop.day_of import day_of_checks
