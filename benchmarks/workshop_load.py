"""N scripted attendees against the workshop app, served by the fixed-rate server.

    python benchmarks/workshop_load.py --attendees 32 --rate 50 --tokens 1024 --rounds 3 --target-s 1

Starts the fixed-rate server (tests/helpers, its own process) and
`python -m workbench workshop --attach` (its own process), signs N attendees in
through /join, and has each send one message through gradio_client's `chat` (the
attendees spread over --client-processes processes) at the same moment. For each
attendee it prints: send -> the request reaching the server (the server's arrival
stamp), split where the client's queue/join request leaves it (before: the scripted
client's own work; after: the app); the server's last token -> the attendee holding
the whole answer; and whether the answer was their own (the server echoes each
attendee's tag). Then the app's CPU while idle and during the run, and
/proc/loadavg (other load on the machine distorts the figures). All stamps are
time.monotonic_ns, one clock for every process on Linux.

The scripted clients skip loading the CA bundle (plain http on 127.0.0.1: there is
nothing to verify). gradio_client loads it for every request by default, ~15 ms of
CPU each that no browser pays; on 2 cores that load generator took as much CPU as
the app and tripled the arrival times it measured (--client-ssl-verify shows it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.fixed_rate_server import FixedRateServer  # noqa: E402
from workbench.server import free_port  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tag(attendee: int, round_number: int) -> str:
    """Begins each message; the fixed-rate server stamps and echoes it, so a result is matched to its sender."""
    return f"a{attendee:02d}r{round_number}-"


def wait_up(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the workshop app did not answer at {url}")


def client_worker(base: str, tokens: dict[int, str], inbox: Any, outbox: Any, ssl_verify: bool) -> None:
    """One client process: its attendees' sessions, each round sent at the start time it is given."""
    from gradio_client import Client

    # Where a send's time goes before the app: stamp each queue/join request as it
    # leaves (after the client has built its HTTP connection); the message carries the tag.
    joins: dict[str, int] = {}

    real_send = httpx.Client.send

    def stamped_send(self: httpx.Client, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        if request.url.path.endswith("/queue/join"):
            text = str(json.loads(request.content).get("data", [""])[0])
            joins[text.split(" ", 1)[0]] = time.monotonic_ns()
        return real_send(self, request, **kwargs)

    httpx.Client.send = stamped_send  # type: ignore[method-assign]  # this client process only

    clients = {i: Client(base + "/", headers={"Cookie": f"workbench_attendee={t}"}, verbose=False,
                      ssl_verify=ssl_verify)
               for i, t in tokens.items()}
    outbox.put("ready")
    while (job := inbox.get()) is not None:
        round_number, start_at = job
        results: dict[int, dict[str, Any]] = {}
        cpu0 = time.process_time()

        def attendee(i: int) -> None:
            time.sleep(max(0.0, (start_at - time.monotonic_ns()) / 1e9))
            sent = time.monotonic_ns()
            mine = tag(i, round_number)
            try:
                answer, _ = clients[i].submit(f"{mine} tell me something", api_name="/chat").result()
                results[i] = {"sent": sent, "done": time.monotonic_ns(), "answer": answer, "join": joins.get(mine)}
            except Exception as exc:  # reported in the table
                results[i] = {"sent": sent, "done": time.monotonic_ns(), "error": repr(exc)[:80]}

        threads = [threading.Thread(target=attendee, args=(i,)) for i in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        outbox.put((results, time.process_time() - cpu0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attendees", type=int, default=32)
    parser.add_argument("--rate", type=float, default=50.0, help="decode tok/s of each answer")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per answer (the room's max_tokens cap)")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="messages each attendee sends, all at once each round (the table shows each round)")
    parser.add_argument("--client-processes", type=int, default=4,
                        help="processes the scripted attendees are spread over (one process is itself a bottleneck)")
    parser.add_argument("--client-ssl-verify", action="store_true",
                        help="let gradio_client load the CA bundle for each request, as it does by default: "
                             "~15 ms of CPU per request in the scripted client, which no browser pays (the app is "
                             "plain http on 127.0.0.1 here, so there is nothing to verify)")
    parser.add_argument("--target-s", type=float,
                        help="exit 1 unless every arrival and every answer tail of every round is within this")
    parser.add_argument("--raw", type=Path, help="also write every stamp (client, app queue, server) to this JSON file")
    args = parser.parse_args()
    code = "bench-room"
    port = free_port()
    state = ROOT / ".state" / "workshop-load"
    with FixedRateServer(decode_rate=args.rate, echo=True).in_subprocess() as vllm_url:
        env = {**os.environ, "WORKBENCH_ROOM_CODE": code, "PYTHONPATH": str(ROOT)}
        app = subprocess.Popen([sys.executable, "-m", "workbench", "workshop", "--attach", vllm_url,
                                "--port", str(port), "--max-tokens", str(args.tokens), "--hardware", "cpu",
                                "--state-dir", str(state)],
                               cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_up(base)
            time.sleep(3)
            idle0, t0 = cpu_seconds(app.pid), time.monotonic()
            time.sleep(args.idle_seconds)
            idle = (cpu_seconds(app.pid) - idle0) / (time.monotonic() - t0)
            tokens = {}
            for i in range(args.attendees):
                r = httpx.post(base + "/join", data={"name": f"attendee {i:02d}", "code": code})
                tokens[i] = r.cookies["workbench_attendee"]
            # The attendees live in several client processes: one Python process holding 32
            # gradio_client sessions is itself a bottleneck (GIL), and would be measured as the app's.
            ctx = multiprocessing.get_context("spawn")
            outbox = ctx.Queue()
            workers = []
            for k in range(args.client_processes):
                mine = {i: t for i, t in tokens.items() if i % args.client_processes == k}
                inbox = ctx.Queue()
                proc = ctx.Process(target=client_worker, args=(base, mine, inbox, outbox, args.client_ssl_verify), daemon=True)
                proc.start()
                workers.append((proc, inbox))
            for _ in workers:
                outbox.get(timeout=120)  # "ready": its sessions are open
            rounds = []
            for round_number in range(args.rounds):
                start_at = time.monotonic_ns() + 500_000_000
                cpu0, w0 = cpu_seconds(app.pid), time.monotonic()
                for _, inbox in workers:
                    inbox.put((round_number, start_at))
                results: dict[int, dict] = {}
                client_cpu = 0.0
                for _ in workers:
                    part, cpu = outbox.get(timeout=900)
                    results.update(part)
                    client_cpu += cpu
                wall = time.monotonic() - w0
                busy = (cpu_seconds(app.pid) - cpu0) / wall
                rounds.append((results, busy, client_cpu / wall))
            for proc, inbox in workers:
                inbox.put(None)
                proc.join(30)
            timings = {t["tag"]: t for t in httpx.get(vllm_url + "/timings").json()}
        finally:
            app.terminate()
            app.wait(20)
    if args.raw is not None:
        args.raw.write_text(json.dumps({"rounds": [{str(i): {k: v for k, v in r.items() if k != "answer"}
                                                    for i, r in results.items()} for results, _, _ in rounds],
                                        "server": timings}, indent=1))
    print(f"{args.attendees} attendees, {args.tokens} tokens at {args.rate:g} tok/s each; "
          f"app CPU idle {idle * 100:.1f} % of a core")
    failed = 0
    for round_number, (results, busy, clients_busy) in enumerate(rounds):
        print(f"round {round_number + 1}\n{'attendee':>9} {'send->server (s)':>17} {'in the client':>14} "
              f"{'in the app':>11} {'last token->answer (s)':>23}  own answer")
        worst_arrival = worst_answer = worst_client = worst_app = 0.0
        bad = errors = 0
        for i in range(args.attendees):
            mine = tag(i, round_number)
            r = results.get(i, {"error": "no result"})
            t = timings.get(mine)
            if "error" in r or t is None:
                errors += 1
                print(f"{i:>9} {'error: ' + r.get('error', 'never reached the server')}")
                continue
            arrival = (t["arrival_ns"] - r["sent"]) / 1e9
            tail = (r["done"] - t["last_sent_ns"]) / 1e9
            words = r["answer"].split()
            own = bool(words) and words[0] == f"{mine}0" and f"{mine}{args.tokens - 1}" in words
            others = any(not w.startswith(mine) for w in words)
            bad += (not own) or others
            worst_arrival, worst_answer = max(worst_arrival, arrival), max(worst_answer, tail)
            # Split where the client's request to join the app's queue left it.
            client = (r["join"] - r["sent"]) / 1e9 if r.get("join") else float("nan")
            in_app = (t["arrival_ns"] - r["join"]) / 1e9 if r.get("join") else float("nan")
            worst_client, worst_app = max(worst_client, client), max(worst_app, in_app)
            print(f"{i:>9} {arrival:>17.3f} {client:>14.3f} {in_app:>11.3f} {tail:>23.3f}  "
                  f"{'yes' if own and not others else 'NO'}")
        print(f"round {round_number + 1}: worst send->server {worst_arrival:.3f} s (of it, worst in the scripted "
              f"client before posting {worst_client:.3f} s, worst from the post to the server {worst_app:.3f} s); "
              f"worst last token->answer "
              f"{worst_answer:.3f} s; errors {errors}; wrong answers {bad}; app CPU {busy * 100:.0f} % of a core; "
              f"the scripted attendees' CPU {clients_busy * 100:.0f} % of a core (on the same 2 cores)")
        failed += errors + bad
        if args.target_s is not None:
            met = worst_arrival <= args.target_s and worst_answer <= args.target_s
            print(f"round {round_number + 1}: target (every arrival and every answer within {args.target_s:g} s) "
                  f"{'met' if met else 'MISSED'}")
            failed += not met
    print(f"/proc/loadavg: {Path('/proc/loadavg').read_text().strip()}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
