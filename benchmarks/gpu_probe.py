"""Prove the GPU telemetry on a real NVIDIA GPU, and record what it printed as fixtures.

Run on a machine with an NVIDIA GPU, PyTorch (CUDA) and nvidia-ml-py, from the
repository root (the workbench needs only its core there: no Gradio, no Jupyter):

    python3 benchmarks/gpu_probe.py --out probe-out

It runs, and prints:
1. `python -m workbench gpu --once --json` idle, and which heavy packages that import pulled in;
2. hardware detection (`detect_hardware`): the recipe hardware id, read through NVML;
3. the cost of one full telemetry reading (NVML), against one `nvidia-smi` query;
4. the live table (`python -m workbench gpu --interval 0.25`) while a bf16 8192x8192 matmul
   loop loads GPU 0 in another process, and after it stops: how long after the load began the
   table first showed it (utilization >= 90 %), and the idle state after;
5. the raw NVML answers (tests replay them through the same parsing), idle, under load and after;
6. what the CUDA context and cuBLAS's workspace take of the GPU's memory (a fresh process:
   NVML before any CUDA, torch.cuda.mem_get_info after the context, after a plain allocation,
   after the first cuBLAS matmul);
7. `nvidia-smi -q` and the fallback's `--query-gpu` CSV, idle and under load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbench.telemetry import GpuSource, PynvmlApi, record_nvml  # noqa: E402
from workbench.telemetry.smi import SMI_QUERY_ARGS  # noqa: E402

LOAD = r"""
import json, sys, time, torch
out, seconds = sys.argv[1], float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
(a @ b); torch.cuda.synchronize()           # context, cuBLAS handle: before the clock starts
started = time.time(); n = 0
while time.time() - started < seconds:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize(); n += 20
stopped = time.time()
json.dump({"started": started, "stopped": stopped, "matmuls": n,
           "tflops": 2 * 8192**3 * n / (stopped - started) / 1e12}, open(out, "w"))
"""

CONTEXT = r"""
import json, time, pynvml, torch
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
def nvml_used():
    m = pynvml.nvmlDeviceGetMemoryInfo(h); return {"total": m.total, "used": m.used, "free": m.free}
def procs():
    return [{"pid": p.pid, "used": p.usedGpuMemory} for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
r = {"torch": torch.__version__, "nvml_before_cuda": nvml_used()}
free, total = torch.cuda.mem_get_info(0)       # creates the CUDA context
r["after_context"] = {"free": free, "total": total, "nvml": nvml_used(), "processes": procs()}
x = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
free, _ = torch.cuda.mem_get_info(0)
r["after_128mib"] = {"free": free, "reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated()}
import sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
r["n"] = n
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize(); free, _ = torch.cuda.mem_get_info(0)
r["after_operands"] = {"free": free, "reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated()}
torch.matmul(a, b, out=c); torch.cuda.synchronize(); free, _ = torch.cuda.mem_get_info(0)
r["after_first_matmul"] = {"free": free, "reserved": torch.cuda.memory_reserved(),
                           "allocated": torch.cuda.memory_allocated(), "nvml": nvml_used(), "processes": procs()}
print(json.dumps(r))
"""


def sh(argv: list[str], **kw: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)  # type: ignore[call-overload]
    return str(done.stdout) + (f"\n[stderr] {done.stderr}" if done.returncode else "")


def section(report: list[str], title: str, text: str) -> None:
    block = f"\n=== {title} ===\n{text.rstrip()}\n"
    print(block, flush=True)
    report.append(block)


def table_blocks(text: str) -> list[tuple[float, float | None, float | None]]:
    """(seconds of the day, util %, power W) of GPU 0 from each block of the live table."""
    out = []
    for block in text.split("\n\n"):
        head = re.match(r"GPU\s+(\d\d):(\d\d):(\d\d\.\d+)", block.strip())
        row = re.search(r"^\s+0\s+.*?\s(\d+) %\s.*?\s(\d+) / \d+ W", block, re.MULTILINE)
        if head and row:
            h, m, s = head.groups()
            out.append((int(h) * 3600 + int(m) * 60 + float(s), float(row.group(1)), float(row.group(2))))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--load-s", type=float, default=6.0)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    report: list[str] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    py = sys.executable

    import pynvml
    import torch
    section(report, "environment", f"python {sys.version.split()[0]}  torch {torch.__version__}  "
            f"nvidia-ml-py {getattr(pynvml, '__version__', '?')}  TZ={time.strftime('%Z')}")

    # 1. gpu --once --json, idle, and what it imported
    once = sh([py, "-m", "workbench", "gpu", "--once", "--json"], cwd=ROOT, env=env)
    (out / "gpu-once-idle.json").write_text(once)
    imported = sh([py, "-c", "import runpy, sys\nsys.argv=['workbench','gpu','--once','--json']\n"
                   "try: runpy.run_module('workbench', run_name='__main__')\nexcept SystemExit: pass\n"
                   "heavy=('gradio','ipywidgets','jupyterlab','IPython','vllm','torch','httpx','openai','aiohttp','yaml')\n"
                   "print('heavy modules imported:', sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))"],
                  cwd=ROOT, env=env)
    section(report, "python -m workbench gpu --once --json (idle)", once + imported.splitlines()[-1])
    section(report, "python -m workbench gpu --once (idle)", sh([py, "-m", "workbench", "gpu", "--once"], cwd=ROOT, env=env))

    # 2. hardware detection
    detection = sh([py, "-c", "from workbench.server.hardware import detect_hardware\n"
                    "d = detect_hardware(); print(d.hardware_id, '|', d.source, '|', d.reason, '|', d.gpus, "
                    "'|', d.memory_gb, '|', d.notes)"], cwd=ROOT, env=env)
    section(report, "hardware detection", detection)

    # 3. cost of one reading
    source = GpuSource()
    source.read()
    costs = []
    for _ in range(50):
        costs.append(source.read().read_ms or 0.0)
    t0 = time.perf_counter()
    smi_idle = sh(SMI_QUERY_ARGS)
    smi_ms = (time.perf_counter() - t0) * 1000
    (out / "smi-query-idle.csv").write_text(smi_idle)
    costs.sort()
    section(report, "cost of one reading (GPU 0, every field)",
            f"NVML: median {costs[len(costs) // 2]:.3f} ms, max {costs[-1]:.3f} ms over 50 readings\n"
            f"nvidia-smi --query-gpu (one process): {smi_ms:.1f} ms\n{smi_idle}")

    # 4 + 5. live table and raw NVML while a matmul loop loads the GPU
    api = PynvmlApi()
    recording: dict[str, list[dict[str, object]]] = {"idle": [], "load": [], "after": []}
    table = subprocess.Popen([py, "-m", "workbench", "gpu", "--interval", "0.25"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    load_file = out / "load.json"
    for _ in range(8):
        recording["idle"].append(record_nvml(api))
        time.sleep(0.25)
    load = subprocess.Popen([py, "-c", LOAD, str(load_file), str(args.load_s)], env=env)
    smi_load = ""
    while load.poll() is None:
        recording["load"].append(record_nvml(api))
        if not smi_load and len(recording["load"]) > 16:
            smi_load = sh(SMI_QUERY_ARGS)
        time.sleep(0.25)
    for _ in range(16):
        recording["after"].append(record_nvml(api))
        time.sleep(0.25)
    table.terminate()
    live, _ = table.communicate(timeout=10)
    (out / "live-table.txt").write_text(live)
    (out / "smi-query-load.csv").write_text(smi_load)
    timing = json.loads(load_file.read_text())
    load_file.unlink()
    # Phases by the load process's own clock: recordings before its first timed matmul are not "load".
    phased: dict[str, list[dict[str, object]]] = {"idle": [], "load": [], "after": []}
    for r in recording["idle"] + recording["load"] + recording["after"]:
        t = float(r["taken_at"])  # type: ignore[arg-type]
        phase = "idle" if t < timing["started"] else "load" if t <= timing["stopped"] else "after"
        phased[phase].append(r)
    (out / "nvml-recording.json").write_text(json.dumps(
        {"gpu": "NVIDIA H200", "load": timing, "phases": phased}, indent=1))

    day = time.localtime(timing["started"])
    day0 = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))
    start_s, stop_s = timing["started"] - day0, timing["stopped"] - day0
    blocks = table_blocks(live)
    busy = [b for b in blocks if start_s <= b[0] <= stop_s + 0.3 and (b[1] or 0) >= 90]
    after = [b for b in blocks if b[0] > stop_s + 1.0]
    lines = [f"load: {timing['matmuls']} bf16 8192^3 matmuls, {timing['tflops']:.0f} TFLOP/s, "
             f"{timing['stopped'] - timing['started']:.1f} s",
             f"table readings: {len(blocks)}; under load: {len([b for b in blocks if start_s <= b[0] <= stop_s])}"]
    if busy:
        lines.append(f"first table reading with utilization >= 90 %: {busy[0][0] - start_s:.2f} s after the load began "
                     f"({busy[0][1]:.0f} %, {busy[0][2]:.0f} W)")
        lines.append(f"peak power in the table under load: {max(b[2] or 0 for b in busy):.0f} W")
    if after:
        lines.append(f"last table reading, {after[-1][0] - stop_s:.1f} s after the load stopped: "
                     f"{after[-1][1]:.0f} %, {after[-1][2]:.0f} W")
    section(report, "live table: load timing", "\n".join(lines))
    chosen = live.split("\n\n")
    keep = [b for b in chosen if b.strip()]
    shown = keep[:3] + ["..."] + keep[len(keep) // 2 - 2: len(keep) // 2 + 2] + ["..."] + keep[-3:]
    section(report, "live table (python -m workbench gpu --interval 0.25), excerpt", "\n\n".join(shown))

    # 6. CUDA context and cuBLAS workspace, in a fresh process
    ctx = sh([py, "-c", CONTEXT], env=env)
    (out / "context-cublas.json").write_text(ctx)
    section(report, "CUDA context and cuBLAS workspace (raw)", ctx)
    derived = []
    for n in (4096, 4096, 8192):  # again, fresh processes: is it the same each time, and for a larger matmul?
        raw = sh([py, "-c", CONTEXT, str(n)], env=env)
        try:
            m = json.loads(raw)
        except ValueError:
            derived.append(f"n={n}: {raw.strip()[:300]}")
            continue
        ctx_b = m["after_context"]["total"] - m["after_context"]["free"]
        cublas = m["after_operands"]["free"] - m["after_first_matmul"]["free"]
        in_torch = m["after_first_matmul"]["reserved"] - m["after_operands"]["reserved"]
        derived.append(f"n={n}: CUDA context {ctx_b:,} B; first cuBLAS matmul {cublas:,} B "
                       f"({in_torch:,} B of it in torch's allocator)")
    section(report, "CUDA context and cuBLAS workspace, repeated", "\n".join(derived))

    # the nvidia-smi fallback on the real GPU (NVML made unavailable for this one source)
    from workbench.telemetry import format_gpu_table
    from workbench.telemetry.nvml import NvmlUnavailable

    def refuse() -> PynvmlApi:
        raise NvmlUnavailable("NVML refused for this check")

    fallback = GpuSource(nvml=refuse).read()
    section(report, "nvidia-smi fallback (NVML refused)", format_gpu_table(fallback))

    # 7. nvidia-smi -q (memory part printed)
    q = sh(["nvidia-smi", "-q"])
    (out / "nvidia-smi-q.txt").write_text(q)
    fields = sh(["nvidia-smi", "--help-query-gpu"])
    reason_fields = [ln.strip() for ln in fields.splitlines() if ln.strip().startswith('"clocks_')][:6]
    section(report, "nvidia-smi -q, memory", "\n".join(ln for ln in q.splitlines()
                                                        if re.search(r"Memory Usage|Total|Reserved|Used|Free", ln))[:1500]
            + "\n--help-query-gpu clock reason fields: " + " ".join(reason_fields))
    (out / "probe-report.txt").write_text("".join(report))
    api.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
