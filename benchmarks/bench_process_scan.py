"""Time ProcessGroup.members() (psutil) against the hand-written /proc scanner it replaced.

    python benchmarks/bench_process_scan.py

members() runs every 0.1 s while a stop waits for a group to go, so its cost matters a
little; it prints milliseconds per call for both, with this machine's process count.
"""

import os
import time
from pathlib import Path

import psutil

from workbench.server.process import ProcessGroup



def old_members(pgid):
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            f = text[text.rfind(")") + 2:].split()
            if int(f[2]) == pgid and f[0] not in ("Z", "X"):
                pids.append(int(entry.name))
    return sorted(pids)


g = ProcessGroup(os.getpgid(0))
n = 200
for name, fn in (("psutil", g.members), ("/proc", lambda: old_members(g.pgid))):
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    print(f"{name:7s} {1000*(time.perf_counter()-t)/n:.2f} ms per members() call, {len(psutil.pids())} processes")
