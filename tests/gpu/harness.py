"""What the GPU suite does with a real server, written once and run on the CPU engine too.

Every server here is started the way a user starts one, through `python -m workbench serve`
(`serve_cli`), and read back the way the workbench reads it: its record, its log, /metrics
and NVML. tests/test_gpu_harness.py runs these same functions against vLLM's CPU build in CI,
so the suite that only a GPU machine runs has no untried code in it.

The suite's report (`Report`) is one Markdown file and the files beside it, under
$WORKBENCH_GPU_REPORT (default test-artifacts/gpu-suite): what each test printed, for the
closing note, and the recordings (logs, /metrics, NVML samples, experiment results) the
project keeps as fixtures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from workbench.server import ServerProcess
from workbench.server.servers import scan_records
from workbench.telemetry import GpuReading, GpuSource

REPO = Path(__file__).resolve().parents[2]
PHASE_LINE = re.compile(r"^\[\s*(?P<t>[\d.]+) s\] (?P<phase>[a-z_]+)\s+(?P<detail>.*)$")
KV_LINE = re.compile(r"(?:GPU|CPU) KV cache size: ([\d,]+) tokens")


class Report:
    """report.md and the recordings beside it; each test adds a section as it finishes."""

    def __init__(self, directory: Path, path: Path | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        # $WORKBENCH_GPU_REPORT_FILE puts report.md where a run cut short still leaves it.
        self.path = path or Path(os.environ.get("WORKBENCH_GPU_REPORT_FILE") or directory / "report.md")

    def section(self, title: str, text: str) -> None:
        with self.path.open("a") as f:
            f.write(f"\n## {title}\n\n```\n{text.rstrip()}\n```\n")
        print(f"\n== {title}\n{text}", flush=True)

    def keep(self, name: str, content: str | bytes | Path) -> Path:
        """A recording, under `name` in the report folder."""
        dest = self.directory / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, dest)
        elif isinstance(content, bytes):
            dest.write_bytes(content)
        else:
            dest.write_text(content)
        return dest


def report_dir() -> Path:
    return Path(os.environ.get("WORKBENCH_GPU_REPORT") or REPO / "test-artifacts" / "gpu-suite")


def workbench(*args: str, state_dir: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m workbench ARGS`, as a user types it, with the suite's own server records."""
    env = {**os.environ, "WORKBENCH_STATE_DIR": str(state_dir), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@dataclass
class Phase:
    elapsed_s: float
    name: str
    detail: str


def parse_phases(stdout: str) -> list[Phase]:
    """The phase lines `serve` printed ("[  12.3 s] loading_weights   checkpoint 0.50 GiB"), in order."""
    out = []
    for line in stdout.splitlines():
        m = PHASE_LINE.match(line)
        if m:
            out.append(Phase(float(m.group("t")), m.group("phase"), m.group("detail").strip()))
    return out


@dataclass
class Served:
    """A `serve --keep` that ran: what it printed, and the server it left (None when it failed)."""

    args: tuple[str, ...]
    port: int
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    handle: ServerProcess | None
    phases: list[Phase] = field(default_factory=list)

    @property
    def log_text(self) -> str:
        return self.handle.log_text() if self.handle else ""

    def transcript(self) -> str:
        return f"$ python -m workbench serve {' '.join(self.args)}\n{self.stdout.rstrip()}\n{self.stderr.rstrip()}"


def find_server(state_dir: Path, port: int) -> ServerProcess | None:
    handles, _ = scan_records(state_dir)
    return next((h for h in handles if h.port == port), None)


def serve_cli(*args: str, port: int, state_dir: Path, timeout: float = 580) -> Served:
    """`python -m workbench serve ARGS --keep --server-port PORT`: started in the background, left running."""
    started = time.monotonic()
    argv = (*args, "--keep", "--server-port", str(port), "--timeout", str(int(timeout - 20)))
    done = workbench("serve", *argv, state_dir=state_dir, timeout=timeout)
    handle = find_server(state_dir, port)
    if handle is not None:
        handle.refresh()
    return Served(tuple(argv), port, done.returncode, done.stdout, done.stderr, time.monotonic() - started,
                  handle, parse_phases(done.stdout))


def stop_cli(port: int, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return workbench("stop", "--server-port", str(port), state_dir=state_dir, timeout=120)


def kv_tokens(log_text: str) -> int:
    """The tokens vLLM's log says its KV cache holds (the last start's)."""
    found = KV_LINE.findall(log_text)
    assert found, "the log has no KV cache size line"
    return int(found[-1].replace(",", ""))


def process_tree(pid: int) -> set[int]:
    """`pid` and every process below it (vLLM's API server, engine core and workers)."""
    try:
        root = psutil.Process(pid)
        return {pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for its parent does not count)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_gpus() -> GpuReading:
    return GpuSource().read()


def gpu_memory_used_gib(reading: GpuReading) -> list[float]:
    return [(g.memory_used_bytes or 0) / 2**30 for g in reading.gpus]


def wait_for(predicate: Any, timeout: float, every: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def readings_jsonl(readings: list[GpuReading]) -> str:
    return "".join(json.dumps(r.to_dict()) + "\n" for r in readings)
