"""The MCP approval prompt in a real browser (Debian's Chromium, Playwright): add the test
MCP servers (stdio and Streamable HTTP) in the Chat tab; the forcing model calls the stdio
server's `add` through vLLM's parser, the call waits for the person and "Approve once"
runs it; next turn it calls the HTTP server's `word_count` and "Deny" sends the denial
back to the model as the call's result."""

from __future__ import annotations

import pytest

from tests.helpers.mcp_running import STDIO_COMMAND, http_mcp_server
from tests.test_ui_browser import _chatbot_text, _send, _serve, _wait_for, browser  # noqa: F401 (fixture)
from workbench.demo.forcing import forcing_extra_body, reasoning_then_answer, reasoning_then_tool_call

pytestmark = [pytest.mark.browser, pytest.mark.vllm]


@pytest.fixture(scope="module")
def mcp_app(tmp_path_factory, forcing_server):
    from workbench.ui.app import build_app

    # Both servers list the same tools: the second one's come prefixed (mcp_word_count).
    steps = {(0, 0): reasoning_then_tool_call("I will ask the MCP server to add.", "add", {"a": 2, "b": 40}),
             (0, 1): reasoning_then_answer("The server said 42.", "2 plus 40 is 42."),
             (1, 0): reasoning_then_tool_call("The HTTP server counts words.", "mcp_word_count", {"text": "a b c"}),
             (1, 1): reasoning_then_answer("I was not allowed to count.", "I could not count the words.")}

    def force(info):
        return forcing_extra_body(steps[(min(info.turn, 1), min(info.step, 1))], forcing_server.special_token_ids)

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
    with http_mcp_server() as http_url:
        _run(page, http_url, artifacts_dir)


def _add_server(page, server: str, count: int) -> None:
    page.locator("#mcp-server textarea, #mcp-server input").first.fill(server)
    page.locator("#mcp-add").click()
    _wait_for(lambda: page.locator("#mcp-listing").inner_text().count("word_count") == count, 60,
              f"{server}'s tools listed")


def _run(page, http_url, artifacts_dir):
    _add_server(page, STDIO_COMMAND, 1)
    _add_server(page, http_url, 2)
    assert http_url in page.locator("#mcp-listing").inner_text()
    page.get_by_text("Options", exact=True).click()
    page.get_by_label("Tools (needs the server's tool parser)").check()

    _send(page, "What is 2 plus 40?")
    shot = artifacts_dir / "ui-mcp-approval.png"
    _wait_for(lambda: "Approve this MCP tool call" in page.locator("#mcp-approval-note").inner_text(), 120,
              "the approval prompt", page, shot)
    assert "Tool call · add" in _chatbot_text(page)  # its block, waiting (the note says for what)
    assert "2 plus 40 is 42" not in _chatbot_text(page)  # nothing ran yet
    page.screenshot(path=str(shot), full_page=True)

    page.locator("#mcp-approve-once").click()
    _wait_for(lambda: "2 plus 40 is 42" in _chatbot_text(page), 120, "the final answer", page,
              artifacts_dir / "ui-mcp-timeout.png")
    tools = page.locator("#tools-panel").inner_text()
    assert '"approval": "approved once"' in tools and '"result": 42' in tools and "mcp_server" in tools
    assert page.locator("#mcp-approval-note").inner_text().strip() == ""
    page.screenshot(path=str(artifacts_dir / "ui-mcp-approved.png"), full_page=True)

    _send(page, "How many words in 'a b c'?")
    _wait_for(lambda: "mcp_word_count" in page.locator("#mcp-approval-note").inner_text(), 120,
              "the second approval prompt", page, artifacts_dir / "ui-mcp-timeout.png")
    assert http_url in page.locator("#mcp-approval-note").inner_text()
    page.locator("#mcp-deny").click()
    _wait_for(lambda: "I could not count the words" in _chatbot_text(page), 120, "the answer after the denial",
              page, artifacts_dir / "ui-mcp-timeout.png")
    tools = page.locator("#tools-panel").inner_text()
    assert '"approval": "denied"' in tools and "The user denied this call." in tools
    page.screenshot(path=str(artifacts_dir / "ui-mcp-denied.png"), full_page=True)
    page.close()
