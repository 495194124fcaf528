"""A hostile attendee (issue 21): session takeover, room flooding, unbounded input, uploads,
login guessing, DNS rebinding. The core rules first (no server), then the two apps on one
port against the fixed-rate server, attacked over HTTP as an attendee would."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time

import httpx
import pytest

from workbench.chat import TurnTranscript
from workbench.chat.transcript import Answer, ErrorPart, ToolCallPart
from workbench.errors import InputError, RoomError, WorkbenchError
from workbench.ui.attendee_app import _public_messages
from workbench.workshop import Room, RoomChat, RoomLimits, SignIn, WorkshopSettings, normalize_name, settings_from
from workbench.workshop.room import SIGNIN_BURST
from workbench.workshop.throttle import FailureBackoff, RateLimit
from workbench.workshop.turns import AttendeeChat, public_text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ── sessions and names ────────────────────────────────────────────────────


def test_a_held_name_is_refused_to_a_second_sign_in_in_any_spelling():
    room = Room()
    ada = room.sign_in(normalize_name("Ada"), "10.0.0.1")
    for spelling in ("Ada", "ada", "ADA", "Ａｄａ", " Ada "):  # case, fullwidth, spaces
        with pytest.raises(RoomError, match="already signed in as 'Ada'") as refused:
            room.sign_in(normalize_name(spelling), "10.0.0.2")
        assert "presenter to release" in refused.value.hint
    assert room.name_for(ada) == "Ada"  # the holder keeps it


def test_look_alike_names_are_refused_or_are_the_same_name():
    with pytest.raises(RoomError, match="mixes scripts"):
        normalize_name("Аda")  # Cyrillic А, Latin da
    with pytest.raises(RoomError, match="mixes scripts"):
        normalize_name("Grαce")  # Greek alpha
    assert normalize_name("Ａｌａｎ") == "Alan"  # fullwidth is NFKC-folded
    assert normalize_name("山田 はな") == "山田 はな" and normalize_name("Ольга") == "Ольга"  # one script each
    room = Room()
    room.sign_in(normalize_name("Epoc"))
    with pytest.raises(RoomError, match="already signed in"):
        room.sign_in(normalize_name("Ерос"))  # all Cyrillic, drawn like the Latin name


def test_presenter_removes_bans_and_releases_and_the_conversation_goes_with_the_name():
    from workbench.ui.room_admin import manage_attendee

    room = Room()
    session = room.sign_in("Mallory")
    room.save_conversation("Mallory", {"format": "x", "messages": ["big"]})
    assert "Signed Mallory out" in manage_attendee(room, "remove", "mallory")
    assert room.name_for(session) is None and room.saved_conversation("Mallory") is None
    room.sign_in("Mallory")
    manage_attendee(room, "ban", "MALLORY")
    with pytest.raises(RoomError, match="removed 'Mallory'"):
        room.sign_in("Mallory")
    assert room.snapshot().banned == ("Mallory",)
    assert "Released" in manage_attendee(room, "release", "Mallory")
    assert room.name_for(room.sign_in("Mallory")) == "Mallory"
    with pytest.raises(RoomError):
        manage_attendee(room, "remove", "<script>")


def test_leaving_frees_the_name_and_the_history():
    room = Room()
    session = room.sign_in("Ada")
    room.save_conversation("Ada", {"messages": ["x" * 1000]})
    room.leave(session)
    assert room.name_for(session) is None and not room.is_signed_in("Ada")
    assert room.name_for(room.sign_in("Ada")) == "Ada" and room.saved_conversation("Ada") is None


def test_idle_attendees_expire_unless_a_turn_is_running():
    clock = Clock()
    room = Room(RoomLimits(idle_expire_s=600), clock=clock)
    idle, busy, here = room.sign_in("idle"), room.sign_in("busy"), room.sign_in("here")
    room.save_conversation("idle", {"messages": ["kept until expiry"]})
    room.begin_turn("busy")
    clock.now += 601
    room.seen("here")
    names = [a.name for a in room.snapshot().attendees]
    assert names == ["busy", "here"] and room.name_for(idle) is None and room.saved_conversation("idle") is None
    assert room.name_for(busy) == "busy" and room.name_for(here) == "here"


def test_room_size_is_set_live():
    from workbench.ui.room_admin import apply_room_limits

    room = Room(RoomLimits(max_attendees=2))
    room.sign_in("a")
    room.sign_in("b")
    with pytest.raises(RoomError, match="full"):
        room.sign_in("c")
    limits = apply_room_limits(room, 3, 32, 8000, 48000, 30, True)
    assert limits.max_attendees == 3 and room.limits.max_tokens == RoomLimits().max_tokens  # the others kept
    room.sign_in("c")


@pytest.mark.parametrize("values", [(None, 32, 8000, 48000, 30, True), ("abc", 32, 8000, 48000, 30, True),
                                    (float("nan"), 1, 1, 1, 1, 1), (0, 32, 8000, 48000, 30, True),
                                    (10, -1, 8000, 48000, 30, True), (10, 5, 9000, 1000, 30, True),
                                    (10, 5, 1e308 * 10, 1, 30, True), (10, 5, 100, 100, 0, False)])
def test_hostile_room_limits_are_refused_with_a_reason(values):
    from workbench.ui.room_admin import apply_room_limits

    room = Room()
    before = room.limits
    with pytest.raises(RoomError) as refused:
        apply_room_limits(room, *values)
    assert refused.value.hint and room.limits == before


# ── throttles that fit a room behind one NAT ─────────────────────────────


def test_new_names_from_one_address_are_rate_limited_and_other_addresses_are_not():
    clock = Clock()
    room = Room(clock=clock)
    for i in range(SIGNIN_BURST):  # a room's worth behind one NAT, at once
        room.sign_in(f"attendee {i}", "203.0.113.5")
    with pytest.raises(RoomError, match="Too many new names") as refused:
        room.sign_in("flood 1", "203.0.113.5")
    assert "Try again in" in refused.value.hint
    room.sign_in("Grace", "198.51.100.7")
    clock.now += 5.0
    room.sign_in("late arrival", "203.0.113.5")  # one more every 5 s


def test_turns_at_once_are_limited_per_address_as_well_as_per_name():
    room = Room(RoomLimits(turns_per_address=2))
    for name in ("n1", "n2", "n3", "other"):
        room.sign_in(name)
    first = room.begin_turn("n1", address="10.1.1.1")
    room.begin_turn("n2", address="10.1.1.1")
    with pytest.raises(RoomError, match="from your network"):
        room.begin_turn("n3", address="10.1.1.1")
    room.begin_turn("other", address="10.2.2.2")
    room.finish_turn(first)
    room.begin_turn("n3", address="10.1.1.1")


def test_backoff_answers_at_once_and_doubles_after_the_free_failures():
    clock = Clock()
    backoff = FailureBackoff(free=2, window_s=60, base_s=1, max_s=4, clock=clock)
    for _ in range(2):  # the free ones: checked at once, back to back
        assert backoff.admit("a") == 0.0
        backoff.failed("a")
    assert backoff.admit("a") == pytest.approx(1.0)  # after the 2nd failure: 1 s, said at once
    clock.now += 0.4
    assert backoff.admit("a") == pytest.approx(0.6)  # asking again moves nothing
    waits = []
    for _ in range(4):  # each one checked when its wait is over: 1 s, 2 s, 4 s, 4 s (the most)
        clock.now += backoff.admit("a")
        assert backoff.admit("a") == 0.0
        backoff.failed("a")
        waits.append(backoff.admit("a"))
    assert waits == [pytest.approx(2.0), pytest.approx(4.0), pytest.approx(4.0), pytest.approx(4.0)]
    assert backoff.admit("b") == 0.0  # another address is not slowed
    clock.now += 4.0
    assert backoff.admit("a") == 0.0  # the right answer after the wait is checked ...
    backoff.passed("a")
    assert backoff.failures("a") == 6  # ... and wipes nothing
    clock.now += 61
    assert backoff.admit("a") == 0.0 and backoff.failures("a") == 0  # the window passed: no lockout for good


def test_backoff_gives_a_burst_no_more_checks_than_a_sequence():
    clock = Clock()
    backoff = FailureBackoff(free=3, window_s=60, base_s=1, max_s=4, clock=clock)
    admitted = [backoff.admit("a") for _ in range(10)]  # all at once: none has failed yet
    assert admitted[:3] == [0.0, 0.0, 0.0] and all(w == pytest.approx(1.0) for w in admitted[3:])
    for _ in range(3):
        backoff.failed("a")
    assert backoff.admit("a") == pytest.approx(1.0)
    clock.now += 1.0
    assert backoff.admit("a") == 0.0  # the 4th is checked; while it is, the next waits as if it failed
    assert backoff.admit("a") == pytest.approx(2.0)


def test_rate_limit_refills():
    clock = Clock()
    limit = RateLimit(2, 0.5, clock=clock)
    assert limit.take("x") == 0.0 and limit.take("x") == 0.0
    assert limit.take("x") == pytest.approx(2.0)
    clock.now += 2.0
    assert limit.take("x") == 0.0


def test_forwarded_for_is_read_only_from_the_trusted_proxy():
    from workbench.ui.workshop_server import server_config

    class App:
        app = None

    plain = server_config(App(), WorkshopSettings("127.0.0.1", 7860))
    assert plain.proxy_headers is False
    proxied = server_config(App(), WorkshopSettings("0.0.0.0", 7860, "code-1", ("p", "password-1"),
                                                    trusted_proxy="10.0.0.2"))
    assert proxied.proxy_headers is True and proxied.forwarded_allow_ips == "10.0.0.2"


# ── bounds ────────────────────────────────────────────────────────────────


def test_messages_and_conversations_over_the_limits_are_refused_before_the_server():
    room = Room(RoomLimits(max_message_chars=100, max_history_chars=250))
    room.sign_in("Ada")
    asked = []
    chat_room = RoomChat(room, lambda: asked.append(1) or ("http://127.0.0.1:9", "m"))
    chat = AttendeeChat()

    async def send(text):
        async for _ in chat_room.turn(chat, "Ada", text):
            pass

    with pytest.raises(RoomError, match="101 characters long; the room's limit is 100"):
        asyncio.run(send("x" * 101))
    from workbench.chat import Conversation

    chat.restored = Conversation.from_dict({"format": "workbench-conversation/1", "messages": [
        {"role": "user", "content": "u" * 100}, {"role": "assistant", "content": "a" * 100}]})
    with pytest.raises(RoomError, match="Press Clear"):
        asyncio.run(send("y" * 60))
    assert asked == []  # refused before the server was even looked up


def test_presenter_turns_attendee_tools_off():
    room = Room()
    chat_room = RoomChat(room, lambda: (None, "none"))
    chat = AttendeeChat()
    chat.options.use_tools = True
    assert chat_room.chat_options(chat, "m", 10).use_tools is True
    room.set_limits(RoomLimits(tools_allowed=False))
    assert chat_room.chat_options(chat, "m", 10).use_tools is False


def test_attendee_error_texts_carry_no_path_of_this_machine():
    said = public_text("The model `/home/u/.cache/workbench/demo/smollm2-135m-q4` does not exist.")
    assert "/home" not in said and "smollm2-135m-q4" in said
    assert public_text("see http://127.0.0.1:8000/v1/models") == "see http://127.0.0.1:8000/v1/models"


def test_an_attendees_turn_shows_errors_without_paths_and_the_answer_as_it_came():

    path = "/home/u/.cache/workbench/demo/smollm2-135m-q4"
    transcript = TurnTranscript(user_text="hi", parts=[
        Answer(0, f"Your file is at {path}."),  # the model's words are the attendee's own business
        ToolCallPart(0, 0, "c1", "read", status="error", error=f"no such file {path}"),
        ErrorPart(f"The model `{path}` does not exist.", hint="Check the Server tab.")])
    user, answer, tool, error = _public_messages(transcript)
    assert user["content"] == "hi" and path in answer["content"]
    assert path not in tool["content"] and "smollm2-135m-q4" in tool["content"]
    assert path not in error["content"] and "does not exist" in error["content"]


# ── passwords ─────────────────────────────────────────────────────────────


def test_short_passwords_are_refused_at_start_with_the_reason():
    from workbench.ui.app import auth_from

    with pytest.raises(InputError, match="2 characters long; it must be at least 8"):
        settings_from("0.0.0.0", 7860, "ROOM42", "presenter:pw", environ={})
    with pytest.raises(WorkbenchError, match="at least 8"):
        auth_from("admin:s3cret")
    assert auth_from("admin:a-long-secret") == ("admin", "a-long-secret")


def test_the_cli_refuses_a_short_auth_password(capsys):
    from workbench.cli import main

    assert main(["ui", "--auth", "admin:xy"]) == 2
    err = capsys.readouterr().err
    assert "at least 8" in err and "Traceback" not in err


# ── the apps, attacked over HTTP ──────────────────────────────────────────

CODE, PASSWORD = "ROOM-9191", "presenter-pw-9191"


@pytest.fixture(scope="module")
def room(tmp_path_factory):
    import uvicorn

    from tests.helpers.fixed_rate_server import FixedRateServer
    from workbench.server import attach, free_port
    from workbench.ui.workshop_server import build_workshop, server_config

    fixed = FixedRateServer(decode_rate=200, echo=True).start()
    state = tmp_path_factory.mktemp("attack-state")
    settings = WorkshopSettings("127.0.0.1", free_port(), CODE, ("presenter", PASSWORD))
    built = build_workshop(settings, state_dir=state, limits=RoomLimits(True, 20, max_message_chars=2000),
                           default_hardware="cpu")
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
    yield built, base
    server.should_exit = True
    thread.join(10)
    fixed.stop()


def _join(base: str, name: str, **headers: str) -> httpx.Response:
    return httpx.post(base + "/join", data={"name": name, "code": CODE}, headers=headers)


def test_signing_in_with_someone_elses_name_does_not_reach_their_conversation(room):
    built, base = room
    ada = _join(base, "Ada")
    assert ada.status_code == 303
    cookie = ada.cookies["workbench_attendee"]
    assert "Ada" not in cookie and "QWRh" not in cookie  # not the name, nor its base64
    for spelling in ("Ada", "ada", "Ａｄａ"):
        taken = _join(base, spelling)
        assert taken.status_code == 400 and "already signed in as" in taken.text
        assert "workbench_attendee" not in taken.cookies
    assert httpx.get(base + "/", cookies={"workbench_attendee": cookie}).status_code == 200
    assert httpx.get(base + "/", cookies={"workbench_attendee": cookie[:-2] + "xx"}).status_code == 303
    # The presenter removes Ada: her session ends, the name is free.
    built.room.remove("Ada")
    assert httpx.get(base + "/", cookies={"workbench_attendee": cookie}).status_code == 303
    assert _join(base, "Ada").status_code == 303


def test_attendees_cannot_upload_or_send_oversized_bodies(room):
    _, base = room
    cookie = {"workbench_attendee": _join(base, "Uploader").cookies["workbench_attendee"]}
    upload = httpx.post(base + "/gradio_api/upload", files={"files": ("x.bin", b"\0" * 4096)}, cookies=cookie)
    assert upload.status_code == 403
    big = {"data": ["x" * 2_000_000], "fn_index": 0, "session_hash": "abcdef123"}
    assert httpx.post(base + "/gradio_api/queue/join", json=big, cookies=cookie).status_code == 413


def test_a_flood_of_queue_joins_from_one_session_is_refused_at_the_door(room):
    _, base = room
    cookie = {"workbench_attendee": _join(base, "Hammer").cookies["workbench_attendee"]}
    body = {"data": ["hi", None], "fn_index": 0, "session_hash": "hammer123"}
    codes = [httpx.post(base + "/gradio_api/queue/join", json=body, cookies=cookie).status_code for _ in range(14)]
    assert codes.count(429) >= 3 and codes[0] != 429


def test_a_long_message_is_refused_with_the_limit(room):
    from gradio_client import Client

    _, base = room
    token = _join(base, "Verbose").cookies["workbench_attendee"]
    client = Client(base + "/", headers={"Cookie": f"workbench_attendee={token}"}, verbose=False)
    with pytest.raises(Exception, match="2,001 characters long; the room.{1,6}s limit is 2,000"):
        client.submit("z" * 2001, api_name="/chat").result(timeout=30)
    answer, _ = client.submit("short: hi", api_name="/chat").result(timeout=30)
    assert answer.split()[0] == "short:0"


def test_the_app_answers_only_its_own_host_names(room):
    _, base = room
    assert httpx.get(base + "/join", headers={"Host": "rebind.attacker.example"}).status_code == 421
    assert httpx.get(base + "/presenter/", headers={"Host": "rebind.attacker.example:7860"}).status_code == 421
    for host in ("localhost", "127.0.0.1:1234", "[::1]:7860"):
        assert httpx.get(base + "/join", headers={"Host": host}).status_code == 200, host


# Each flood comes from its own loopback address (all of 127.0.0.0/8 is this machine): the
# other tests' sign-ins from 127.0.0.1 are not on its back-off.
LOGIN_GUESSER, CODE_GUESSER = "127.0.0.6", "127.0.0.5"


def _flood(base: str, address: str, path: str, data_for,
           count: int) -> tuple[list[tuple[int, float, int | None, str]], float]:
    """`count` posts back to back from `address`, each sent when the last was answered, each answered
    within a second: (status, seconds to the answer, Retry-After, body) of each, and the flood's seconds."""
    answers = []
    flood_started = time.monotonic()
    with httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address=address), timeout=10) as http:
        for i in range(count):
            started = time.monotonic()
            r = http.post(path, data=data_for(i))
            retry = r.headers.get("retry-after")
            answers.append((r.status_code, time.monotonic() - started, int(retry) if retry else None, r.text))
    flood_s = time.monotonic() - flood_started
    slowest = max(took for _, took, _, _ in answers)
    assert slowest < 1.0, f"an answer took {slowest:.2f} s: {[(s, round(t, 3)) for s, t, _, _ in answers]}"
    return answers, flood_s


def _checks_allowed(free: int, flood_s: float) -> int:
    """Most checks a flood of `flood_s` seconds can get: the free ones, then one 1, 2, 4 ... back-offs
    (in units of the first) apart. With the first back-off 1 s: checks at 1, 3, 7, 15 s ..."""
    return free + int(math.log2(flood_s + 1))


def test_forty_wrong_presenter_logins_are_answered_at_once_and_the_right_one_gets_in_after_the_backoff(room):
    from workbench.ui.guards import LOGIN_BACKOFF_S, LOGIN_FREE, LOGIN_MAX_BACKOFF_S

    _, base = room
    answers, flood_s = _flood(base, LOGIN_GUESSER, "/presenter/login",
                              lambda i: {"username": "presenter", "password": f"guess{i}"}, 40)
    codes = [status for status, *_ in answers]
    # Gradio answers a wrong login 400 ("Incorrect credentials", which its login form shows).
    assert codes[:LOGIN_FREE] == [400] * LOGIN_FREE and codes[LOGIN_FREE] == 429, codes
    assert set(codes) == {400, 429} and codes.count(400) <= _checks_allowed(LOGIN_FREE, flood_s / LOGIN_BACKOFF_S)
    for status, _, retry, body in answers:
        if status == 429:
            assert retry is not None and 1 <= retry <= LOGIN_MAX_BACKOFF_S
            assert json.loads(body)["detail"].endswith(f"The next login is checked in {retry} s.")
    with httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address=LOGIN_GUESSER)) as http:
        # The right password while the back-off lasts: refused unchecked (nothing leaks), and a
        # browser that posts the form itself is given a page saying the wait.
        right = {"username": "presenter", "password": PASSWORD}
        early = http.post("/presenter/login", data=right, headers={"Accept": "text/html,application/xhtml+xml"})
        assert early.status_code == 429 and "<html" in early.text
        wait = int(early.headers["retry-after"])
        assert 1 <= wait <= LOGIN_MAX_BACKOFF_S and f"The next login is checked in {wait} s." in early.text
        time.sleep(wait)
        signed_in = http.post("/presenter/login", data=right)
        assert signed_in.status_code == 200, (signed_in.status_code, signed_in.text)
        assert http.get("/presenter/config").status_code == 200  # the session cookie works


def test_a_hundred_and_twenty_wrong_room_codes_are_answered_at_once_and_the_right_one_gets_in(room):
    from workbench.workshop.signin import CODE_BACKOFF_S, CODE_MAX_BACKOFF_S, FREE_FAILURES

    _, base = room
    answers, flood_s = _flood(base, CODE_GUESSER, "/join",
                              lambda i: {"name": f"guesser {i}", "code": f"WRONG-{i}"}, 120)
    codes = [status for status, *_ in answers]
    assert codes[:FREE_FAILURES] == [400] * FREE_FAILURES and codes[FREE_FAILURES] == 429, codes
    assert set(codes) == {400, 429} and codes.count(400) <= _checks_allowed(FREE_FAILURES, flood_s / CODE_BACKOFF_S)
    for status, _, retry, body in answers:
        if status == 400:
            assert "That room code is not right." in body
        else:  # the join page again, saying the wait
            assert retry is not None and 1 <= retry <= CODE_MAX_BACKOFF_S
            assert f"yours was not checked. Wait {retry} s, then try again." in body and 'id="join-code"' in body
    with httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address=CODE_GUESSER)) as http:
        right = {"name": "Patient Guest", "code": CODE}
        early = http.post("/join", data=right)  # while the back-off lasts: refused unchecked
        assert early.status_code == 429 and "yours was not checked" in early.text
        time.sleep(int(early.headers["retry-after"]))
        signed_in = http.post("/join", data=right)
        assert signed_in.status_code == 303, (signed_in.status_code, signed_in.text)
        assert http.get("/").status_code == 200  # the session cookie works


def test_the_presenter_login_page_carries_the_wait_notice_and_other_pages_do_not(room):
    _, base = room
    browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}  # a page the browser opens
    assert 'id="workbench-login-wait"' in httpx.get(base + "/presenter/", headers=browser).text
    with httpx.Client(base_url=base, headers=browser) as presenter:
        signed_in = presenter.post("/presenter/login", data={"username": "presenter", "password": PASSWORD})
        assert signed_in.status_code == 200
        page = presenter.get("/presenter/")
        assert page.status_code == 200 and "workbench-login-wait" not in page.text
    with httpx.Client(base_url=base, headers=browser) as attendee:
        assert attendee.post("/join", data={"name": "Page Reader", "code": CODE}).status_code == 303
        page = attendee.get("/")
        assert page.status_code == 200 and "workbench-login-wait" not in page.text


def test_forwarded_for_cannot_rotate_past_the_sign_in_limit(room):
    """Last in the module: it spends this address's sign-ins."""
    built, base = room
    built.room.set_limits(RoomLimits(max_attendees=1000))
    codes = [_join(base, f"flood {i}", **{"X-Forwarded-For": f"10.9.{i // 250}.{i % 250}"}).status_code
             for i in range(SIGNIN_BURST + 5)]
    assert 429 in codes and codes.count(303) <= SIGNIN_BURST
    refused = _join(base, "one more", **{"X-Forwarded-For": "10.200.0.1"})
    assert refused.status_code == 429 and "Too many new names" in refused.text
