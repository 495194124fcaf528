"""The tool loop with an MCP server, on recorded vLLM streams (tests/helpers/replay): each
call of an MCP tool waits for an answer, which a view gives from another thread as soon
as it sees the event; a denial or a stop goes back to the model as the call's result."""

from __future__ import annotations

import json
import threading

import pytest

from tests.helpers.mcp_running import STDIO_COMMAND
from workbench.chat import ChatOptions
from workbench.chat.approval import ToolApprovals
from workbench.chat.events import ToolApprovalRequested, ToolResult
from workbench.chat.tools import McpServerSpec, McpToolSource, ToolRegistry
from tests.helpers.replay import replay_async_client
from tests.test_chat_replay import CONTENT, TOOLCALL
from workbench.chat import ChatSession


@pytest.fixture(scope="module")
def mcp_registry():
    with McpToolSource(McpServerSpec.parse(STDIO_COMMAND), call_timeout_s=10) as source:
        registry = ToolRegistry()
        source.register_into(registry)
        yield registry, source


def _session(registry, approvals, *recordings):
    client, transport = replay_async_client(recordings)
    session = ChatSession("http://replay.invalid", options=ChatOptions(), tools=registry, http_client=client,
                          approvals=approvals)
    return session, transport


def _answering(session, events, decision):
    """Consume the turn as a view does, answering each approval from another thread."""
    seen = []
    for event in events:
        seen.append(event)
        if isinstance(event, ToolApprovalRequested):
            threading.Thread(target=session.approvals.answer, args=(event.call_id, decision)).start()
    return seen


@pytest.mark.parametrize("decision, approval", [("once", "approved once"), ("always", "approved always")])
def test_an_approved_mcp_call_runs_on_the_server(mcp_registry, decision, approval):
    registry, source = mcp_registry
    session, transport = _session(registry, ToolApprovals(), TOOLCALL, CONTENT)
    events = _answering(session, session.stream("What is the weather in Paris?"), decision)
    [asked] = [e for e in events if isinstance(e, ToolApprovalRequested)]
    assert asked.name == "get_weather" and asked.arguments == {"city": "Paris"} and asked.source == source.label
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.error is None and result.approval == approval and result.source == source.label
    assert result.result == {"city": "Paris", "forecast": "sunny", "celsius": 21}
    sent = transport.requests[2].body["messages"][2]
    assert sent["role"] == "tool" and json.loads(sent["content"])["forecast"] == "sunny"
    assert (session.approvals.policy_for("get_weather") == "always") == (decision == "always")
    assert events.index(asked) < events.index(result)


def test_a_denied_call_goes_back_to_the_model_as_its_result(mcp_registry):
    registry, _ = mcp_registry
    session, transport = _session(registry, ToolApprovals(), TOOLCALL, CONTENT)
    events = _answering(session, session.stream("What is the weather in Paris?"), "deny")
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.approval == "denied" and result.error == "The user denied this call."
    assert json.loads(transport.requests[2].body["messages"][2]["content"]) == {"error": "The user denied this call."}
    assert events[-1].finish_reason == "stop"  # the turn went on to the answer


def test_policies_always_and_never_do_not_ask(mcp_registry):
    registry, _ = mcp_registry
    for policy, approval in (("always", "allowed by policy"), ("never", "denied by policy")):
        session, _ = _session(registry, ToolApprovals(policy), TOOLCALL, CONTENT)
        events = list(session.stream("What is the weather in Paris?"))
        assert not [e for e in events if isinstance(e, ToolApprovalRequested)]
        [result] = [e for e in events if isinstance(e, ToolResult)]
        assert result.approval == approval and (result.error is None) == (policy == "always")


def test_stop_while_waiting_for_approval_cancels_the_call(mcp_registry):
    registry, _ = mcp_registry
    session, transport = _session(registry, ToolApprovals(), TOOLCALL, CONTENT)
    events = []
    for event in session.stream("What is the weather in Paris?"):
        events.append(event)
        if isinstance(event, ToolApprovalRequested):
            threading.Timer(0.3, session.stop).start()
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.approval == "cancelled" and "stopped" in result.error
    assert not session.approvals.waiting()
    roles = [m.role for m in session.conversation.messages]
    assert roles == ["user", "assistant", "tool"]  # every call answered: the next turn is valid
    assert len(transport.requests) == 2  # models, then the one chat request: nothing after the stop


def test_workshop_attendees_use_what_the_presenter_shared_without_being_asked():
    from workbench.chat.tools import builtin_tools
    from workbench.workshop.room_tools import RoomTools

    room_tools = RoomTools()
    try:
        client, transport = replay_async_client([TOOLCALL, CONTENT])
        attendee = ChatSession("http://replay.invalid", tools=builtin_tools(), http_client=client)
        room_tools.apply(attendee)  # nothing shared yet: built-ins only
        assert not [n for n in attendee.tools.names() if attendee.tools.get(n).source]
        room_tools.share(STDIO_COMMAND)  # the presenter's approval
        room_tools.apply(attendee)
        assert "get_weather" in attendee.tools and attendee.approvals.policy_for("get_weather") == "always"
        assert attendee.approvals.policy_for("some_other_mcp_tool") == "never"
        events = list(attendee.stream("What is the weather in Paris?"))
        assert not [e for e in events if isinstance(e, ToolApprovalRequested)]  # nobody to ask in a room
        [result] = [e for e in events if isinstance(e, ToolResult)]
        assert result.approval == "allowed by policy" and result.result["forecast"] == "sunny"
        room_tools.remove_all()
        room_tools.apply(attendee)
        assert "get_weather" not in attendee.tools
    finally:
        room_tools.close()


def test_reasoning_before_and_after_the_mcp_call_is_shown_in_order(mcp_registry):
    from workbench.chat import TurnTranscript
    from workbench.ui.chat_render import tools_text, turn_messages

    registry, source = mcp_registry
    session, _ = _session(registry, ToolApprovals("always"), TOOLCALL, CONTENT)
    transcript = TurnTranscript("What is the weather in Paris?")
    for event in session.stream("What is the weather in Paris?"):
        transcript.apply(event)
    blocks = [(m.get("metadata") or {}).get("title") or "answer" for m in turn_messages(transcript)[1:]]
    assert blocks == ["Thinking", "Tool call · get_weather", "Thinking", "answer"]
    shown = turn_messages(transcript)
    assert shown[1]["content"] == "I should call the weather tool." and shown[3]["content"] == "The user greets me."
    assert f"**MCP server** `{source.label}` · allowed by policy" in shown[2]["content"]
    trace = json.loads(tools_text(transcript))
    assert trace[0]["mcp_server"] == source.label and trace[0]["approval"] == "allowed by policy"


def test_stop_while_an_mcp_call_runs_cancels_the_request(mcp_registry):
    import time

    from workbench.chat.tools import Tool

    _, source = mcp_registry
    # The recorded stream calls get_weather; here it is the server's `slow` tool (30 s).
    slow = Tool("get_weather", "Get weather", {"type": "object", "properties": {}}, function=lambda: None,
                source=source.label, call_remote=lambda arguments, timeout: source.call("slow", {"seconds": 30}, 60))
    session, _ = _session(ToolRegistry([slow]), ToolApprovals("always"), TOOLCALL, CONTENT)
    started = None
    events = []
    for event in session.stream("What is the weather in Paris?"):
        events.append(event)
        if event.kind == "tool_call_complete":
            started = time.monotonic()
            threading.Timer(0.5, session.stop).start()
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.approval == "cancelled" and "stopped" in result.error
    assert time.monotonic() - started < 5  # not the tool's 30 s
    assert events[-1].kind == "turn_finished" and events[-1].finish_reason == "stopped"
    assert source.call_blocking("add", {"a": 1, "b": 2}) == 3  # the server goes on


def test_the_chat_tab_keeps_the_mcp_part_of_the_saved_chat_and_leaves_skips_alone():
    import gradio as gr

    from workbench.chat.tools import McpConnections
    from workbench.ui.chat_mcp import with_mcp

    before = {"display": [], "conversation": None, "mcp": {"servers": [{"kind": "http", "url": "http://h/mcp"}]}}
    turn = [("shown", "", "", "", gr.skip(), None, ""),
            ("shown", "", "", "", {"display": ["x"], "conversation": None}, None, "")]
    first, last = list(with_mcp(iter(turn), before, None))
    assert first[4] == gr.skip() and first[-2] == ""  # a skip stays a skip (Gradio reads a dict as an update)
    assert first[-1].visible == "hidden"  # nothing waits: no Approve / Always / Deny
    assert last[4] == {"display": ["x"], "conversation": None, "mcp": before["mcp"]}
    [connected] = list(with_mcp(iter(turn[1:]), before, McpConnections()))
    assert connected[4]["mcp"] == {"servers": []}  # what is connected now is what is saved
