"""benchmarks/soak.py itself, at its smallest: one launch/stop cycle and one kill -9
mid-answer on the CPU engine; its printed counts must say nothing was left and the
cut turn was kept. (The full run, 50 and 20, is in the closing note of issue 14.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.vllm
def test_soak_counts_one_cycle_and_one_kill(tmp_path):
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, "benchmarks/soak.py", "--cycles", "1", "--kills", "1", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = json.loads(out.read_text())["counts"]
    assert counts["cycles_ok"] == 1 and counts["processes_left"] == 0 and counts["port_busy_after_stop"] == 0
    assert counts["kills_marked_failed"] == counts["kills_partial_kept"] == counts["kills_history_valid"] == 1
    assert "processes_left             0" in proc.stdout
