"""Hardware detection from recorded nvidia-smi output (no GPU needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from workbench.server.hardware import (
    QUERY_ARGS, GpuInfo, detect, detect_hardware, hardware_id_for, parse_meminfo_gb, parse_query_gpu,
)
from workbench.recipes import load_catalog

FIX = Path(__file__).parent / "fixtures" / "nvidia-smi-h200"
MEMINFO_SPARK = "MemTotal:       127535352 kB\nMemFree:        100000000 kB\n"


def test_parse_query_gpu_noheader_fixture():
    [g] = parse_query_gpu((FIX / "query-gpu-noheader.csv").read_text())
    assert g == GpuInfo("NVIDIA H200", 143771, "9.0")


def test_parse_query_gpu_with_header_and_units():
    [g] = parse_query_gpu((FIX / "query-gpu.csv").read_text())
    assert g == GpuInfo("NVIDIA H200", 143771, "9.0")


def test_h200_fixture_maps_to_h200():
    d = hardware_id_for(parse_query_gpu((FIX / "query-gpu-noheader.csv").read_text()))
    assert d.hardware_id == "h200" and round(d.memory_gb) == 151


def test_gb10_memory_not_supported_reads_meminfo():
    gpus = parse_query_gpu("NVIDIA GB10, [N/A], 12.1\n")
    assert gpus[0].memory_mib is None
    gpus = parse_query_gpu("NVIDIA GB10, Not Supported, 12.1\n")
    assert gpus[0].memory_mib is None
    d = hardware_id_for(gpus, MEMINFO_SPARK)
    assert d.hardware_id == "dgx_spark_gb10" and 130 < d.memory_gb < 131
    assert any("/proc/meminfo" in n for n in d.notes)


def test_name_rules():
    def hid(names: list[str], cap: str = "9.0") -> str:
        return hardware_id_for([GpuInfo(n, 80000, cap) for n in names]).hardware_id
    assert hid(["NVIDIA H100 80GB HBM3"] * 8) == "h100"
    assert hid(["NVIDIA B200"] * 8, "10.0") == "b200"
    assert hid(["NVIDIA GB200"] * 4, "10.0") == "gb200"
    assert hid(["NVIDIA GB300"] * 4, "10.3") == "gb300"
    assert hid(["NVIDIA GB300"], "10.3") == "dgx_station_gb300"
    assert hid(["NVIDIA B300 SXM6 AC"] * 8, "10.3") == "b300"
    assert hid(["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"], "12.0") == "rtx_pro_6000"
    assert hid(["NVIDIA A100-SXM4-80GB"] * 8, "8.0") == "a100"
    assert hid(["NVIDIA L40S"], "8.9") == "a100"  # unknown: closest by compute capability


def test_every_detected_id_is_in_the_taxonomy():
    ids = set(load_catalog().hardware)
    for name in ("H100", "H200", "B200", "GB200", "B300", "GB300", "GB10", "RTX PRO 6000", "A100"):
        assert hardware_id_for([GpuInfo(f"NVIDIA {name}", 1, "9.0")]).hardware_id in ids
    assert "cpu" in ids


def test_meminfo():
    assert parse_meminfo_gb("nothing") is None
    assert round(parse_meminfo_gb("MemTotal: 1000 kB\n"), 6) == 0.001024


def test_detect_without_nvidia_smi_is_cpu():
    d = detect_hardware(which=lambda name: None)
    assert d.hardware_id == "cpu" and "not found" in d.reason


def test_detect_with_failing_nvidia_smi_is_cpu():
    def runner(argv):
        raise subprocess.CalledProcessError(9, argv)
    assert detect_hardware(runner=runner).hardware_id == "cpu"


def test_detect_runs_the_query(tmp_path):
    seen = []
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO_SPARK)

    def runner(argv):
        seen.append(argv)
        return "NVIDIA GB10, [N/A], 12.1\n"
    d = detect_hardware(runner=runner, meminfo=meminfo)
    assert seen == [QUERY_ARGS] and d.hardware_id == "dgx_spark_gb10" and d.memory_gb > 100


def test_detect_here_returns_a_known_id():
    assert detect() in load_catalog().hardware
