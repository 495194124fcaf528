"""A real tool call into an MCP tool: the forcing model on vLLM's CPU build calls `add`
(parsed by vLLM's qwen3_coder parser), the CLI runs it on the test MCP server
(stdio, then Streamable HTTP) as its approval policy says, and the model answers."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from tests.helpers.mcp_running import STDIO_COMMAND, http_mcp_server
from workbench.cli import build_parser
from workbench.cli.chat import chat_command
from workbench.demo.forcing import forcing_extra_body, reasoning_then_answer, reasoning_then_tool_call

pytestmark = pytest.mark.vllm  # the forcing model on vLLM's CPU build


def _hook(server, seen):
    texts = {0: reasoning_then_tool_call("The user wants a sum; the add tool does it.", "add", {"a": 2, "b": 40}),
             1: reasoning_then_answer("The tool answered.", "The sum is 42.")}

    def hook(info):
        seen.append(info.messages)
        return forcing_extra_body(texts[info.step], server.special_token_ids)
    return hook


def _cli(server, *flags):
    seen: list = []
    args = build_parser().parse_args(["chat", "--url", server.base_url, "--temperature", "0", "--max-tokens", "200",
                                      *flags, "What is 2 + 40?"])
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = chat_command(args, request_hook=_hook(server, seen))
    return code, out.getvalue(), err.getvalue(), seen


def test_cli_runs_a_real_tool_call_on_a_stdio_mcp_server(forcing_server):
    code, out, err, seen = _cli(forcing_server, "--mcp", STDIO_COMMAND, "--approve", "always")
    assert code == 0, err
    assert out.strip() == "The sum is 42."
    assert '[tool call] add({"a": 2, "b": 40})' in err
    assert "[tool result] add -> 42 (" in err and "allowed by policy" in err
    # the second request carried the call (with its reasoning) and the MCP server's answer
    assistant, tool = seen[1][-2], seen[1][-1]
    assert assistant["tool_calls"][0]["function"]["name"] == "add"
    assert assistant["reasoning"] == "The user wants a sum; the add tool does it."
    assert tool["role"] == "tool" and tool["content"] == "42"


def test_cli_denies_an_http_mcp_call_and_the_model_is_told(forcing_server):
    with http_mcp_server() as url:
        # ask, with no terminal to ask on: denied, and the flag to change it is named
        code, out, err, seen = _cli(forcing_server, "--mcp", url)
    assert code == 0, err
    assert "--approve always" in err and "denied" in err
    tool = seen[1][-1]
    assert tool["role"] == "tool" and json.loads(tool["content"]) == {"error": "The user denied this call."}
    assert out.strip() == "The sum is 42."  # forced: what matters is that the turn went on
