"""Workshop mode in a real browser: the presenter's Room tab and 4 attendee pages in one
Chromium. Attendees sign in at /join and chat (the fixed-rate server answers, so its
/metrics counters move); the Room tab lists the 4 of them and a non-zero decode rate."""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest

from tests.test_ui_browser import CHROMIUM_ARGS, _wait_for, browser  # noqa: F401  (the module's fixture)

pytestmark = pytest.mark.browser
CODE, PASSWORD = "ROOM-2222", "pw-for-the-presenter"
NAMES = ["Ada", "Grace", "Alan", "Barbara"]


@pytest.fixture(scope="module")
def room_url(tmp_path_factory):
    import uvicorn

    from tests.helpers.fixed_rate_server import FixedRateServer
    from workbench.server import attach, free_port
    from workbench.ui.workshop_server import build_workshop, server_config
    from workbench.workshop import RoomLimits, WorkshopSettings

    fixed = FixedRateServer(decode_rate=20, echo=True).start()
    state = tmp_path_factory.mktemp("room-state")
    settings = WorkshopSettings("127.0.0.1", free_port(), CODE, ("presenter", PASSWORD))
    built = build_workshop(settings, state_dir=state, limits=RoomLimits(True, 400), default_hardware="cpu")
    built.presenter.slot.handle = attach(fixed.base_url, state_dir=state)
    server = uvicorn.Server(server_config(built, settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{settings.port}"
    _wait_for(lambda: _up(base), 30, "the workshop app")
    yield base
    server.should_exit = True
    thread.join(10)
    fixed.stop()


def _up(base: str) -> bool:
    try:
        return httpx.get(base + "/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def test_room_tab_shows_four_attendees_chatting(browser, room_url, artifacts_dir):  # noqa: F811
    presenter = browser.new_context().new_page()
    presenter.goto(room_url + "/presenter/")
    presenter.fill("input[type=text]", "presenter")
    presenter.fill("input[type=password]", PASSWORD)
    presenter.keyboard.press("Enter")
    presenter.get_by_role("tab", name="Room").click()
    pages = []
    for name in NAMES:
        page = browser.new_context().new_page()  # each attendee its own cookies
        page.goto(room_url + "/")
        assert page.url.endswith("/join")
        page.fill("#join-name", name)
        page.fill("#join-code", CODE)
        page.click("#join-submit")
        page.wait_for_selector("#chat-input textarea")
        _wait_for(lambda p=page, n=name: n in p.locator("#attendee-who").inner_text(), 20, f"{name} signed in")
        pages.append(page)
    for name, page in zip(NAMES, pages):
        page.locator("#chat-input textarea").fill(f"{name}: hello")
        page.locator("#chat-send").click()
    table = presenter.locator("#room-attendees")
    _wait_for(lambda: all(n in table.inner_text() for n in NAMES) and "answering" in table.inner_text(),
              30, "the 4 attendees answering in the Room tab", presenter, artifacts_dir / "room-timeout.png")
    server_line = presenter.locator("#room-server")
    rate = _wait_for(lambda: re.search(r"decode \*?\*?([\d.]+) tok/s", server_line.inner_text().replace("**", ""))
                     and float(re.search(r"decode ([\d.]+) tok/s", server_line.inner_text().replace("**", "")).group(1)) > 0
                     and server_line.inner_text(), 30, "a non-zero decode rate", presenter,
                     artifacts_dir / "room-rate-timeout.png")
    assert "tok/s" in rate
    # the GPU beside the server (on a machine without one, said plainly)
    assert re.search(r"GPU: no NVIDIA GPU on this machine|GPU \(this machine\): GPU0", server_line.inner_text())
    presenter.screenshot(path=str(artifacts_dir / "workshop-room.png"), full_page=True)
    # Each attendee sees their own answer, and the message box was emptied on send.
    for name, page in zip(NAMES, pages):
        _wait_for(lambda p=page, n=name: f"{n}:5" in p.locator("#chatbot").inner_text(), 30, f"{name}'s answer")
        assert page.locator("#chat-input textarea").input_value() == ""
        other = [n for n in NAMES if n != name]
        assert not any(f"{n}:1" in page.locator("#chatbot").inner_text() for n in other)
    pages[0].screenshot(path=str(artifacts_dir / "workshop-attendee.png"), full_page=True)


def test_the_presenter_login_page_shows_the_wait_after_wrong_passwords(browser, room_url, artifacts_dir):  # noqa: F811
    """Last in the module: it puts this address on the login back-off."""
    from workbench.ui.guards import LOGIN_FREE

    page = browser.new_context().new_page()
    page.goto(room_url + "/presenter/")
    password = page.locator("input[type=password]")
    for i in range(LOGIN_FREE):  # each wrong one: Gradio clears the fields and says so
        page.fill("input[type=text]", "presenter")
        password.fill(f"wrong-{i}")
        page.keyboard.press("Enter")
        _wait_for(lambda: password.input_value() == "", 10, f"wrong login {i + 1} answered", page,
                  artifacts_dir / "login-wrong-timeout.png")
    assert "Incorrect Credentials" in page.locator("body").inner_text()  # Gradio's own words
    page.fill("input[type=text]", "presenter")
    password.fill(PASSWORD)  # the right one, too soon: refused unchecked, and the page says for how long
    page.keyboard.press("Enter")
    notice = page.locator("#login-wait")
    said = _wait_for(lambda: notice.count() and notice.inner_text(), 10, "the wait on the login page", page,
                     artifacts_dir / "login-wait-timeout.png")
    assert re.fullmatch(r"Too many wrong logins came from this address\. The next login is checked in \d+ s: "
                        r"wait, then log in again\.", said), said
    assert not page.get_by_text("Incorrect Credentials").is_visible()  # that was about an earlier attempt
    page.screenshot(path=str(artifacts_dir / "presenter-login-wait.png"), full_page=True)
    _wait_for(lambda: notice.inner_text() == "You can log in again now.", 35, "the end of the wait", page,
              artifacts_dir / "login-wait-end-timeout.png")
    page.keyboard.press("Enter")  # the fields were kept: the same, right password again
    page.get_by_role("tab", name="Room").wait_for(timeout=30_000)
    assert page.locator("#login-wait").count() == 0
