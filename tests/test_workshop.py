"""Workshop mode: the room, the sign-in, page flags, day-of checks (core, no server),
and the two apps on one port against the fixed-rate server through gradio_client."""

from __future__ import annotations

import shlex
import threading
import time
from pathlib import Path

import httpx
import pytest

from workbench.errors import InputError, LaunchError, RoomError, WorkbenchError
from workbench.server.page_flags import PAGE_FLAGS, check_page_flags, page_flag_problems, parse_help
from workbench.server.checks import EnvironmentCheck
from workbench.server.environment import docker_image_check
from workbench.server.headroom import memory_headroom_check
from workbench.server.hub import download_weights, weights_check
from workbench.workshop.day_of import day_of_checks
from workbench.workshop import Room, RoomLimits, SignIn, WorkshopSettings, normalize_name, settings_from
from workbench.workshop.signin import CODE_MAX_BACKOFF_S

FIXTURES = Path(__file__).parent / "fixtures"
HELP = (FIXTURES / "vllm-0.32.0-cpu" / "vllm_serve_help_all.txt").read_text()
H200_QUERY = (FIXTURES / "nvidia-smi-h200" / "query-gpu.csv").read_text()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ── the room ──────────────────────────────────────────────────────────────


def test_one_turn_at_a_time_and_the_max_tokens_cap():
    room = Room(RoomLimits(one_turn_at_a_time=True, max_tokens=256))
    with pytest.raises(RoomError, match="not signed in"):
        room.begin_turn("Ada")
    room.sign_in("Ada")
    ticket = room.begin_turn("Ada", requested_max_tokens=4096)
    assert ticket.max_tokens == 256
    with pytest.raises(RoomError, match="still being answered") as refused:
        room.begin_turn("Ada")
    assert "Stop" in refused.value.hint
    room.finish_turn(ticket, ttft_s=0.2, decode_tok_s=50.0, tokens=256)
    room.finish_turn(ticket)  # twice is harmless
    assert room.begin_turn("Ada", 100).max_tokens == 100
    room.set_limits(RoomLimits(one_turn_at_a_time=False, max_tokens=None))
    assert room.begin_turn("Ada").max_tokens is None  # a second one at once, uncapped
    snap = room.snapshot()
    [ada] = snap.attendees
    assert (ada.turns, ada.turns_running, ada.last_ttft_s, ada.last_decode_tok_s) == (1, 2, 0.2, 50.0)
    assert snap.turns_running == 2 and snap.turns_finished == 1


def test_redraws_slow_down_as_more_turns_run():
    room = Room(RoomLimits(one_turn_at_a_time=False, turns_per_address=100))
    room.sign_in("a")
    assert room.redraw_interval() == pytest.approx(0.1)
    for _ in range(100):
        room.begin_turn("a")
    assert room.redraw_interval() == pytest.approx(0.4)


def test_broadcasts_reach_pages_open_when_sent_and_go_stale():
    clock = Clock()
    room = Room(clock=clock)
    with pytest.raises(RoomError):
        room.broadcast("  ")
    seen = room.latest_broadcast_id()
    sent = room.broadcast("Explain KV cache.")
    assert room.pending_broadcast(seen) == sent
    assert room.pending_broadcast(sent.id) is None
    clock.now += 1000
    assert room.pending_broadcast(seen) is None


def test_away_attendees_are_not_present():
    clock = Clock()
    room = Room(clock=clock)
    room.sign_in("a")
    room.sign_in("b")
    clock.now += 60
    room.seen("b")
    assert [a.name for a in room.snapshot().present()] == ["b"]


# ── sign-in ───────────────────────────────────────────────────────────────


def test_names_are_checked_and_sessions_are_random():
    assert normalize_name("  Ada   Lovelace ") == "Ada Lovelace"
    for bad in ("", "<script>", "x" * 41, "-dash"):
        with pytest.raises(RoomError):
            normalize_name(bad)
    signin = SignIn("ROOM42")
    with pytest.raises(RoomError, match="not right"):
        signin.check("Ada", "room42")
    name = signin.check("Ada", "ROOM42")
    room = Room()
    session = room.sign_in(name)
    assert "Ada" not in session and "ROOM42" not in session and room.name_for(session) == "Ada"
    assert room.name_for(session[:-1] + ("A" if session[-1] != "A" else "B")) is None
    assert Room().name_for(session) is None  # another run of the app: sign in again


def test_wrong_codes_slow_that_address_and_the_right_code_still_gets_in():
    signin = SignIn("ROOM42")
    for _ in range(20):  # a big room's typos behind one NAT cost nothing
        with pytest.raises(RoomError, match="not right") as wrong:
            signin.check("Ada", "guess", client="10.0.0.9")
        assert wrong.value.retry_after_s is None
    with pytest.raises(RoomError, match="yours was not checked") as early:  # the right code, too soon
        signin.check("Ada", "ROOM42", client="10.0.0.9")
    assert 0 < early.value.retry_after_s <= CODE_MAX_BACKOFF_S and "Wait 1 s" in early.value.hint
    assert signin.check("Grace", "ROOM42", client="127.0.0.1") == "Grace"  # another address: at once
    time.sleep(early.value.retry_after_s)
    assert signin.check("Ada", "ROOM42", client="10.0.0.9") == "Ada"  # after the back-off: in


def test_exposed_workshop_needs_code_and_presenter_login_and_scrubs_the_environment():
    with pytest.raises(WorkbenchError, match="Refusing"):
        settings_from("0.0.0.0", 7860, "ROOM42", None, environ={})
    env = {"WORKBENCH_ROOM_CODE": "ROOM42", "WORKBENCH_PRESENTER_AUTH": "p:secret-pw"}
    settings = settings_from("0.0.0.0", 7860, environ=env)
    assert env == {} and settings.presenter_auth == ("p", "secret-pw")
    assert "ROOM42" not in repr(settings) and "secret-pw" not in repr(settings)
    assert settings_from("127.0.0.1", 7860, environ={}).room_code is None
    with pytest.raises(InputError):
        settings_from("127.0.0.1", 7860, presenter_auth="nocolon", environ={})


# ── flags from a page ─────────────────────────────────────────────────────


def test_every_allowed_page_flag_is_a_flag_of_vllm_0_32():
    table = parse_help(HELP)
    assert PAGE_FLAGS <= {flag.name for flag in table.values()}
    assert table["--no-enable-prefix-caching"].name == "--enable-prefix-caching"


@pytest.mark.parametrize("extra", ["--host 0.0.0.0", "--port 9000", "--api-key k", "--trust-remote-code",
                                   "--api_key=k", "--ho 0.0.0.0", "--middleware m.x", "--enforce-eager model2",
                                   "--config f.yaml", "--kv-cache-dtype nope", "--max-num-seqs"])
def test_page_flags_refused(extra):
    problems = page_flag_problems(shlex.split(extra), parse_help(HELP))
    assert problems, extra
    with pytest.raises(InputError) as refused:
        check_page_flags(shlex.split(extra), parse_help(HELP))
    assert "python -m workbench serve" in refused.value.hint


@pytest.mark.parametrize("extra", ["--max-num-seqs 8 --enforce-eager", "--max_num_seqs=4", "-tp 2",
                                   "--no-enable-prefix-caching", "--kv-cache-dtype fp8"])
def test_page_flags_accepted(extra):
    assert page_flag_problems(shlex.split(extra), parse_help(HELP)) == []


def test_without_vllm_the_allowlist_still_refuses():
    assert page_flag_problems(["--host", "0.0.0.0"], None)
    assert page_flag_problems(["--max-num-seqs", "8"], None) == []


def test_launch_from_the_page_refuses_before_anything_starts(tmp_path):
    from workbench.recipes import Selection, load_catalog, render
    from workbench.ui.server_tab import checked_page_plan, page_plan_problems

    plan = render(Selection(hardware="cpu", extra=["--host 0.0.0.0 --trust-remote-code"]), load_catalog())
    assert page_plan_problems(plan)
    with pytest.raises(InputError, match="--host"):
        checked_page_plan(plan.to_dict())


# ── day-of checks ─────────────────────────────────────────────────────────


def test_weights_not_cached_says_how_to_download(tmp_path):
    check = weights_check("nvidia/some-model", cache_dir=tmp_path)
    assert check.status == "missing" and "hf download nvidia/some-model" in check.fix
    assert check.settings == ("download",)  # the command line adds its flag: --download


def test_the_check_command_prints_the_download_flag_under_missing_weights(capsys):
    from workbench.cli.workshop import print_checks

    missing = EnvironmentCheck("weights in the Hugging Face cache", "missing", "not there", "Download it.",
                               settings=("download",))
    assert print_checks([missing]) == 1
    assert "on the command line: --download" in capsys.readouterr().out


def test_download_offline_explains(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    messages: list[str] = []
    with pytest.raises(LaunchError) as failed:
        download_weights("nvidia/some-model", cache_dir=tmp_path, progress=messages.append)
    assert "HF_HUB_OFFLINE" in failed.value.message and "models--nvidia--some-model" in failed.value.hint
    assert messages and "Downloading" in messages[0]


def test_memory_share_on_a_discrete_gpu_from_recorded_nvidia_smi():
    ok = memory_headroom_check(0.9, runner=lambda argv: H200_QUERY)
    assert ok.status == "ok" and "140.4 GiB free" in ok.found


def test_memory_share_on_unified_memory(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 127535352 kB\nMemFree: 60000000 kB\nMemAvailable: 100000000 kB\n")
    cached = memory_headroom_check(0.7, meminfo=meminfo, runner=lambda argv: "NVIDIA GB10, [N/A], 12.1\n")
    assert cached.status == "warning" and "drop_caches" in cached.fix
    meminfo.write_text("MemTotal: 127535352 kB\nMemFree: 30000000 kB\nMemAvailable: 40000000 kB\n")
    short = memory_headroom_check(0.7, meminfo=meminfo, runner=lambda argv: "NVIDIA GB10, [N/A], 12.1\n")
    assert short.status == "missing" and "--gpu-memory-utilization to 0.28" in short.fix


def test_docker_image_check():
    import subprocess

    def absent(argv):
        raise subprocess.CalledProcessError(1, argv)
    missing = docker_image_check("vllm/vllm-openai:nightly", runner=absent)
    assert missing.status == "missing" and "docker pull vllm/vllm-openai:nightly" in missing.fix
    present = docker_image_check("img", runner=lambda argv: "sha256:0123456789abcdef0123 9000000000\n")
    assert present.status == "ok" and "9.0 GB" in present.found


def test_day_of_checks_for_the_spark_plan_each_say_what_to_do():
    from workbench.recipes import Selection, load_catalog, render

    checks = day_of_checks(render(Selection(hardware="dgx_spark_gb10"), load_catalog()))
    names = [c.name for c in checks]
    assert any(n.startswith("weights") for n in names) and any("gpu-memory-utilization 0.7" in n for n in names)
    assert all(c.status == "ok" or c.fix for c in checks)


# ── the two apps on one port ──────────────────────────────────────────────

CODE, PASSWORD = "ROOM-4711", "presenter-pw-0815"


@pytest.fixture(scope="module")
def workshop(tmp_path_factory):
    import uvicorn

    from tests.helpers.fixed_rate_server import FixedRateServer
    from workbench.server import attach, free_port
    from workbench.ui.workshop_server import build_workshop, server_config

    fixed = FixedRateServer(decode_rate=200, echo=True).start()
    state = tmp_path_factory.mktemp("workshop-state")
    settings = WorkshopSettings("127.0.0.1", free_port(), CODE, ("presenter", PASSWORD))
    built = build_workshop(settings, state_dir=state, limits=RoomLimits(True, 40), default_hardware="cpu")
    built.presenter.slot.handle = attach(fixed.base_url, state_dir=state)
    server = uvicorn.Server(server_config(built, settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{settings.port}"
    for _ in range(100):
        try:
            if httpx.get(base + "/healthz").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield built, base, fixed
    server.should_exit = True
    thread.join(10)
    fixed.stop()


def _join(base: str, name: str) -> str:
    r = httpx.post(base + "/join", data={"name": name, "code": CODE})
    assert r.status_code == 303, r.text
    return r.cookies["workbench_attendee"]


def test_attendees_chat_through_the_api_and_get_their_own_answers(workshop):
    from gradio_client import Client

    built, base, fixed = workshop
    tokens = {name: _join(base, name) for name in ("Ada", "Grace", "Alan")}
    clients = {n: Client(base + "/", headers={"Cookie": f"workbench_attendee={t}"}, verbose=False)
               for n, t in tokens.items()}
    api = clients["Ada"].view_api(print_info=False, return_format="dict")
    assert list(api["named_endpoints"]) == ["/chat"] and not api["unnamed_endpoints"]
    jobs = {n: c.submit(f"{n}: hello", api_name="/chat") for n, c in clients.items()}
    for name, job in jobs.items():
        answer, conversation = job.result(timeout=60)
        words = answer.split()
        assert len(words) == 40 and all(w.startswith(f"{name}:") for w in words)  # the room's cap, their own
        assert conversation[0]["role"] == "user" and conversation[0]["content"][0]["text"] == f"{name}: hello"
    rows = {a.name: a for a in built.room.snapshot().attendees}
    assert set(rows) == {"Ada", "Grace", "Alan"}
    assert all(a.turns == 1 and a.last_tokens == 40 and a.last_decode_tok_s for a in rows.values())


def test_attendee_mount_refuses_unauthenticated_and_presenter_calls(workshop):
    built, base, _ = workshop
    assert httpx.get(base + "/").status_code == 303  # to /join
    assert httpx.get(base + "/config").status_code == 401
    body = {"data": ["hi"], "fn_index": 0, "session_hash": "abc123"}
    assert httpx.post(base + "/gradio_api/queue/join", json=body).status_code == 401
    assert httpx.post(base + "/gradio_api/call/chat", json={"data": ["hi"]}).status_code == 401
    cookie = {"workbench_attendee": _join(base, "Mallory")}
    names = {fn.name for fn in built.attendee.fns.values()}
    assert not names & {"do_launch", "do_stop", "do_attach", "send_to_everyone", "apply"}
    for name in ("do_launch", "do_stop", "do_attach"):
        r = httpx.post(base + f"/gradio_api/call/{name}", json={"data": []}, cookies=cookie)
        assert r.status_code >= 400, name
    r = httpx.post(base + "/gradio_api/api/chat", json={"data": ["hi"]}, cookies=cookie)
    assert r.status_code == 404  # api_open=False: queued events only through the queue
    # The presenter's mount wants its own login.
    assert httpx.post(base + "/presenter/gradio_api/call/do_stop", json={"data": []}, cookies=cookie).status_code == 401


def test_secrets_never_reach_pages(workshop):
    built, base, _ = workshop
    cookie = {"workbench_attendee": _join(base, "Eve")}
    login = httpx.post(base + "/presenter/login", data={"username": "presenter", "password": PASSWORD})
    assert login.status_code == 200
    pages = [httpx.get(base + "/join").text, httpx.get(base + "/config", cookies=cookie).text,
             httpx.get(base + "/", cookies=cookie).text,
             httpx.get(base + "/presenter/config", cookies=login.cookies).text]
    assert httpx.get(base + "/presenter/config", cookies=login.cookies).status_code == 200
    for page in pages:
        assert CODE not in page and PASSWORD not in page
