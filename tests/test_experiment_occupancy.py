"""Before an experiment starts its servers it looks for what holds the machine: a server the
workbench runs, a process on its port, GPU memory in use (replayed from a real H200's NVML).
A GPU experiment is refused (the CLI exits 2, offering --attach URL or `workbench stop`); a
CPU one starts beside the running server and says so. The Experiment tab shows each level's
figures as it finishes and keeps the results in experiments/<date-time>, linked.

The server "already running" is the tests' fixed-rate server started by the workbench's own
launcher (a local process group with a record, as `serve` leaves one): what the check looks
for is a running workbench server, whatever it serves; no vLLM is needed for that."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from tests.helpers.fixed_rate_server import MODEL
from workbench import cli
from workbench.errors import LaunchError
from workbench.experiment import ExperimentSettings, builtin_workload, configs_from_specs, new_experiment, run_experiment
from workbench.experiment.configs import ExperimentConfig
from workbench.experiment.occupancy import HolderKind, check_occupancy
from workbench.experiment.results import default_output_dir
from workbench.experiment.runner import occupancy_before
from workbench.recipes import Selection, load_catalog, render
from workbench.server import free_port, list_servers, start
from workbench.server.command import ServeCommand
from workbench.telemetry import MEMORY_UNIFIED, GpuReading, GpuSample, GpuSource
from workbench.telemetry.nvml import RecordedSeries

ROOT = Path(__file__).resolve().parent.parent
H200 = json.loads((ROOT / "tests/fixtures/nvidia-h200-telemetry-v2/nvml-recording.json").read_text())


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture
def state(tmp_path, monkeypatch):
    folder = tmp_path / "servers"
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(folder))
    return folder


@pytest.fixture
def running_here(state):
    """A server the workbench started and recorded, ready, on a free port."""
    port = free_port()
    handle = start(ServeCommand(mode="local", port=port, served_model=MODEL, argv=[
        sys.executable, "-m", "tests.helpers.fixed_rate_server", "--port", str(port), "--decode-rate", "400"]),
        state_dir=state)
    handle.wait_ready(30)
    yield handle
    handle.stop()


def _experiment(catalog, hardware: str, specs: str, **settings):
    configs = configs_from_specs(specs, Selection(hardware=hardware), catalog)
    return new_experiment(configs, ExperimentSettings(concurrency=[1], **settings), builtin_workload())


def test_a_gpu_experiment_is_refused_while_a_server_runs_here(catalog, running_here, state, tmp_path, capsys):
    out = tmp_path / "results"
    code = cli.main(["experiment", "--hardware", "h200", "--spec", "off", "--concurrency", "1",
                     "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"A workbench server is ready at {running_here.base_url}" in err
    assert "two servers do not fit one GPU's memory: nothing was started" in err
    assert f"python -m workbench experiment --attach {running_here.base_url}" in err
    assert "python -m workbench stop" in err
    assert not out.exists()  # refused before anything was made
    assert [s.base_url for s in list_servers(state)] == [running_here.base_url] and running_here.is_alive()
    # The core refuses too (a notebook calls run_experiment directly).
    with pytest.raises(LaunchError, match="two servers do not fit"):
        run_experiment(_experiment(catalog, "h200", "off"), tmp_path / "nb", catalog, state_dir=state)
    assert not (tmp_path / "nb" / "state.json").exists()


def test_a_cpu_experiment_starts_beside_it_and_says_so(catalog, running_here, state):
    occupancy = occupancy_before(_experiment(catalog, "cpu", "off"), catalog, port=free_port(), state_dir=state)
    assert occupancy is not None and not occupancy.blocking and occupancy.server.url == running_here.base_url
    [line] = occupancy.lines()
    assert f"A workbench server is ready at {running_here.base_url}" in line
    assert "this experiment starts its own vLLM beside it" in line and "attach" in line
    from workbench.ui.experiment_tab import machine_outputs

    text, row = machine_outputs(occupancy)
    assert "beside it" in text and row.visible is True


def test_a_process_on_the_port_only_moves_the_servers(catalog, state):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        for hardware in ("cpu", "h200"):
            plans = [render(Selection(hardware=hardware), catalog)]
            occupancy = check_occupancy(plans, catalog, port=port, state_dir=state,
                                        gpus=GpuSource(nvml=lambda: RecordedSeries(H200["phases"]["idle"][:1])).read)
            [holder] = occupancy.holders
            assert holder.kind is HolderKind.PORT and f"Port {port} is held by pid" in holder.description
            assert not occupancy.blocking and "listen on a free port instead" in occupancy.lines()[0]


def test_gpu_memory_another_process_holds_refuses_a_gpu_experiment(catalog, state):
    """Replayed: NVML on an H200 while another process ran a matmul loop (1.19 GB in use), and idle."""
    plans = [render(Selection(hardware="h200"), catalog)]
    loaded = GpuSource(nvml=lambda: RecordedSeries(H200["phases"]["load"][-1:]))
    occupancy = check_occupancy(plans, catalog, port=free_port(), state_dir=state, gpus=loaded.read)
    [holder] = occupancy.blocking
    assert holder.description == "GPU 0 (NVIDIA H200) has 1.11 GiB of 140.4 GiB in use by other processes"
    error = occupancy.error()
    assert "nothing was started" in error.message and "nvidia-smi lists it" in error.hint
    idle = GpuSource(nvml=lambda: RecordedSeries(H200["phases"]["idle"][:1]))
    assert not check_occupancy(plans, catalog, port=free_port(), state_dir=state, gpus=idle.read).holders
    # The same memory in use does not stop a CPU experiment (it is not read for one).
    cpu = [render(Selection(hardware="cpu"), catalog)]
    assert not check_occupancy(cpu, catalog, port=free_port(), state_dir=state, gpus=loaded.read).blocking
    # On unified memory (DGX Spark) "used" is the machine's RAM in use: not taken for another process's GPU memory.
    spark = [render(Selection(hardware="dgx_spark_gb10"), catalog)]
    unified = GpuReading(0.0, "nvml", (GpuSample(0, "NVIDIA GB10", memory_used_bytes=30 * 2**30,
                                                 memory_total_bytes=121 * 2**30, memory_source=MEMORY_UNIFIED),))
    assert not check_occupancy(spark, catalog, port=free_port(), state_dir=state, gpus=lambda: unified).holders


def test_the_tab_shows_each_level_as_it_finishes_and_keeps_the_results(catalog, running_here, tmp_path):
    from workbench.ui.experiment_tab import LEVEL_COLUMNS, run_updates

    settings = ExperimentSettings(concurrency=[1, 2, 4], requests_per_level=2, output_tokens=8, warmup_requests=0,
                                  attach_url=running_here.base_url)
    experiment = new_experiment([ExperimentConfig("attached", Selection())], settings, builtin_workload())
    folder = tmp_path / "experiments" / "run"
    updates = list(run_updates(experiment, folder, lambda report: run_experiment(
        experiment, folder, catalog, progress=report), "plan"))
    tables = [u[3] for u in updates if not isinstance(u[3], dict)]  # (progress, winners, quality, levels, ...)
    assert list(tables[0].columns) == LEVEL_COLUMNS
    # One table per finished level, before the end: 1 row, then 2, then 3.
    assert [len(t) for t in tables[:3]] == [1, 2, 3] and list(tables[0]["concurrency"]) == [1]
    assert len(updates) > len(tables) + 1  # progress lines between them
    final = updates[-1][0]
    assert final.startswith("**Done.**") and f"Results in `{folder}` (kept)" in final
    assert "[Open the report](gradio_api/file=" in final and (folder / "report.html").is_file()


def test_results_go_to_a_kept_folder_the_app_serves(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_output_dir().parent == Path("experiments")
    from workbench.ui.app import build_app

    app = build_app(state_dir=tmp_path / "state", default_hardware="cpu")
    try:
        assert app.allowed_paths == (str(tmp_path.resolve() / "experiments"),)
    finally:
        app.close()
