"""The room's capacity target, checked with the load benchmark against the fixed-rate
server (timing known): 32 scripted attendees sending at once, twice; every request
reaches the server within 1 s of Send, every whole answer is held within 1 s of the
server's last token, and everyone gets their own answer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_32_attendees_at_once_arrive_and_finish_within_a_second():
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "workshop_load.py"), "--attendees", "32", "--rate", "50",
         "--tokens", "200", "--rounds", "2", "--idle-seconds", "2", "--target-s", "1"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    print(run.stdout)
    summaries = re.findall(r"round (\d): worst send->server ([\d.]+) s .*?worst last token->answer ([\d.]+) s; "
                           r"errors (\d+); wrong answers (\d+)", run.stdout)
    assert len(summaries) == 2, run.stdout + run.stderr[-3000:]
    for _, arrival, tail, errors, wrong in summaries:
        assert float(arrival) <= 1.0 and float(tail) <= 1.0, run.stdout
        assert errors == "0" and wrong == "0", run.stdout
    assert run.stdout.count("target (every arrival and every answer within 1 s) met") == 2
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
