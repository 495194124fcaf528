"""The audit's attacks, run again by benchmarks/workshop_attack.py against the fixed-rate
server (a real workshop process): every one must hold, and while one address floods the
room with turns, other attendees' messages reach the server within 1 s of Send."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_audits_attacks_hold_and_a_flood_leaves_others_within_a_second():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "workshop_attack.py"), "--target-s", "1"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    print(run.stdout)
    assert "[NOT HELD]" not in run.stdout, run.stdout + run.stderr[-3000:]
    held = re.search(r"(\d+) of (\d+) held", run.stdout)
    assert held and held.group(1) == held.group(2) and int(held.group(2)) >= 15, run.stdout + run.stderr[-3000:]
    worst = re.search(r"other attendees' turns during the flood: .*\(worst ([\d.]+) s", run.stdout)
    assert worst and float(worst.group(1)) <= 1.0, run.stdout
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
