"""ChatSession against real vLLM 0.32.0 SSE recordings, replayed through the openai SDK."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import RECORDED
from tests.helpers.replay import replay_async_client
from workbench.chat import (
    ChatOptions,
    ChatSession,
    ContentDelta,
    Conversation,
    Message,
    ErrorEvent,
    Notice,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallComplete,
    ToolCallStarted,
    ToolResult,
    TurnFinished,
    Usage,
)
from workbench.chat.tools import ToolRegistry
from workbench.errors import WorkbenchError
from workbench.urls import normalize_base_url

TOOLCALL = RECORDED / "stream_reasoning_toolcall.sse"
CONTENT = RECORDED / "stream_reasoning_content.sse"
PLAIN = RECORDED / "stream_plain.sse"
NEMOTRON_H = RECORDED / "stream_nemotronh_dense.sse"


def get_weather(city: str) -> dict:
    """Get weather

    Args:
        city: The city to look up.
    """
    return {"city": city, "forecast": "sunny", "celsius": 21}


def replay_session(*recordings, tools=None, **options):
    client, transport = replay_async_client(recordings)
    session = ChatSession("http://replay.invalid", options=ChatOptions(**options), tools=tools,
                          http_client=client)
    return session, transport


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def test_reasoning_then_content():
    session, transport = replay_session(CONTENT)
    events = list(session.stream("Hi"))
    assert "".join(e.text for e in of(events, ReasoningDelta)) == "The user greets me."
    assert "".join(e.text for e in of(events, ContentDelta)) == "\n\nHello! How can I help?"
    # reasoning deltas all come before the first content delta
    kinds = [e.kind for e in events if e.kind in ("reasoning", "content")]
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning")
    finished = events[-1]
    assert isinstance(finished, TurnFinished)
    assert finished.finish_reason == "stop"
    assert finished.usage == Usage(prompt_tokens=15, completion_tokens=32, total_tokens=47,
                                   reasoning_tokens=12)
    assert finished.stats.reasoning_tokens == 12
    assert finished.stats.answer_tokens == 20
    assert finished.stats.requests == 1
    assert finished.stats.ttft_s is not None and finished.stats.ttft_s >= 0
    assert not of(events, Notice) and not of(events, ErrorEvent)
    # the model was asked for through /v1/models, then one streamed request
    assert [(r.method, r.path) for r in transport.requests] == [
        ("GET", "/v1/models"), ("POST", "/v1/chat/completions")]
    body = transport.requests[1].body
    assert body["model"] == "tiny"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 1.0 and body["top_p"] == 0.95
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert "tools" not in body


@pytest.mark.parametrize("recording, call_id, usage", [
    (TOOLCALL, "chatcmpl-tool-ba86e16bcc5f380a", Usage(168, 70, 238, 22)),
    (NEMOTRON_H, "chatcmpl-tool-8429e90bb722c2e4", Usage(168, 62, 230, 14)),
])
def test_tool_call_runs_tool_and_continues(recording, call_id, usage):
    session, transport = replay_session(recording, CONTENT, tools=ToolRegistry([get_weather]))
    events = list(session.stream("What is the weather in Paris?"))

    started = of(events, ToolCallStarted)
    assert [(e.step, e.index, e.id, e.name) for e in started] == [(0, 0, call_id, "get_weather")]
    fragments = [e.text for e in of(events, ToolCallArgumentsDelta)]
    assert "".join(fragments) == '{"city": "Paris"}' and len(fragments) > 1
    [complete] = of(events, ToolCallComplete)
    assert complete.arguments == {"city": "Paris"}
    assert complete.raw_arguments == '{"city": "Paris"}'
    assert complete.parse_error is None
    [result] = of(events, ToolResult)
    assert result.call_id == call_id and result.error is None
    assert result.result == {"city": "Paris", "forecast": "sunny", "celsius": 21}
    assert result.seconds >= 0
    assert events.index(complete) < events.index(result)

    reasoning_by_step = {}
    for e in of(events, ReasoningDelta):
        reasoning_by_step[e.step] = reasoning_by_step.get(e.step, "") + e.text
    assert reasoning_by_step == {0: "I should call the weather tool.", 1: "The user greets me."}

    finished = events[-1]
    assert isinstance(finished, TurnFinished)
    assert finished.finish_reason == "stop"
    assert finished.usage == usage + Usage(15, 32, 47, 12)
    assert finished.stats.requests == 2 and finished.stats.tool_calls == 1
    assert finished.stats.tool_s == pytest.approx(result.seconds)

    # the first request offered the tool, with force_nonempty_content as the cookbook does
    first, second = transport.requests[1].body, transport.requests[2].body
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert first["tool_choice"] == "auto"
    assert first["chat_template_kwargs"] == {"enable_thinking": True, "force_nonempty_content": True}
    # the second carries the assistant tool call with its reasoning (the turn in progress:
    # the model goes on from its own thoughts) and the role-tool result
    assert second["messages"] == [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning": "I should call the weather tool.", "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "content": '{"city": "Paris", "forecast": "sunny", "celsius": 21}',
         "tool_call_id": call_id, "name": "get_weather"},
    ]


def test_past_reasoning_is_not_sent_back_and_history_round_trips():
    session, transport = replay_session(CONTENT, CONTENT, system_prompt="Be brief.")
    list(session.stream("Hi"))
    list(session.stream("Hi again"))
    second = transport.requests[-1].body
    assert second["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "\n\nHello! How can I help?"},
        {"role": "user", "content": "Hi again"},
    ]
    assistant = session.conversation.messages[1]
    assert assistant.reasoning == "The user greets me."  # kept for display and export
    assert assistant.stats is not None and assistant.stats.completion_tokens == 32

    restored = Conversation.from_json(session.conversation.to_json())
    assert restored == session.conversation
    assert restored.to_wire() == session.conversation.to_wire()


def test_tool_history_round_trips_through_json():
    session, _ = replay_session(TOOLCALL, CONTENT, tools=ToolRegistry([get_weather]))
    list(session.stream("What is the weather in Paris?"))
    data = json.loads(session.conversation.to_json())
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool", "assistant"]
    restored = Conversation.from_dict(data)
    assert restored.messages[1].tool_calls[0].id == "chatcmpl-tool-ba86e16bcc5f380a"
    assert restored.to_wire() == session.conversation.to_wire()
    with pytest.raises(WorkbenchError, match="Not a saved conversation"):
        Conversation.from_dict({"messages": []})


def test_length_with_only_reasoning_says_the_answer_is_empty():
    session, _ = replay_session(PLAIN, max_tokens=12)
    events = list(session.stream("Hi"))
    reasoning = "".join(e.text for e in of(events, ReasoningDelta))
    assert reasoning == " ns setcktcwor '{ exceptionlthookpaths issuemro"
    assert not of(events, ContentDelta)
    [notice] = of(events, Notice)
    assert notice.code == "empty_answer"
    assert "reasoning used all 12 tokens" in notice.message
    assert "max_tokens to 1036" in notice.hint
    assert events[-1].finish_reason == "length"
    assert events[-1].stats.answer_tokens == 0


def test_tool_step_limit_is_reported_and_history_stays_valid():
    session, transport = replay_session(TOOLCALL, tools=ToolRegistry([get_weather]),
                                        max_tool_steps=0)
    events = list(session.stream("What is the weather in Paris?"))
    assert not of(events, ToolResult)
    [notice] = of(events, Notice)
    assert notice.code == "tool_step_limit"
    assert "get_weather" in notice.message and "limit of 0" in notice.message
    assert events[-1].finish_reason == "tool_calls"
    # every tool call in the history has its tool message, so the next turn is valid
    roles = [m.role for m in session.conversation.messages]
    assert roles == ["user", "assistant", "tool"]
    assert "Not run" in session.conversation.messages[2].content


def test_unknown_tool_goes_back_to_the_model_as_an_error():
    def other() -> str:
        """Something else."""
        return "x"

    session, transport = replay_session(TOOLCALL, CONTENT, tools=ToolRegistry([other]))
    events = list(session.stream("What is the weather in Paris?"))
    [result] = of(events, ToolResult)
    assert result.error.startswith("Unknown tool 'get_weather'")
    assert json.loads(transport.requests[2].body["messages"][2]["content"]) == {"error": result.error}
    assert events[-1].finish_reason == "stop"


def test_options_reach_the_request_and_hook_merges_per_request():
    seen = []

    def hook(info):
        seen.append((info.turn, info.step, info.kind))
        return {"chat_template_kwargs": {"extra": info.step}, "seed": 7}

    client, transport = replay_async_client([TOOLCALL, CONTENT])
    session = ChatSession(
        "http://replay.invalid/v1/",
        options=ChatOptions(model="tiny", reasoning=False, temperature=0.2, top_p=0.5,
                            max_tokens=99, reasoning_budget=64),
        tools=ToolRegistry([get_weather]), request_hook=hook, http_client=client)
    list(session.stream("weather?"))
    assert seen == [(0, 0, "chat"), (0, 1, "chat")]
    assert [r.path for r in transport.requests] == ["/v1/chat/completions"] * 2  # model given
    body = transport.requests[0].body
    assert body["chat_template_kwargs"] == {"enable_thinking": False,
                                            "force_nonempty_content": True, "extra": 0}
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.2, 0.5, 99, 7)
    assert "thinking_token_budget" not in body  # reasoning is off


def test_server_budget_uses_thinking_token_budget():
    session, transport = replay_session(CONTENT, reasoning_budget=64, model="tiny")
    list(session.stream("Hi"))
    assert transport.requests[0].body["thinking_token_budget"] == 64


def test_server_error_keeps_the_conversation():
    session, transport = replay_session(CONTENT, model="tiny")
    list(session.stream("Hi"))
    events = list(session.stream("Hi again"))  # no recording left: the replay answers 500
    [error] = of(events, ErrorEvent)
    assert error.status_code == 500
    assert "no recording left" in error.message
    assert [m.role for m in session.conversation.messages] == ["user", "assistant", "user"]


def test_connection_error_has_a_hint():
    session = ChatSession("127.0.0.1:9", options=ChatOptions(model="m"), timeout_s=5)
    [error] = list(session.stream("Hi"))
    assert isinstance(error, ErrorEvent)
    assert "Cannot reach the server at http://127.0.0.1:9" in error.message
    assert "python -m workbench serve" in error.hint


def test_event_to_dict_has_kind():
    session, _ = replay_session(CONTENT)
    for event in session.stream("Hi"):
        data = event.to_dict()
        assert data["kind"] == event.kind
        json.dumps(data)


def test_bad_options_say_what_to_change():
    with pytest.raises(WorkbenchError, match="temperature 3 must be between 0 and 2"):
        ChatOptions(temperature=3)
    assert normalize_base_url("localhost:8000/v1/") == "http://localhost:8000"
    assert ChatOptions.from_dict(ChatOptions(max_tokens=5).to_dict()) == ChatOptions(max_tokens=5)


def test_cli_renders_answer_to_stdout_and_the_rest_to_stderr(capsys):
    import io

    from workbench.cli.chat import render_events

    session, _ = replay_session(TOOLCALL, CONTENT, tools=ToolRegistry([get_weather]))
    out, err = io.StringIO(), io.StringIO()
    code = render_events(session.stream("weather?"), out, err)
    assert code == 0
    assert out.getvalue() == "\n\nHello! How can I help?\n"
    assert "[reasoning] I should call the weather tool." in err.getvalue()
    assert '[tool call] get_weather({"city": "Paris"})' in err.getvalue()
    assert "[tool result] get_weather -> " in err.getvalue()
    assert "[stats] finish=stop" in err.getvalue()


def test_cli_without_url_or_running_server_says_what_to_pass(tmp_path, monkeypatch):
    from workbench.server import resolve_server_url

    # An empty state folder: no server the workbench started is running.
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path))
    with pytest.raises(WorkbenchError, match="No server URL given"):
        resolve_server_url(None)
    assert resolve_server_url("http://x:1") == "http://x:1"


def test_stream_and_send_work_where_a_loop_already_runs():
    """A Jupyter kernel's thread runs an event loop; the sync API must still work there."""
    import asyncio

    async def inside_a_running_loop():
        session, _ = replay_session(CONTENT)
        events = list(session.stream("Hi"))
        second, _ = replay_session(CONTENT)
        return events, second.send("Hi")

    events, result = asyncio.run(inside_a_running_loop())
    assert "".join(e.text for e in of(events, ContentDelta)) == "\n\nHello! How can I help?"
    assert result.content == "\n\nHello! How can I help?" and result.error is None


def test_a_turn_closed_from_a_running_loop_hangs_up_on_the_server():
    """Gradio closes a turn's generator from its event loop when the browser goes away
    (a reload mid-answer): the request must end there, not stream on to max_tokens."""
    import asyncio
    import sys
    import time

    from tests.helpers.fixed_rate_server import FixedRateServer

    ignored = []
    previous_hook, sys.unraisablehook = sys.unraisablehook, ignored.append
    try:
        with FixedRateServer(prefill_rate=0, decode_rate=1000) as server:
            session = ChatSession(server.base_url, options=ChatOptions(max_tokens=3000))
            turn = session.stream("Hello")
            assert isinstance(next(turn), (ContentDelta, ReasoningDelta, Notice, Usage))

            async def close_inside_a_loop():
                turn.close()

            asyncio.run(close_inside_a_loop())
            time.sleep(4)  # the whole answer would have been sent by now
            assert server.timings == [], "the server streamed the whole answer to a closed turn"
    finally:
        sys.unraisablehook = previous_hook
    assert ignored == []


class _CutTransport(httpx.AsyncBaseTransport):
    """Serves the first `keep` bytes of a recorded stream, then drops the connection, as a
    server that dies mid-answer does; then whatever `after` serves."""

    def __init__(self, recording: Path, keep: int, after: httpx.AsyncBaseTransport) -> None:
        self.data, self.keep, self.after, self.used = recording.read_bytes(), keep, after, False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.used or not request.url.path.endswith("/chat/completions"):
            return await self.after.handle_async_request(request)
        self.used = True
        await request.aread()
        head = self.data[:self.keep]

        class Cut(httpx.AsyncByteStream):
            async def __aiter__(self):
                yield head
                raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Cut())


def test_a_turn_cut_mid_answer_keeps_its_partial_answer_and_a_valid_history():
    from tests.helpers.replay import ReplayTransport

    after = ReplayTransport.from_files([CONTENT])
    data = CONTENT.read_bytes()
    # Cut after the second event that carries answer text: whole events, the answer begun.
    starts = [i for i in range(len(data)) if data.startswith(b'"delta":{"content":"', i)
              and not data.startswith(b'"delta":{"content":""', i)]
    keep = data.index(b"\n\n", starts[1]) + 2
    session = ChatSession("http://replay.invalid", options=ChatOptions(model=after.model),
                          http_client=httpx.AsyncClient(transport=_CutTransport(CONTENT, keep, after)))
    events = list(session.stream("Hi"))
    [error] = of(events, ErrorEvent)
    partial = "".join(e.text for e in of(events, ContentDelta))
    assert partial  # the model had started answering
    user, answer = session.conversation.messages
    assert (user.role, answer.role, answer.content) == ("user", "assistant", partial)
    assert answer.reasoning == "The user greets me."  # the reasoning before it is kept too
    assert answer.failed == error.message and user.failed is None
    # The next turn sends user, assistant (the partial answer), user: a valid history.
    list(session.stream("Go on"))
    assert [m["role"] for m in after.requests[-1].body["messages"]] == ["user", "assistant", "user"]


def test_a_turn_that_got_no_answer_is_marked_and_left_off_the_wire_once_superseded():
    session, transport = replay_session(CONTENT, model="tiny")
    list(session.stream("Hi"))
    list(session.stream("Hi again"))  # no recording left: 500, nothing answered
    question = session.conversation.messages[-1]
    assert question.role == "user" and question.failed and "500" in question.failed
    wire = [m["role"] for m in session.conversation.to_wire()]
    assert wire == ["user", "assistant", "user"]  # still last: a retry sends it
    session.conversation.messages.append(Message("user", "third"))
    assert [m["content"] for m in session.conversation.to_wire() if m["role"] == "user"] == ["Hi", "third"]
    saved = Conversation.from_dict(session.conversation.to_dict())
    assert saved.messages[2].failed == question.failed  # export and import keep the mark
    session.conversation.messages.pop()
    retry, _ = replay_session(CONTENT, model="tiny")
    retry.conversation = session.conversation
    list(retry.stream(None))  # the retry answers the question: the mark goes
    assert [m.role for m in retry.conversation.messages][-2:] == ["user", "assistant"]
    assert retry.conversation.messages[-2].failed is None


def test_a_reply_that_is_not_an_event_stream_is_an_error_with_the_servers_text():
    class LoginPage(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/models"):
                return httpx.Response(200, json={"object": "list", "data": [{"id": "m"}]})
            return httpx.Response(200, headers={"content-type": "text/html"},
                                  content=b"<html><body>Please sign in to the proxy</body></html>")

    session = ChatSession("http://proxy.invalid", options=ChatOptions(model="m"),
                          http_client=httpx.AsyncClient(transport=LoginPage()))
    [error] = of(list(session.stream("Hi")), ErrorEvent)
    assert "answered with text/html, not an event stream" in error.message
    assert "Please sign in to the proxy" in error.message
