"""Soak the launcher and the chat on the CPU engine, and print the counts.

Two parts, each on one fixed port (a user relaunching the same server):

1. `--cycles` launch/stop cycles of the CPU plan, as the Launch button does:
   launch, wait until ready, one short answer, stop. After each stop every
   process the server had (its group and every descendant, by pid and start
   time) is looked for, and the port must be free. Target: 0 left.
2. `--kills` times, a streamed answer is cut by `kill -9` of the engine:
   EngineCore on odd runs, the API server (the group leader) on even ones.
   The turn must end marked failed with its partial answer kept; the server is
   stopped, relaunched, and the same conversation continues (user, assistant,
   user on the wire) and answers. Target: all of them.

    .venv/bin/python benchmarks/soak.py                 # 50 cycles, 20 kills (about 45 min here)
    .venv/bin/python benchmarks/soak.py --cycles 2 --kills 2 --json soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from workbench import server
from workbench.chat import ChatOptions, ChatSession
from workbench.chat.events import ContentDelta, ErrorEvent
from workbench.recipes import Selection, load_catalog, render
from workbench.server.process import cmdline, descendants, same_process

SHORT_PROMPT = "What is the capital of France? Answer in one sentence."
LONG_PROMPT = "Write a long story about a lighthouse keeper and a storm, in ten paragraphs."
CUT_AFTER_DELTAS = 8  # content deltas streamed before the kill
TURN_DEADLINE_S = 90.0  # a turn still streaming this long after the kill counts as hung


def server_processes(handle: server.ServerProcess) -> dict[int, float]:
    """pid -> start time of the server's group and all its descendants."""
    return descendants([*([handle.pid] if handle.pid else []), *handle.group_pids()])


def still_running(processes: dict[int, float]) -> list[int]:
    """Those of `processes` that are the same process and not a zombie."""
    return [pid for pid, started in processes.items() if same_process(pid, started)]


def port_listening(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        return True
    except httpx.HTTPError:
        return False


def engine_core_pid(handle: server.ServerProcess) -> int | None:
    return next((pid for pid in server_processes(handle) if "EngineCore" in cmdline(pid)), None)


@dataclass
class CycleResult:
    number: int
    ready_s: float | None = None
    answered: bool = False
    stop_stage: str | None = None
    stop_s: float | None = None
    recorded_running: bool = False  # `status` listed this run as ready while it ran
    processes: int = 0
    left: list[int] = field(default_factory=list)
    port_free: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.answered and not self.left and self.port_free and self.recorded_running


@dataclass
class KillResult:
    number: int
    target: str
    streamed_chars: int = 0
    turn_failed_marked: bool = False
    partial_kept: bool = False
    error_shown: str | None = None
    hung: bool = False
    left: list[int] = field(default_factory=list)
    history_valid: bool = False  # the relaunched server answered the same conversation
    error: str | None = None

    @property
    def ok(self) -> bool:
        return (self.error is None and self.turn_failed_marked and self.partial_kept and not self.hung
                and not self.left and self.history_valid)


class Soak:
    def __init__(self, state_dir: Path, port: int) -> None:
        self.state_dir = state_dir
        self.port = port
        catalog = load_catalog()
        self.plan = render(Selection(hardware="cpu", port=port), catalog)

    def launch(self) -> tuple[server.ServerProcess, float]:
        started = time.monotonic()
        handle = server.launch(self.plan, state_dir=self.state_dir, progress=lambda _msg: None)
        try:
            handle.wait_ready()
        except Exception:
            handle.stop()
            raise
        return handle, time.monotonic() - started

    def recorded_ready(self, handle: server.ServerProcess) -> bool:
        return any(s.pid == handle.pid and s.refresh() is server.Status.READY
                   for s in server.list_servers(self.state_dir))

    def chat(self, handle: server.ServerProcess, max_tokens: int) -> ChatSession:
        options = ChatOptions(max_tokens=max_tokens, temperature=0.0, use_tools=False, reasoning=False)
        return ChatSession(handle.base_url, options=options)

    def cycle(self, number: int) -> CycleResult:
        result = CycleResult(number)
        handle = None
        processes: dict[int, int] = {}
        try:
            handle, result.ready_s = self.launch()
            processes = server_processes(handle)
            result.recorded_running = self.recorded_ready(handle)
            turn = self.chat(handle, 24).send(SHORT_PROMPT)
            result.answered = bool(turn.content.strip()) and turn.error is None
        except Exception as exc:  # a cycle's failure is counted, and the soak goes on
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            if handle is not None:
                processes.update(server_processes(handle))
                stop = handle.stop()
                result.stop_stage, result.stop_s = stop.stage.value, stop.seconds
        result.processes = len(processes)
        result.left = still_running(processes)
        result.port_free = not port_listening(self.port)
        return result

    def kill_run(self, number: int) -> KillResult:
        target = "EngineCore" if number % 2 else "API server"
        result = KillResult(number, target)
        handle = relaunched = None
        processes: dict[int, int] = {}
        try:
            handle, _ = self.launch()
            processes = server_processes(handle)
            victim = engine_core_pid(handle) if target == "EngineCore" else handle.pid
            if victim is None:
                raise RuntimeError("no EngineCore process found in the server's group")
            session = self.chat(handle, 400)
            hung = threading.Event()

            def give_up() -> None:
                hung.set()
                session.stop()

            watchdog = threading.Timer(TURN_DEADLINE_S, give_up)
            deltas = 0
            killed_at = None
            for event in session.stream(LONG_PROMPT):
                if isinstance(event, ContentDelta):
                    deltas += 1
                    result.streamed_chars += len(event.text)
                    if deltas == CUT_AFTER_DELTAS and killed_at is None:
                        os.kill(victim, signal.SIGKILL)
                        killed_at = time.monotonic()
                        watchdog.start()
                elif isinstance(event, ErrorEvent):
                    result.error_shown = event.message
            watchdog.cancel()
            if killed_at is None:
                raise RuntimeError(f"the answer ended after {deltas} deltas, before the kill")
            result.hung = hung.is_set()
            messages = session.conversation.messages
            last = messages[-1]
            result.turn_failed_marked = last.role == "assistant" and bool(last.failed)
            result.partial_kept = last.role == "assistant" and len(last.content) >= result.streamed_chars > 0
            processes.update(server_processes(handle))
            handle.stop()
            result.left = still_running(processes)
            # The same conversation, on a new server: the history must still be a valid request.
            relaunched, _ = self.launch()
            session.base_url = relaunched.base_url
            session.options.max_tokens = 16
            turn = session.send("Thank you. Now answer in one word: what colour is the sea?")
            wire = [m["role"] for m in session.conversation.to_wire()]
            result.history_valid = turn.error is None and bool(turn.content.strip()) and wire[:3] == [
                "user", "assistant", "user"]
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            for h in (handle, relaunched):
                if h is not None and h.status is not server.Status.STOPPED:
                    processes.update(server_processes(h))
                    h.stop()
            result.left = still_running(processes)
        return result


def summarize(cycles: list[CycleResult], kills: list[KillResult]) -> dict[str, object]:
    ready = [c.ready_s for c in cycles if c.ready_s is not None]
    stops = [c.stop_s for c in cycles if c.stop_s is not None]
    return {
        "cycles": len(cycles),
        "cycles_ok": sum(c.ok for c in cycles),
        "cycles_answered": sum(c.answered for c in cycles),
        "cycles_recorded_running": sum(c.recorded_running for c in cycles),
        "processes_seen": sum(c.processes for c in cycles),
        "processes_left": sum(len(c.left) for c in cycles) + sum(len(k.left) for k in kills),
        "port_busy_after_stop": sum(not c.port_free for c in cycles),
        "ready_s_median": round(statistics.median(ready), 1) if ready else None,
        "ready_s_max": round(max(ready), 1) if ready else None,
        "stop_s_max": round(max(stops), 2) if stops else None,
        "stop_stages": sorted({c.stop_stage for c in cycles if c.stop_stage}),
        "kills": len(kills),
        "kills_ok": sum(k.ok for k in kills),
        "kills_marked_failed": sum(k.turn_failed_marked for k in kills),
        "kills_partial_kept": sum(k.partial_kept for k in kills),
        "kills_hung": sum(k.hung for k in kills),
        "kills_history_valid": sum(k.history_valid for k in kills),
        "errors": [c.error for c in cycles if c.error] + [k.error for k in kills if k.error],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=50, help="launch/stop cycles (default 50)")
    parser.add_argument("--kills", type=int, default=20, help="answers cut by kill -9 (default 20)")
    parser.add_argument("--port", type=int, default=None, help="the one port every launch uses (default: a free one)")
    parser.add_argument("--json", type=Path, help="also write every run and the counts here")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with tempfile.TemporaryDirectory(prefix="soak-state-") as state:
        soak = Soak(Path(state), args.port or server.free_port())
        print(f"soak: {args.cycles} launch/stop cycles, then {args.kills} kill -9 mid-answer, port {soak.port}",
              flush=True)
        cycles: list[CycleResult] = []
        for n in range(1, args.cycles + 1):
            c = soak.cycle(n)
            cycles.append(c)
            print(f"cycle {n:3}: {'ok ' if c.ok else 'BAD'} ready {c.ready_s or 0:5.1f} s, answered {c.answered}, "
                  f"stop {c.stop_stage} {c.stop_s or 0:.2f} s, processes {c.processes}, left {len(c.left)}, "
                  f"port free {c.port_free}" + (f", error {c.error}" if c.error else ""), flush=True)
        kills: list[KillResult] = []
        for n in range(1, args.kills + 1):
            k = soak.kill_run(n)
            kills.append(k)
            print(f"kill  {n:3}: {'ok ' if k.ok else 'BAD'} {k.target:<10} after {k.streamed_chars} chars: "
                  f"marked failed {k.turn_failed_marked}, partial kept {k.partial_kept}, hung {k.hung}, "
                  f"left {len(k.left)}, history valid {k.history_valid}; shown: {k.error_shown!r}"
                  + (f", error {k.error}" if k.error else ""), flush=True)
    counts = summarize(cycles, kills)
    print("\ncounts:")
    for key, value in counts.items():
        print(f"  {key:<26} {value}")
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "cycles": [asdict(c) for c in cycles],
                                         "kills": [asdict(k) for k in kills]}, indent=2))
    good = counts["cycles_ok"] == len(cycles) and counts["kills_ok"] == len(kills) and not counts["processes_left"]
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
