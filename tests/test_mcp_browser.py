"""The MCP approval prompt in a real browser (Debian's Chromium, Playwright): add the test
MCP server (stdio) in the Chat tab, the forcing model calls its `add` tool through
vLLM's parser, the call waits for the person, "Approve once" runs it on the server."""

from __future__ import annotations

import pytest

from tests.helpers.mcp_running import STDIO_COMMAND
from tests.test_ui_browser import _chatbot_text, _send, _serve, _wait_for, browser  # noqa: F401 (fixture)
from workbench.demo.forcing import forcing_extra_body, reasoning_then_answer, reasoning_then_tool_call

pytestmark = [pytest.mark.browser, pytest.mark.vllm]


@pytest.fixture(scope="module")
def mcp_app(tmp_path_factory, forcing_server):
    from workbench.ui.app import build_app

    steps = {0: reasoning_then_tool_call("I will ask the MCP server to add.", "add", {"a": 2, "b": 40}),
             1: reasoning_then_answer("The server said 42.", "2 plus 40 is 42.")}

    def force(info):
        return forcing_extra_body(steps[min(info.step, 1)], forcing_server.special_token_ids)

    demo = build_app(state_dir=tmp_path_factory.mktemp("ui-mcp"), default_hardware="cpu", chat_request_hook=force)
    url = _serve(demo)
    yield demo, url
    demo.close()


def test_an_mcp_call_waits_for_approval_and_runs_once_approved(browser, mcp_app, forcing_server, artifacts_dir):
    demo, url = mcp_app
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.goto(url)
    page.get_by_role("tab", name="Server").click()
    page.get_by_text("Attach to a server started elsewhere").click()
    page.locator("#attach-url input, #attach-url textarea").first.fill(forcing_server.base_url)
    page.locator("#server-attach").click()
    _wait_for(lambda: "ready" in page.locator("#server-status").inner_text(), 30, "attached")

    page.get_by_role("tab", name="Chat").click()
    page.get_by_text("MCP servers (tools from other programs)").click()
    page.locator("#mcp-server textarea, #mcp-server input").first.fill(STDIO_COMMAND)
    page.locator("#mcp-add").click()
    _wait_for(lambda: "`add`" in page.locator("#mcp-listing").inner_text()
              or "add" in page.locator("#mcp-listing").inner_text(), 60, "the server's tools listed")
    assert "word_count" in page.locator("#mcp-listing").inner_text()
    page.get_by_text("Options", exact=True).click()
    page.get_by_label("Tools (needs the server's tool parser)").check()

    _send(page, "What is 2 plus 40?")
    shot = artifacts_dir / "ui-mcp-approval.png"
    _wait_for(lambda: "Approve this MCP tool call" in page.locator("#mcp-approval-note").inner_text(), 120,
              "the approval prompt", page, shot)
    assert "waiting for your approval" in _chatbot_text(page)
    assert "2 plus 40 is 42" not in _chatbot_text(page)  # nothing ran yet
    page.screenshot(path=str(shot), full_page=True)

    page.locator("#mcp-approve-once").click()
    _wait_for(lambda: "2 plus 40 is 42" in _chatbot_text(page), 120, "the final answer", page,
              artifacts_dir / "ui-mcp-timeout.png")
    tools = page.locator("#tools-panel").inner_text()
    assert '"approval": "approved once"' in tools and '"result": 42' in tools and "mcp_server" in tools
    assert page.locator("#mcp-approval-note").inner_text().strip() == ""
    page.screenshot(path=str(artifacts_dir / "ui-mcp-approved.png"), full_page=True)
    page.close()
