"""Attack a workshop as a hostile attendee would (issue 21's audit, again) and print what held.

    python benchmarks/workshop_attack.py

Starts the fixed-rate server (tests/helpers, its own process, known timing) and
`python -m workbench workshop --attach` with a room code and a presenter login,
bound to 127.0.0.1. Every client here is plain HTTP from a chosen source address
(127.0.0.0/8 is all loopback on Linux): 127.0.0.1 is the attacker, 127.0.0.2 a
well-behaved attendee on their own address, 127.0.0.3/4/5 guessers. Chats go through
Gradio's queue as a browser's do (queue/join, then the queue/data stream).

The two floods of wrong guesses (40 presenter logins, 120 room codes, each from one
address, sent back to back) print every answer's status and time: past the free ones
each must be answered at once (429 with Retry-After), none held, and the right
password or code must get in once the Retry-After has passed.

Each line says HELD or NOT HELD and the figures behind it. The last part floods
the room with turns from one address while a second attendee chats, and prints
that attendee's send -> request-at-the-server times (the server's arrival stamps;
one clock, time.monotonic_ns, for every process) against the 1 s target.
Exits 1 if anything did not hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.fixed_rate_server import FixedRateServer  # noqa: E402
from workbench.server import free_port  # noqa: E402
from workbench.ui.guards import LOGIN_FREE, LOGIN_MAX_BACKOFF_S  # noqa: E402
from workbench.workshop.signin import CODE_MAX_BACKOFF_S, FREE_FAILURES  # noqa: E402

CODE = "attack-room-7"
PRESENTER = ("presenter", "presenter-password-77")
ATTACKER, SECOND, GUESSER, LOGIN_GUESSER, CODE_FLOODER = "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"
COOKIE = "workbench_attendee"
results: list[tuple[bool, str]] = []


def report(held: bool, what: str) -> None:
    results.append((held, what))
    print(f"[{'HELD' if held else 'NOT HELD'}] {what}", flush=True)


def client(base: str, address: str, **kwargs: Any) -> httpx.Client:
    return httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address=address), timeout=120, **kwargs)


def aclient(base: str, address: str) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    return httpx.AsyncClient(base_url=base, transport=httpx.AsyncHTTPTransport(local_address=address, limits=limits),
                             timeout=300)


def join(http: httpx.Client, name: str, code: str = CODE, **headers: str) -> httpx.Response:
    return http.post("/join", data={"name": name, "code": code}, headers=headers)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def chat_fn_index(http: httpx.Client, cookie: str) -> int:
    config = http.get("/config", headers={"Cookie": f"{COOKIE}={cookie}"}).json()
    return next(int(d["id"]) for d in config["dependencies"] if d.get("api_name") == "chat")


async def chat(http: httpx.AsyncClient, cookie: str, fn_index: int, text: str,
               session: str | None = None) -> dict[str, Any]:
    """One message through Gradio's queue, as the page sends it; the answer or the refusal.
    `session`: a page's session hash (one conversation); None: a new one for each message."""
    session = session or uuid.uuid4().hex[:12]
    headers = {"Cookie": f"{COOKIE}={cookie}"}
    sent = time.monotonic_ns()
    joined = await http.post("/gradio_api/queue/join", headers=headers,
                             json={"data": [text, None], "fn_index": fn_index, "session_hash": session})
    if joined.status_code != 200:
        return {"sent": sent, "error": f"HTTP {joined.status_code}"}
    async with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}, headers=headers) as s:
        async for line in s.aiter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("msg") == "process_completed":
                output = message.get("output") or {}
                if message.get("success"):
                    return {"sent": sent, "done": time.monotonic_ns(), "answer": output["data"][0]}
                return {"sent": sent, "error": str(output.get("error") or output)[:160]}
    return {"sent": sent, "error": "the stream ended without an answer"}


def attack_takeover(base: str) -> None:
    with client(base, SECOND) as victim, client(base, ATTACKER) as attacker:
        cookie = join(victim, "Victim").cookies[COOKIE]
        refused = [join(attacker, spelling) for spelling in ("Victim", "victim", "VICTIM", "Ｖｉｃｔｉｍ", "Viсtim")]
        report(all(r.status_code == 400 and COOKIE not in r.cookies for r in refused),
               f"takeover: 5 sign-ins as the victim's name (case, fullwidth, Cyrillic 'с') -> "
               f"{[r.status_code for r in refused]}, no session given")
        changed = cookie[:-1] + ("B" if cookie.endswith("A") else "A")  # never the cookie itself (1 in 64)
        forged = [attacker.get("/", headers={"Cookie": f"{COOKIE}={value}"}).status_code
                  for value in ("VmljdGlt", "VmljdGlt.AAAA", changed, "x" * 43)]
        report("Victim" not in cookie and all(code == 303 for code in forged),
               f"forged cookies (the name's base64, a signature guess, one character changed) -> {forged} (to /join)")


def attack_signin_flood(base: str, count: int) -> None:
    with client(base, ATTACKER) as attacker, client(base, SECOND) as second:
        started = time.monotonic()
        codes = [join(attacker, f"bot {i}", **{"X-Forwarded-For": f"10.{i // 250}.{i % 250}.9"}).status_code
                 for i in range(count)]
        took = time.monotonic() - started
        admitted = codes.count(303)
        real = join(second, "Real Person")
        report(admitted <= 64 and real.status_code == 303,
               f"sign-in flood: {count} made-up names in {took:.1f} s from one address with a rotating "
               f"X-Forwarded-For -> {admitted} admitted, {codes.count(429)} refused (429); a real attendee on "
               f"another address then -> {real.status_code}")


async def attack_code_guessing(base: str, seconds: float) -> None:
    async with aclient(base, GUESSER) as guesser:
        checked: list[float] = []
        refused = 0
        slowest = 0.0
        started = time.monotonic()
        stop = started + seconds

        async def guess(i: int) -> None:
            nonlocal refused, slowest
            while time.monotonic() < stop:
                sent = time.monotonic()
                r = await guesser.post("/join", data={"name": f"guess {i}", "code": f"wrong-{uuid.uuid4().hex[:6]}"})
                slowest = max(slowest, time.monotonic() - sent)
                if r.status_code == 400:
                    checked.append(time.monotonic())
                else:
                    refused += 1
                    await asyncio.sleep(0.05)

        await asyncio.gather(*(guess(i) for i in range(16)))
        penalised = sorted(checked)[FREE_FAILURES:]
        span = (penalised[-1] - penalised[0]) if len(penalised) > 1 else seconds
        rate = (len(penalised) - 1) / span if len(penalised) > 1 else 0.0
        right, waited = await right_after_backoff(guesser, "/join", {"name": "Late Guest", "code": CODE})
    report(rate <= 1.0 / CODE_MAX_BACKOFF_S + 0.1 and slowest < 1.0,
           f"room-code guessing: 16 concurrent guessers for {seconds:.0f} s from one address -> {len(checked)} codes "
           f"checked: {FREE_FAILURES} free, then {len(penalised)} at {rate:.2f}/s; {refused} refused at once "
           f"unchecked (429); slowest answer {slowest * 1000:.0f} ms")
    report(right.status_code == 303 and waited <= CODE_MAX_BACKOFF_S + 1,
           f"the right code from the guessers' own address right after -> {right.status_code} after {waited:.1f} s "
           f"(the back-off in force; at most {CODE_MAX_BACKOFF_S:g} s)")
    with client(base, SECOND) as other:
        started = time.monotonic()
        ok = join(other, "Other Guest")
        report(ok.status_code == 303 and time.monotonic() - started < 1.0,
               f"the right code from another address meanwhile -> {ok.status_code} in "
               f"{time.monotonic() - started:.2f} s")


async def right_after_backoff(http: httpx.AsyncClient, path: str,
                              data: dict[str, str]) -> tuple[httpx.Response, float]:
    """The right answer from a guesser's address: refused with Retry-After while the back-off
    lasts (the guessers' last checks may still be starting one), sent again when it says.
    The answer, and the seconds from the first try."""
    started = time.monotonic()
    answer = await http.post(path, data=data)
    while answer.status_code == 429 and time.monotonic() - started < 120:
        await asyncio.sleep(int(answer.headers["retry-after"]))
        answer = await http.post(path, data=data)
    return answer, time.monotonic() - started


Answer = tuple[int, float, int | None]  # status (0: no answer in 10 s), seconds to it, Retry-After


def flood(base: str, address: str, path: str, data_for: Any, count: int) -> list[Answer]:
    """`count` posts back to back from `address`, each sent when the last was answered, by a
    client that gives up after 10 s (as the issue's did)."""
    answers: list[Answer] = []
    with client(base, address) as http:
        http.timeout = httpx.Timeout(10.0)
        for i in range(count):
            started = time.monotonic()
            try:
                r = http.post(path, data=data_for(i))
            except httpx.TimeoutException:
                answers.append((0, time.monotonic() - started, None))
                continue
            retry = r.headers.get("retry-after")
            answers.append((r.status_code, time.monotonic() - started, int(retry) if retry else None))
    return answers


def runs(answers: list[Answer]) -> str:
    """Runs of one status, in order: '1-5: 400 in 1-3 ms; 6-40: 429 Retry-After 1 s in 1-2 ms'."""
    parts = []
    i = 0
    while i < len(answers):
        j = i
        while j + 1 < len(answers) and answers[j + 1][0] == answers[i][0]:
            j += 1
        group = answers[i:j + 1]
        ms = [round(t * 1000) for _, t, _ in group]
        retries = sorted({r for _, _, r in group if r is not None})
        span = f"{retries[0]}" + (f"-{retries[-1]}" if len(retries) > 1 else "") if retries else ""
        retry = f" Retry-After {span} s" if retries else ""
        status = str(answers[i][0]) if answers[i][0] else "no answer"
        parts.append(f"{i + 1}{'' if i == j else f'-{j + 1}'}: {status}{retry} in {min(ms)}-{max(ms)} ms")
        i = j + 1
    return "; ".join(parts)


def print_answers(answers: list[Answer]) -> None:
    """Every answer: #n status (RA: its Retry-After, s) and milliseconds to it."""
    line = "   "
    for k, (status, took, retry) in enumerate(answers, 1):
        item = f" #{k} {status or 'none'}{f' RA{retry}' if retry else ''} {took * 1000:.0f}ms"
        if len(line) + len(item) > 112:
            print(line)
            line = "   "
        line += item
    print(line, flush=True)


def attack_flood(base: str, address: str, what: str, path: str, data_for: Any, count: int, free: int,
                 max_backoff: float, right: dict[str, str], signed_in: int) -> None:
    """`count` wrong guesses back to back: each answered within 1 s, the first `free` checked
    (400), then 429 with Retry-After; then the right one: refused unchecked while the back-off
    lasts, and `signed_in` once its Retry-After has passed."""
    started = time.monotonic()
    answers = flood(base, address, path, data_for, count)
    took = time.monotonic() - started
    codes = [status for status, _, _ in answers]
    slowest = max(t for _, t, _ in answers)
    report(slowest < 1.0 and codes[:free] == [400] * free and codes[free:free + 1] == [429]
           and set(codes) == {400, 429} and all(r is not None for s, _, r in answers if s == 429),
           f"{what}: {count} wrong, back to back from one address, in {took:.2f} s -> each answered within "
           f"{slowest * 1000:.0f} ms (target 1 s): {runs(answers)}")
    print_answers(answers)
    with client(base, address) as http:
        started = time.monotonic()
        early = http.post(path, data=right)
        wait = int(early.headers.get("retry-after", "0"))
        time.sleep(wait)
        late = http.post(path, data=right)
        total = time.monotonic() - started
    report(early.status_code == 429 and late.status_code == signed_in and wait <= max_backoff,
           f"the right one from that address next -> {early.status_code} (Retry-After {wait} s, unchecked), "
           f"after the wait -> {late.status_code} ({total:.1f} s in all; the back-off is at most {max_backoff:g} s)")


def attack_input_and_uploads(base: str, app_pid: int) -> None:
    with client(base, ATTACKER) as attacker:
        cookie = join(attacker, "Big Sender", **{}).cookies.get(COOKIE)
        if cookie is None:  # this address spent its sign-ins in the flood: wait for one
            time.sleep(5.5)
            cookie = join(attacker, "Big Sender").cookies[COOKIE]
        headers = {"Cookie": f"{COOKIE}={cookie}"}
        fn_index = chat_fn_index(attacker, cookie)
        before = rss_mb(app_pid)
        huge = attacker.post("/gradio_api/queue/join", headers=headers,
                             json={"data": ["x" * 5_000_000, None], "fn_index": fn_index, "session_hash": "h1"})
        report(huge.status_code == 413, f"a 5 MB message -> HTTP {huge.status_code}")
        upload = attacker.post("/gradio_api/upload", headers=headers, files={"files": ("big.bin", b"\0" * 2_000_000)})
        report(upload.status_code == 403, f"a 2 MB upload to Gradio's /upload as an attendee -> HTTP {upload.status_code}")

        async def sends() -> list[dict[str, Any]]:
            async with aclient(base, ATTACKER) as http:
                page = uuid.uuid4().hex[:12]  # one page: one conversation, growing
                out = [await chat(http, cookie, fn_index, "y" * 9_000, page)]
                for i in range(12):
                    out.append(await chat(http, cookie, fn_index, f"big{i}- " + "z" * 7_900, page))
                return out

        answers = asyncio.run(sends())
        too_long = answers[0].get("error", "")
        refused_history = [a for a in answers[1:] if "Press Clear" in a.get("error", "")]
        report("9,000 characters long" in too_long,
               f"a 9,000-character message -> refused: {too_long[:90]!r}")
        report(len(refused_history) > 0,
               f"12 messages of 7,900 characters in one conversation -> {12 - len(refused_history)} answered, "
               f"{len(refused_history)} refused at the history limit")
        after = rss_mb(app_pid)
        report(after - before < 100,
               f"the app's resident memory {before:.0f} MB -> {after:.0f} MB after these (the audit saw +410 MB)")


def attack_rebinding(base: str) -> None:
    with client(base, ATTACKER) as http:
        codes = [http.get(path, headers={"Host": "rebind.attacker.example"}).status_code
                 for path in ("/", "/join", "/presenter/", "/config")]
        report(all(code == 421 for code in codes), f"Host: rebind.attacker.example on /, /join, /presenter/, /config -> {codes}")


def flood_worker(base: str, cookies: list[str], fn_index: int, seconds: float, per_name: int, outbox: Any) -> None:
    """The flooder, in its own process (an attacker's CPU is on their own machine, not on the app's
    event loop): every name keeps `per_name` messages going as fast as answers and refusals come back."""
    counts: dict[str, int] = {}

    async def hammer(http: httpx.AsyncClient, cookie: str, i: int) -> None:
        stop = time.monotonic() + seconds
        n = 0
        while time.monotonic() < stop:
            result = await chat(http, cookie, fn_index, f"flood{i}n{n}- tell me everything")
            n += 1
            error = result.get("error", "")
            key = ("answered" if not error else "refused: a turn still running" if "still being answered" in error
                   else "refused: the address's turn limit" if "from your network" in error
                   else "refused at the door (429)" if "429" in error else error[:60])
            counts[key] = counts.get(key, 0) + 1

    async def run() -> None:
        async with aclient(base, ATTACKER) as http:
            await asyncio.gather(*(hammer(http, c, i) for i, c in enumerate(cookies) for _ in range(per_name)))

    asyncio.run(run())
    outbox.put(counts)


async def second_attendees(base: str, names: list[str], gap_s: float) -> list[dict[str, Any]]:
    """Well-behaved attendees on their own address, one message each, `gap_s` apart."""
    async with aclient(base, SECOND) as http:
        cookies = []
        for name in names:
            r = await http.post("/join", data={"name": name, "code": CODE})
            cookies.append(r.cookies[COOKIE])
        config = (await http.get("/config", headers={"Cookie": f"{COOKIE}={cookies[0]}"})).json()
        fn_index = next(int(d["id"]) for d in config["dependencies"] if d.get("api_name") == "chat")
        tasks = []
        for k, cookie in enumerate(cookies):
            tasks.append(asyncio.create_task(chat(http, cookie, fn_index, f"second{k}- hello")))
            await asyncio.sleep(gap_s)
        return list(await asyncio.gather(*tasks))


def flood_and_second(base: str, vllm_url: str, flood_names: int, per_name: int, second_turns: int,
                     seconds: float) -> list[float]:
    import multiprocessing

    with client(base, ATTACKER) as attacker:
        cookies = [r.cookies[COOKIE] for i in range(flood_names)
                   if COOKIE in (r := join(attacker, f"flooder {i}")).cookies]
        fn_index = chat_fn_index(attacker, cookies[0])
    ctx = multiprocessing.get_context("spawn")
    outbox = ctx.Queue()
    flooder = ctx.Process(target=flood_worker, args=(base, cookies, fn_index, seconds, per_name, outbox), daemon=True)
    flooder.start()
    time.sleep(2.0)  # the flood is under way
    sends = asyncio.run(second_attendees(base, [f"Second {k}" for k in range(second_turns)],
                                         (seconds - 4.0) / second_turns))
    counts = outbox.get(timeout=seconds + 300)
    flooder.join(30)
    timings = {t["tag"]: t for t in httpx.get(vllm_url + "/timings").json()}
    arrivals = []
    for k, result in enumerate(sends):
        t = timings.get(f"second{k}-")
        if "error" in result or t is None:
            print(f"  second attendee {k}: {result.get('error', 'never reached the server')}")
            continue
        arrivals.append((t["arrival_ns"] - result["sent"]) / 1e9)
    print(f"  flood for {seconds:.0f} s: {len(cookies)} names from one address, {per_name} messages each kept going "
          f"-> {sum(counts.values())} sends: {counts}")
    return arrivals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=50.0, help="decode tok/s of each answer")
    parser.add_argument("--tokens", type=int, default=64, help="the room's max_tokens cap")
    parser.add_argument("--flood-names", type=int, default=40)
    parser.add_argument("--per-name", type=int, default=2, help="messages each flooding name keeps going at once")
    parser.add_argument("--second-turns", type=int, default=5, help="second attendees, one message each")
    parser.add_argument("--flood-seconds", type=float, default=20.0)
    parser.add_argument("--target-s", type=float, default=1.0)
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    state = ROOT / ".state" / "workshop-attack"
    with FixedRateServer(decode_rate=args.rate, echo=True).in_subprocess() as vllm_url:
        env = {**os.environ, "WORKBENCH_ROOM_CODE": CODE, "WORKBENCH_PRESENTER_AUTH": ":".join(PRESENTER),
               "PYTHONPATH": str(ROOT)}
        app = subprocess.Popen([sys.executable, "-m", "workbench", "workshop", "--attach", vllm_url,
                                "--port", str(port), "--max-tokens", str(args.tokens), "--hardware", "cpu",
                                "--state-dir", str(state)], cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
            attack_takeover(base)
            attack_rebinding(base)
            attack_flood(base, LOGIN_GUESSER, "presenter logins", "/presenter/login",
                         lambda i: {"username": PRESENTER[0], "password": f"pw{i}"}, 40, LOGIN_FREE,
                         LOGIN_MAX_BACKOFF_S, {"username": PRESENTER[0], "password": PRESENTER[1]}, 200)
            attack_flood(base, CODE_FLOODER, "room codes", "/join",
                         lambda i: {"name": f"flooder {i}", "code": f"wrong-{i}"}, 120, FREE_FAILURES,
                         CODE_MAX_BACKOFF_S, {"name": "Code Flooder", "code": CODE}, 303)
            asyncio.run(attack_code_guessing(base, 10.0))
            attack_input_and_uploads(base, app.pid)
            # The flood of turns first: the sign-in flood below spends the attacker address's names.
            arrivals = flood_and_second(base, vllm_url, args.flood_names, args.per_name, args.second_turns,
                                        args.flood_seconds)
            worst = max(arrivals) if arrivals else float("inf")
            report(len(arrivals) == args.second_turns and worst <= args.target_s,
                   f"{args.second_turns} other attendees' turns during the flood: send -> server "
                   f"{', '.join(f'{a:.3f}' for a in arrivals)} s (worst {worst:.3f} s; target {args.target_s:g} s)")
            attack_signin_flood(base, 300)
        finally:
            app.terminate()
            app.wait(20)
    held = sum(1 for ok, _ in results if ok)
    print(f"{held} of {len(results)} held; /proc/loadavg: {Path('/proc/loadavg').read_text().strip()}")
    return 0 if held == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
