"""GPU telemetry: NVML's raw answers recorded on a real H200 replayed through the same parsing.

The recordings (tests/fixtures/nvidia-h200-telemetry/, made by benchmarks/gpu_probe.py
on one H200 while a bf16 matmul loop loaded it; tests/fixtures/nvidia-h200-nvml/, an
earlier session's) hold what NVML and nvidia-smi returned; nothing here is invented
except the GB10 cases, which are built from the documented "Not Supported" answer.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.server.hardware import detect_hardware
from workbench.telemetry import (
    MEMORY_UNIFIED, GpuPoller, GpuReading, GpuSource, RecordedNvml, format_gpu_table, summarize_readings,
)
from workbench.telemetry.nvml import (
    NvmlFieldUnavailable, NvmlUnavailable, RecordedSeries, record_nvml, sample_from_nvml, throttle_reason_names,
)
from workbench.telemetry.smi import SMI_QUERY_ARGS, parse_smi_csv

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "nvidia-h200-telemetry"
OLD = ROOT / "tests" / "fixtures" / "nvidia-h200-nvml"
RECORDING = json.loads((FIX / "nvml-recording.json").read_text())
PHASES = RECORDING["phases"]
MEMINFO_SPARK = "MemTotal:       127535352 kB\nMemFree:        60000000 kB\nMemAvailable:   100000000 kB\n"


def replay(recording: dict) -> GpuSource:
    return GpuSource(nvml=lambda: RecordedNvml(recording), which=lambda name: None)


def readings(phase: str) -> list[GpuReading]:
    out = []
    for recording in PHASES[phase]:
        r = replay(recording).read()
        out.append(GpuReading(recording["taken_at"], r.source, r.gpus, r.driver_version))
    return out


def test_idle_h200_reads_as_nvidia_smi_shows_it():
    [gpu] = readings("idle")[0].gpus
    assert gpu.name == "NVIDIA H200" and gpu.compute_capability == "9.0"
    assert gpu.utilization_pct == 0 and gpu.sm_clock_mhz == 345 and gpu.throttle_reasons == ("gpu_idle",)
    assert gpu.power_limit_w == 700.0 and 60 < gpu.power_w < 130
    # nvidia-smi -q of the same GPU: Total 143771 MiB.
    assert gpu.memory_total_bytes == 143771 * 1024 * 1024
    assert "Total                                          : 143771 MiB" in (FIX / "nvidia-smi-q.txt").read_text()


def test_load_reads_full_utilization_near_the_power_limit_and_the_power_cap():
    load = readings("load")
    assert len(load) >= 10
    settled = load[len(load) // 2:]
    for reading in settled:
        [g] = reading.gpus
        assert g.utilization_pct == 100
        assert g.power_pct_of_limit > 93, g  # ~690 of 700 W
        assert "sw_power_cap" in g.throttle_reasons and g.sm_clock_mhz > 1000
    # and the idle state after the load stopped
    [last] = readings("after")[-1].gpus
    assert last.utilization_pct == 0 and last.power_w < 130 and last.throttle_reasons == ("gpu_idle",)


def test_the_table_shows_the_load_and_matches_the_live_tables_layout():
    [reading] = readings("load")[-1:]
    table = format_gpu_table(reading)
    assert "via nvml" in table and "NVIDIA H200  100 %" in table and "/ 700 W" in table and "sw_power_cap" in table
    live = (FIX / "live-table.txt").read_text()
    header = table.splitlines()[1].split()
    assert header == next(ln for ln in live.splitlines() if ln.strip().startswith("GPU  name")).split()


def test_the_recorded_live_table_saw_the_load_within_a_second():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_probe import table_blocks

    import datetime as dt
    started = RECORDING["load"]["started"]
    day = dt.datetime.fromtimestamp(started, dt.timezone.utc)  # the H200 ran on UTC
    start_s = day.hour * 3600 + day.minute * 60 + day.second + day.microsecond / 1e6
    blocks = table_blocks((FIX / "live-table.txt").read_text())
    busy = [b for b in blocks if b[0] >= start_s and b[1] >= 90]
    assert busy and busy[0][0] - start_s < 1.0
    assert max(b[2] for b in busy) > 650 and blocks[-1][1] == 0 and blocks[-1][2] < 130


def test_gpu_once_json_printed_on_the_h200_is_a_reading():
    reading = GpuReading.from_dict(json.loads((FIX / "gpu-once-idle.json").read_text()))
    assert reading.source == "nvml" and reading.driver_version == "580.159.04"
    assert reading.gpus[0].name == "NVIDIA H200" and "NVIDIA H200  0 %" in format_gpu_table(reading)


def test_the_earlier_sessions_recording_replays_too():
    samples = [s for s in json.loads((OLD / "nvml.json").read_text())["samples"] if s.get("phase") == "load"]
    for s in samples[-3:]:
        recording = {"driver_version": s["driver"], "devices": [{
            "name": s["name"], "memory": {"unavailable": "not recorded"},
            "utilization": {"gpu": s["util"][0], "memory": s["util"][1]}, "power_mw": s["power_mw"],
            "power_limit_mw": s["power_limit_mw"], "sm_clock_mhz": s["sm_clock"], "temperature_c": s["temp"],
            "compute_capability": s["cc"]}]}
        [g] = replay(recording).read().gpus
        assert g.utilization_pct == 100 and g.power_w > 600 and g.memory_total_bytes is None
        assert "not reported" in format_gpu_table(replay(recording).read())


def test_nvidia_smi_fallback_parses_the_recorded_csv():
    [idle], driver = parse_smi_csv((FIX / "smi-query-idle.csv").read_text())
    assert driver == "580.159.04" and idle.sm_clock_mhz == 345 and idle.power_limit_w == 700.0
    assert idle.memory_total_bytes == 143771 * 1024 * 1024 and idle.memory_used_bytes == 0
    [load], _ = parse_smi_csv((FIX / "smi-query-load.csv").read_text())
    assert load.utilization_pct > 0 and load.power_w > idle.power_w and load.sm_clock_mhz > 1000
    # the earlier recording's header names (with units) parse the same way
    [old], _ = parse_smi_csv((OLD / "query-gpu-idle.csv").read_text())
    assert old.name == "NVIDIA H200" and old.temperature_c == 38 and old.sm_clock_mhz == 375


def test_source_falls_back_to_nvidia_smi_then_says_no_gpu(tmp_path):
    def no_nvml():
        raise NvmlUnavailable("NVML did not start: NVML Shared Library Not Found")

    seen = []

    def runner(argv):
        seen.append(argv)
        return (FIX / "smi-query-idle.csv").read_text()

    reading = GpuSource(nvml=no_nvml, runner=runner).read()
    assert seen == [SMI_QUERY_ARGS] and reading.source == "nvidia-smi" and reading.gpus[0].name == "NVIDIA H200"
    assert "NVML" in reading.notes[0]
    none = GpuSource(nvml=no_nvml, which=lambda name: None).read()
    assert none.source == "none" and not none.gpus and "nvidia-smi was not found" in none.reason
    assert format_gpu_table(none).endswith(f"no NVIDIA GPU on this machine ({none.reason})")

    def failing(argv):
        raise subprocess.CalledProcessError(9, argv)
    assert "nvidia-smi failed" in GpuSource(nvml=no_nvml, runner=failing).read().reason


def test_unified_memory_comes_from_meminfo_labelled(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO_SPARK)
    gb10 = {"driver_version": "580.95.05", "devices": [{
        "name": "NVIDIA GB10", "memory": {"unavailable": "Not Supported"}, "utilization": {"gpu": 37, "memory": 0},
        "power_mw": 31000, "power_limit_mw": {"unavailable": "Not Supported"}, "compute_capability": [12, 1]}]}
    reading = GpuSource(nvml=lambda: RecordedNvml(gb10), meminfo=meminfo).read()
    [g] = reading.gpus
    assert g.memory_source == MEMORY_UNIFIED and g.memory_total_bytes == 127535352 * 1024
    assert g.memory_used_bytes == (127535352 - 100000000) * 1024 and g.power_limit_w is None
    assert "(unified, /proc/meminfo)" in format_gpu_table(reading) and "31 W" in format_gpu_table(reading)
    detection = detect_hardware(source=GpuSource(nvml=lambda: RecordedNvml(gb10), meminfo=meminfo), meminfo=meminfo)
    assert detection.hardware_id == "dgx_spark_gb10" and detection.source == "nvml" and detection.memory_gb > 100
    [smi], _ = parse_smi_csv("index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA GB10, [N/A], [N/A]\n",
                             MEMINFO_SPARK)
    assert smi.memory_source == MEMORY_UNIFIED and smi.memory_total_bytes == 127535352 * 1024


def test_hardware_detection_names_the_h200_from_nvml():
    detection = detect_hardware(source=replay(PHASES["idle"][0]))
    assert detection.hardware_id == "h200" and detection.source == "nvml"
    assert detection.gpus[0].memory_mib == 143771 and round(detection.memory_gb, 1) == 150.8
    # what the detection printed on the H200 itself
    report = (FIX / "probe-report.txt").read_text()
    assert "=== hardware detection ===\nh200 | nvml | 1x NVIDIA H200" in report


def test_a_span_sums_up_utilization_power_and_energy():
    every = readings("idle") + readings("load") + readings("after")
    start, stop = RECORDING["load"]["started"], RECORDING["load"]["stopped"]
    figures = summarize_readings(every, start, stop)
    [span] = figures.gpus
    inside = [r for r in every if start <= r.taken_at <= stop]
    assert span.samples == len(inside)
    powers = [(r.taken_at, r.gpus[0].power_w) for r in inside]
    expected = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(powers, powers[1:]))
    assert figures.energy_j == pytest.approx(expected)
    assert 500 < figures.mean_power_w <= 700 and figures.mean_utilization_pct > 90
    assert figures.tokens_per_joule(1000) == pytest.approx(1000 / expected)
    nothing = summarize_readings([GpuReading(1.0, "none", reason="no NVIDIA GPU here")], 0, 2)
    assert nothing.source == "none" and nothing.energy_j is None and nothing.tokens_per_joule(10) is None


def test_poller_keeps_a_bounded_series():
    source = GpuSource(nvml=lambda: RecordedSeries(PHASES["idle"][:2] + PHASES["load"][-3:]))
    poller = GpuPoller(source, interval=60, history=3)
    for _ in range(5):
        poller.sample_once()
    assert len(poller.readings()) == 3 and poller.latest is poller.readings()[-1]
    # the three kept are the last three recorded: the GPU under load
    assert [r.gpus[0].utilization_pct for r in poller.readings()] == [100, 100, 100]
    assert poller.tick() is poller.latest  # read well inside the interval: no new read
    rows = poller.series_rows()
    assert rows[0]["gpu"] == "GPU0" and rows[0]["power_w"] is not None


def test_recording_round_trips_and_reasons_decode():
    recording = PHASES["load"][-1]
    again = record_nvml(RecordedNvml(recording))
    # Every recorded field comes back as it was; a field this recording predates (the process
    # list) comes back as NVML's "not available", and the sample says None, not "no processes".
    assert [{k: d[k] for k in rec} for d, rec in zip(again["devices"], recording["devices"])] == recording["devices"]
    assert again["devices"][0]["processes"] == {"unavailable": "not recorded"}
    assert sample_from_nvml(RecordedNvml(recording), 0).processes is None
    assert throttle_reason_names(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    with pytest.raises(NvmlFieldUnavailable):
        RecordedNvml({"driver_version": "x", "devices": [{}]}).read(0, "power_mw")


HEAVY = ("gradio", "ipywidgets", "jupyterlab", "jupyter_server", "IPython", "vllm", "torch", "openai", "aiohttp",
         "httpx", "yaml")


def test_gpu_command_here_says_there_is_no_nvidia_gpu_and_imports_only_the_core():
    code = (
        "import runpy, sys, json\n"
        "sys.argv = ['workbench', 'gpu', '--once', '--json']\n"
        "try:\n    runpy.run_module('workbench', run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed, heavy = done.stdout.strip().splitlines()
    assert json.loads(heavy) == []
    reading = json.loads(printed)
    if reading["gpus"]:  # pragma: no cover - a machine with a GPU
        pytest.skip("this machine has an NVIDIA GPU")
    assert reading["source"] == "none" and reading["reason"]
    table = subprocess.run([sys.executable, "-m", "workbench", "gpu"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert table.returncode == 0 and "no NVIDIA GPU on this machine" in table.stdout


def test_gpu_command_runs_where_gradio_and_jupyter_cannot_be_imported(tmp_path):
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\nclass Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {HEAVY!r}:\n"
        "            raise ImportError(f'{name} is not installed on this GPU box')\n"
        "sys.meta_path.insert(0, Block())\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "workbench", "gpu", "--once", "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "source" in json.loads(done.stdout)


def test_day_of_memory_check_reads_the_same_source_and_counts_the_cuda_context():
    from workbench.planner.gpu_overhead import CUDA_CONTEXT_BYTES
    from workbench.server.headroom import memory_headroom_check

    idle = replay(PHASES["idle"][0])
    ok = memory_headroom_check(0.9, source=idle)
    # NVML's memory info v1 (this recording) counts the driver's 615 MiB reserve as used
    assert ok.status == "ok" and "GPU 0: 139.8 GiB free of 140.4 GiB" in ok.found and "CUDA context" in ok.found
    # 0.995 of the GPU fits in what is free, but not with the context beside it
    free = 143771 * 2**20 - PHASES["idle"][0]["devices"][0]["memory"]["used"]
    assert 0.995 * 143771 * 2**20 < free < 0.995 * 143771 * 2**20 + CUDA_CONTEXT_BYTES
    short = memory_headroom_check(0.995, source=idle)
    assert short.status == "missing" and "--gpu-memory-utilization to 0.9" in short.fix


def test_metrics_table_shows_the_gpus_beside_the_servers_figures():
    from workbench.cli.metrics import format_table
    from workbench.metrics.figures import derive_figures
    from workbench.metrics.parse import parse_metrics

    text = (ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu" / "metrics_idle.prom")
    figures = derive_figures([parse_metrics(text.read_text(), 1000.0)])
    loaded = format_table(figures, "http://127.0.0.1:8000/metrics", readings("load")[-1])
    assert "  GPU0         util 100 %   power 6" in loaded and "(NVIDIA H200, nvml)" in loaded
    none = format_table(figures, "http://127.0.0.1:8000/metrics", GpuSource(nvml=_no_nvml, which=lambda n: None).read())
    assert "  GPU          no NVIDIA GPU on this machine (" in none


def _no_nvml():
    raise NvmlUnavailable("NVML did not start: NVML Shared Library Not Found")


def test_throughput_tab_plots_one_series_per_gpu_and_says_when_there_is_none():
    from workbench.ui.throughput_tab import gpu_frames, gpu_markdown

    poller = GpuPoller(GpuSource(nvml=lambda: RecordedSeries(PHASES["load"][-4:])))
    for _ in range(4):
        poller.sample_once()
    util, power = gpu_frames(poller)
    assert list(util["series"].unique()) == ["GPU0 util %"] and len(util) == 4 and util["seconds"].max() == 0
    assert set(power["series"]) == {"GPU0 W", "GPU0 limit W"} and power["value"].max() == 700.0
    table = gpu_markdown(poller.latest)
    assert "| 0 | NVIDIA H200 | 100 % |" in table and "via nvml, driver 580.159.04" in table
    none = GpuSource(nvml=_no_nvml, which=lambda n: None).read()
    assert gpu_markdown(none).startswith("**GPU** · no NVIDIA GPU on this machine (NVML did not start")
    empty = GpuPoller(GpuSource(nvml=_no_nvml, which=lambda n: None))
    empty.sample_once()
    assert all(len(f) == 0 for f in gpu_frames(empty))


def test_notebook_throughput_view_shows_each_gpu_with_its_history():
    from workbench.notebook.throughput_view import ThroughputView

    poller = GpuPoller(GpuSource(nvml=lambda: RecordedSeries(PHASES["idle"][-2:] + PHASES["load"][-2:])))
    view = ThroughputView("http://127.0.0.1:9", gpus=poller)
    for _ in range(4):
        view.scrape()
    view.poller.close()
    html = view.gpu_table.value
    assert "via nvml" in html and "NVIDIA H200" in html and "100 %" in html and "▁▁██" in html
    bare = ThroughputView("http://127.0.0.1:9", gpus=GpuPoller(GpuSource(nvml=_no_nvml, which=lambda n: None)))
    bare.scrape()
    bare.poller.close()
    assert bare.gpu_table.value.startswith("<b>GPU</b>: no NVIDIA GPU on this machine (NVML did not start")


def test_room_strip_names_each_gpu_or_says_there_is_none():
    from workbench.telemetry import format_gpu_strip

    strip = format_gpu_strip(readings("load")[-1])
    assert strip.startswith("GPU (this machine): GPU0 100 % · 6") and "/ 700 W" in strip and "sw_power_cap" in strip
    none = format_gpu_strip(GpuSource(nvml=_no_nvml, which=lambda n: None).read())
    assert none.startswith("GPU: no NVIDIA GPU on this machine (NVML did not start")


# ── the second run: NVML memory info v2, the context measurement repeated, the fallback on the GPU ──

FIX2 = ROOT / "tests" / "fixtures" / "nvidia-h200-telemetry-v2"
RECORDING2 = json.loads((FIX2 / "nvml-recording.json").read_text())


def test_memory_info_v2_keeps_the_drivers_reserve_apart_as_torch_sees_it():
    [g] = replay(RECORDING2["phases"]["idle"][0]).read().gpus
    measured = json.loads((FIX2 / "context-cublas.json").read_text())
    assert g.memory_used_bytes == 0 and g.memory_reserved_bytes == 644_939_776
    # what a new process can allocate is what torch reported free before its context
    assert g.memory_free_bytes == measured["nvml_before_cuda"]["free"] == measured["after_context"]["total"]
    from workbench.server.headroom import memory_headroom_check

    check = memory_headroom_check(0.9, source=replay(RECORDING2["phases"]["idle"][0]))
    assert check.status == "ok" and "GPU 0: 139.8 GiB free of 139.8 GiB; vLLM wants 125.8 GiB" in check.found
    [loaded] = replay(RECORDING2["phases"]["load"][-1]).read().gpus
    assert loaded.utilization_pct == 100 and loaded.power_pct_of_limit > 93 and loaded.memory_used_bytes > 1e9


def test_the_second_run_saw_the_load_within_a_second_and_measured_the_same_overheads():
    from workbench.planner.gpu_overhead import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES

    report = (FIX2 / "probe-report.txt").read_text()
    lag = float(re.search(r"utilization >= 90 %: ([\d.]+) s after the load began", report).group(1))
    assert lag < 1.0
    repeats = re.findall(r"n=(\d+): CUDA context ([\d,]+) B; first cuBLAS matmul ([\d,]+) B", report)
    assert [n for n, _, _ in repeats] == ["4096", "4096", "8192"]
    for _, ctx, cublas in repeats:
        assert int(ctx.replace(",", "")) == CUDA_CONTEXT_BYTES and int(cublas.replace(",", "")) == CUBLAS_WORKSPACE_BYTES
    # the nvidia-smi fallback on the real GPU, and the parse of what it printed
    assert "via nvidia-smi" in report and "note: read with nvidia-smi: NVML refused for this check" in report
    [idle], _ = parse_smi_csv((FIX2 / "smi-query-idle.csv").read_text())
    assert idle.name == "NVIDIA H200" and idle.memory_used_bytes == 0 and idle.power_limit_w == 700.0
