"""MCP servers as tool sources, against real MCP servers written with the SDK
(tests/helpers/mcp_servers.py): a stdio subprocess and Streamable HTTP on a free
127.0.0.1 port. Their failures are real too: a server that exits mid-call, one
that writes a line that is not JSON-RPC, one that never answers."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import time

import pytest

from tests.helpers.mcp_running import STDIO_COMMAND, http_mcp_server
from workbench.chat.approval import ToolApprovals
from workbench.chat.tools import McpConnections, McpServerSpec, McpToolSource, ToolRegistry, builtin_tools
from workbench.errors import InputError, ToolError

TOOLS = {"add", "word_count", "get_weather", "slow", "die", "garbage"}


@pytest.fixture(scope="module")
def stdio_source():
    with McpToolSource(McpServerSpec.parse(STDIO_COMMAND), call_timeout_s=5) as source:
        yield source


@pytest.fixture(scope="module")
def http_url():
    with http_mcp_server() as url:
        yield url


def test_spec_parses_commands_and_urls():
    spec = McpServerSpec.parse('python "my server.py" --flag')
    assert spec.kind == "stdio" and spec.command == ("python", "my server.py", "--flag")
    assert McpServerSpec.parse(" http://127.0.0.1:8000/mcp ").url == "http://127.0.0.1:8000/mcp"
    assert McpServerSpec.from_dict(spec.to_dict()) == spec
    for bad in ("", "   ", "ftp://host/x", "python 'unbalanced", "http://host/a b"):
        with pytest.raises(InputError) as info:
            McpServerSpec.parse(bad)
        assert info.value.hint
    for saved in (None, [], {"kind": "stdio", "command": []}, {"kind": "stdio", "command": [1]}, {"kind": "x"}):
        with pytest.raises(InputError):
            McpServerSpec.from_dict(saved)


def test_stdio_server_lists_its_tools_with_schemas(stdio_source):
    tools = {t.name: t for t in stdio_source.tools}
    assert set(tools) == TOOLS
    assert tools["add"].description == "Add two integers."
    assert tools["add"].input_schema["required"] == ["a", "b"]
    assert tools["add"].input_schema["properties"]["a"]["type"] == "integer"


def test_mcp_tools_join_the_builtins_and_run_on_their_server(stdio_source):
    registry = builtin_tools()
    names = stdio_source.register_into(registry)
    assert set(names) == TOOLS and "calculator" in registry
    schema = next(s for s in registry.schemas() if s["function"]["name"] == "add")
    assert schema["function"]["parameters"]["properties"]["b"]["type"] == "integer"
    outcome = registry.run("add", {"a": 2, "b": 40})
    assert outcome.ok and outcome.result == 42 and outcome.content_for_model() == "42"
    assert registry.run("word_count", {"text": "one two three"}).result == {"words": 3, "characters": 13}
    # the server validates the arguments; its complaint is the model's result
    bad = registry.run("add", {"a": "many", "b": 1})
    assert not bad.ok and "valid integer" in bad.error
    assert registry.get("add").source == stdio_source.label
    registry.unregister_source(stdio_source.label)
    assert registry.names() == builtin_tools().names()


def test_a_call_past_its_deadline_fails_that_call_only(stdio_source):
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"slow .* did not answer within 1 s"):
        stdio_source.call_blocking("slow", {"seconds": 30}, timeout_s=1)
    assert time.monotonic() - started < 5
    assert stdio_source.call_blocking("add", {"a": 1, "b": 1}) == 2  # the connection is still good


def test_cancelling_a_call_cancels_it_and_the_server_goes_on(stdio_source):
    future = stdio_source.call("slow", {"seconds": 30}, timeout_s=60)
    time.sleep(0.5)
    assert future.cancel() or future.cancelled()
    assert stdio_source.call_blocking("add", {"a": 20, "b": 22}) == 42


def test_async_cancel_of_the_registry_call_cancels_the_mcp_request(stdio_source):
    registry = ToolRegistry()
    stdio_source.register_into(registry)

    async def main():
        task = asyncio.ensure_future(registry.arun("slow", {"seconds": 30}))
        await asyncio.sleep(0.5)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    assert asyncio.run(main()) < 2


def test_garbage_on_the_wire_fails_the_call_with_what_came():
    with McpToolSource(McpServerSpec.parse(STDIO_COMMAND), call_timeout_s=20) as source:
        started = time.monotonic()
        with pytest.raises(ToolError) as info:
            source.call_blocking("garbage", {})
        assert time.monotonic() - started < 5  # not the deadline: the bad line itself fails it
        assert "not a valid MCP message" in info.value.message and "json" in info.value.message.lower()


def test_a_server_that_dies_mid_call_fails_that_call_and_says_so():
    registry = ToolRegistry()
    with McpToolSource(McpServerSpec.parse(STDIO_COMMAND), call_timeout_s=20) as source:
        source.register_into(registry)
        died = registry.run("die", {})
        assert not died.ok and "Connection closed" in died.error and died.seconds < 5
        after = registry.run("add", {"a": 1, "b": 2})
        assert not after.ok and source.label in after.error


def test_http_server_tools_and_a_server_that_goes_away(http_url):
    registry = ToolRegistry()
    with McpToolSource(McpServerSpec.parse(http_url), call_timeout_s=5) as source:
        assert {t.name for t in source.tools} == TOOLS
        source.register_into(registry)
        assert registry.run("add", {"a": 5, "b": 6}).result == 11


def test_http_server_killed_mid_session_fails_the_call_not_the_caller():
    registry = ToolRegistry()
    with http_mcp_server() as url, McpToolSource(McpServerSpec.parse(url), call_timeout_s=5) as source:
        source.register_into(registry)
        assert registry.run("word_count", {"text": "a b"}).result["words"] == 2
        url.process.kill()
        url.process.wait(10)
        gone = registry.run("word_count", {"text": "a b"})
        assert not gone.ok and gone.seconds < 6


def test_servers_that_cannot_be_reached_say_why():
    with pytest.raises(ToolError, match="No such file"):
        McpToolSource(McpServerSpec.parse("no-such-mcp-command --x")).start()
    with pytest.raises(ToolError, match="Could not connect"):
        McpToolSource(McpServerSpec.parse(f"{sys.executable} -c pass")).start()
    hung = McpToolSource(McpServerSpec.parse(f"{sys.executable} -c 'import time; time.sleep(60)'"),
                         connect_timeout_s=2)
    with pytest.raises(ToolError, match="did not answer within 2 s"):
        hung.start()


def test_connections_are_saved_and_restored(stdio_source, http_url):
    connections = McpConnections()
    registry = builtin_tools()
    try:
        connections.add(STDIO_COMMAND, registry)
        connections.add(http_url, registry)
        saved = json.loads(json.dumps(connections.to_dict()))
    finally:
        connections.close()
    assert [s["kind"] for s in saved["servers"]] == ["stdio", "http"]
    restored, registry = McpConnections(), builtin_tools()
    try:
        problems = restored.restore({"servers": [*saved["servers"], {"kind": "stdio", "command": ["no-such-x"]}]},
                                    registry)
        assert len(problems) == 1 and "no-such-x" in problems[0]
        assert [s.label for s in restored.sources] == [STDIO_COMMAND, http_url]
        # both servers list `add`: the second one's is offered under a prefixed name
        assert {"add", "mcp_add"} <= set(registry.names())
        assert registry.run("mcp_add", {"a": 1, "b": 1}).result == 2
    finally:
        restored.close()


def test_approvals_policies_and_answers():
    approvals = ToolApprovals("ask", {"add": "always"})
    assert approvals.policy_for("add") == "always" and approvals.policy_for("slow") == "ask"
    first = approvals.ask("call-1", "slow")
    assert [p.call_id for p in approvals.waiting()] == ["call-1"]
    assert approvals.answer("call-1", "always") and first.result(0) == "always"
    assert approvals.policy_for("slow") == "always"  # "always for this tool" from now on
    assert not approvals.answer("call-1", "deny")  # answered already
    with pytest.raises(InputError):
        approvals.answer("call-2", "maybe")
    with pytest.raises(InputError):
        ToolApprovals("sometimes")
    assert ToolApprovals.from_dict(approvals.to_dict()).to_dict() == approvals.to_dict()
    assert ToolApprovals.from_dict("garbage").to_dict() == {"default": "ask", "per_tool": {}}


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_cli_asks_on_the_terminal_and_denies_without_one():
    from workbench.chat.events import ToolApprovalRequested
    from workbench.cli.chat import approving

    event = ToolApprovalRequested(0, "call-1", "add", {"a": 1}, "python server.py")
    approvals, err = ToolApprovals(), io.StringIO()
    approvals.ask("call-1", "add")  # the session opens the question before the event comes out
    list(approving([event], approvals, _Terminal("maybe\na\n"), err))
    assert approvals.policy_for("add") == "always" and err.getvalue().count("[approval] Run add(") == 2
    approvals, err = ToolApprovals(), io.StringIO()
    asked = approvals.ask("call-1", "add")
    list(approving([event], approvals, io.StringIO("y\n"), err))
    assert asked.result(0) == "deny" and "--approve always" in err.getvalue()


def test_a_server_that_never_answers_is_stopped_when_given_up_on(tmp_path):
    import os
    import shlex

    pid_file = tmp_path / "pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    hung = McpToolSource(McpServerSpec.parse(shlex.join([sys.executable, "-c", script])), connect_timeout_s=3)
    with pytest.raises(ToolError, match="did not answer within 3 s"):
        hung.start()
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not left behind
        os.kill(pid, 0)
