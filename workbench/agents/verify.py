"""Does an OpenAI-compatible endpoint behave as agent harnesses need? (`python -m workbench verify URL`)

Checks, in order, each passing, failing with the change to make, or "not
applicable" with the reason (a server without a reasoning parser does not fail
the reasoning checks; it skips them):

    models             GET /v1/models lists the served model
    stream             a streamed answer arrives (SSE chunks, a finish reason)
    reasoning          reasoning arrives apart from the content, and in which field
                       (`reasoning`, vLLM >= 0.16, or `reasoning_content`)
    reasoning_off      chat_template_kwargs {"enable_thinking": false} is respected
    tool_call          a native tool call is parsed for the given tool (delta.tool_calls)
    multi_step         the tool's result sent back, the model answers
    server_figures     the per-request `metrics` (queue, prefill, decode) arrive
    parsers_match      what the server did matches the recipe's --reasoning-parser /
                       --tool-call-parser / --enable-per-request-metrics

`request_fields` adds fields to each check's request body (the forcing model is
driven this way: workbench.demo.forcing.verify_request_fields). Never raises for
a misbehaving server: that is what the report is for.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

from workbench.agents.sse import StreamedReply, stream_chat
from workbench.errors import InputError
from workbench.urls import normalize_base_url

__all__ = ["CHECK_KEYS", "DEFAULT_TOOL", "EndpointCheck", "ExpectedParsers", "VerifyReport", "verify_endpoint"]

log = logging.getLogger("workbench.agents.verify")

Outcome = Literal["pass", "fail", "not_applicable"]
RequestFields = Callable[[str], Mapping[str, Any]]
CHECK_KEYS = ("models", "stream", "reasoning", "reasoning_off", "tool_call", "multi_step", "server_figures",
              "parsers_match")

DEFAULT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name, e.g. Paris"}},
            "required": ["city"],
        },
    },
}
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
ASK = "What is 2 + 3? Answer in one short sentence."
# The text an unparsed reasoning section or tool call leaves in the content.
_REASONING_MARKS = ("<think>", "</think>")
_TOOL_MARKS = ("<tool_call>", "<function=", '"name":')


@dataclass(frozen=True)
class EndpointCheck:
    key: str
    title: str
    outcome: Outcome
    found: str
    change: str = ""  # what to do when it failed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ExpectedParsers:
    """What the recipe's rendered command turns on (read from its argv)."""

    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    per_request_metrics: bool = False

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> ExpectedParsers:
        def value(flag: str) -> str | None:
            for i, word in enumerate(argv):
                if word == flag and i + 1 < len(argv):
                    return argv[i + 1]
                if word.startswith(flag + "="):
                    return word.split("=", 1)[1]
            return None

        return cls(value("--reasoning-parser"), value("--tool-call-parser"),
                   "--enable-per-request-metrics" in argv)


@dataclass
class VerifyReport:
    base_url: str
    model: str | None
    checks: list[EndpointCheck] = field(default_factory=list)
    reasoning_field: str | None = None  # `reasoning` or `reasoning_content`, when reasoning arrived

    @property
    def failed(self) -> list[EndpointCheck]:
        return [c for c in self.checks if c.outcome == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failed

    def check(self, key: str) -> EndpointCheck:
        return next(c for c in self.checks if c.key == key)

    def to_dict(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "model": self.model, "ok": self.ok,
                "reasoning_field": self.reasoning_field, "checks": [c.to_dict() for c in self.checks]}


class _Run:
    """One verification: the HTTP client, the model, and what earlier checks found."""

    def __init__(self, base_url: str, model: str | None, api_key: str | None, tool: Mapping[str, Any],
                 expected: ExpectedParsers | None, request_fields: RequestFields | None, timeout: float,
                 max_tokens: int) -> None:
        self.base_url = base_url
        self.report = VerifyReport(base_url, model)
        self.tool = dict(tool)
        self.expected = expected
        self.request_fields = request_fields
        self.max_tokens = max_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout)
        self.replies: dict[str, StreamedReply] = {}

    @property
    def tool_name(self) -> str:
        return str(self.tool.get("function", {}).get("name", ""))

    def add(self, key: str, title: str, outcome: Outcome, found: str, change: str = "") -> EndpointCheck:
        check = EndpointCheck(key, title, outcome, found, change)
        self.report.checks.append(check)
        log.info("verify %s: %s (%s)", key, outcome, found)
        return check

    def body(self, key: str, messages: list[dict[str, Any]], *, thinking: bool | None = None,
             tools: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.report.model, "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True}, "max_tokens": self.max_tokens,
                                "temperature": 0}
        if thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": thinking}
        if tools:
            body["tools"] = [self.tool]
            body["tool_choice"] = "auto"
        if self.request_fields is not None:
            body.update(self.request_fields(key))
        return body

    def send(self, key: str, body: dict[str, Any]) -> StreamedReply:
        reply = stream_chat(self.client, body)
        self.replies[key] = reply
        return reply


def _plain(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _models(run: _Run) -> bool:
    title = "models listed (GET /v1/models)"
    try:
        answer = run.client.get("/v1/models")
        answer.raise_for_status()
        ids = [str(m.get("id")) for m in answer.json().get("data", []) if isinstance(m, dict)]
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        run.add("models", title, "fail", f"{run.base_url}/v1/models did not answer a model list: {exc}",
                "Check the URL (the server's root, e.g. http://127.0.0.1:8000) and that the server is up "
                "(`python -m workbench status`).")
        return False
    if not ids:
        run.add("models", title, "fail", "the list is empty", "Start the server with a model.")
        return False
    if run.report.model is None:
        run.report.model = ids[0]
    elif run.report.model not in ids:
        run.add("models", title, "fail", f"{run.report.model!r} is not served; the server lists {ids}",
                f"Use --model {ids[0]} (clients must send the served model name as `model`).")
        return False
    run.add("models", title, "pass", f"{', '.join(ids)} (using {run.report.model})")
    return True


def _stream(run: _Run) -> StreamedReply | None:
    title = "a streamed answer arrives"
    reply = run.send("stream", run.body("stream", [{"role": "user", "content": ASK}], thinking=True))
    if reply.error:
        run.add("stream", title, "fail", reply.error, reply.error_change or "See the server's log.")
        return None
    if not reply.chunks or not (reply.content or reply.reasoning or reply.tool_calls):
        run.add("stream", title, "fail", f"{reply.chunks} chunks, no text",
                "The server answered no tokens: check its log.")
        return None
    ttft = "" if reply.first_token_s is None else f", first token after {reply.first_token_s:.2f} s"
    run.add("stream", title, "pass", f"{reply.chunks} chunks{ttft}, finish reason {reply.finish_reason}")
    return reply


def _reasoning(run: _Run, reply: StreamedReply) -> bool:
    title = "reasoning arrives apart from the content"
    expected = run.expected.reasoning_parser if run.expected else None
    leaked = [m for m in _REASONING_MARKS if m in reply.content]
    parser_flag = f"--reasoning-parser {expected}" if expected else "--reasoning-parser <the model's parser>"
    if leaked:
        run.add("reasoning", title, "fail", f"the content holds {leaked[0]!r}: reasoning leaked into the answer",
                f"Start the server with {parser_flag} so vLLM splits it out.")
        return False
    if any(m in reply.reasoning for m in _REASONING_MARKS[1:]):
        run.add("reasoning", title, "fail", "the end-of-thinking marker '</think>' arrived inside the reasoning: "
                "the answer never left it", f"The reasoning parser does not match the model (or the tokenizer lacks "
                f"'</think>' as one token): start the server with {parser_flag}.")
        return False
    if reply.reasoning:
        field_name = reply.reasoning_field or "reasoning"
        run.report.reasoning_field = field_name
        note = "" if field_name == "reasoning" else (
            " (older field name: harnesses that read `reasoning` will miss it)")
        run.add("reasoning", title, "pass",
                f"{len(reply.reasoning)} characters in delta.{field_name}{note}, answer in delta.content "
                f"({_plain(reply.reasoning, 40)} / {_plain(reply.content, 40)})")
        return True
    if expected:
        run.add("reasoning", title, "fail", "no reasoning arrived, though the recipe renders "
                f"--reasoning-parser {expected}",
                f"Restart the server with the recipe's command (it has {parser_flag}), or check that the model "
                "reasons with enable_thinking on.")
        return False
    run.add("reasoning", title, "not_applicable",
            "no reasoning arrived in delta.reasoning or delta.reasoning_content: this server has no reasoning "
            "parser (or the model does not reason)")
    return False


def _reasoning_off(run: _Run, reasoning_works: bool) -> None:
    title = "reasoning off is respected (chat_template_kwargs.enable_thinking=false)"
    if not reasoning_works:
        run.add("reasoning_off", title, "not_applicable", "the server sent no separate reasoning to switch off")
        return
    reply = run.send("reasoning_off", run.body("reasoning_off", [{"role": "user", "content": ASK}], thinking=False))
    if reply.error:
        run.add("reasoning_off", title, "fail", reply.error, reply.error_change)
    elif reply.reasoning:
        run.add("reasoning_off", title, "fail", f"{len(reply.reasoning)} characters of reasoning still arrived",
                "The model's chat template ignores enable_thinking: use a template that honours it "
                "(--chat-template), or let clients switch reasoning another way.")
    elif not reply.content.strip():
        run.add("reasoning_off", title, "fail", "no answer arrived with reasoning off", "Check the server's log.")
    else:
        run.add("reasoning_off", title, "pass", f"no reasoning; answer {_plain(reply.content, 60)}")


def _tool_call(run: _Run) -> dict[str, Any] | None:
    title = f"a native tool call is parsed ({run.tool_name})"
    expected = run.expected.tool_call_parser if run.expected else None
    flags = f"--enable-auto-tool-choice --tool-call-parser {expected or '<the model parser>'}"
    reply = run.send("tool_call", run.body("tool_call", [{"role": "user", "content": TOOL_PROMPT}], tools=True))
    if reply.error:
        if reply.status_code == 400 and "tool" in reply.error.lower() and not expected:
            run.add("tool_call", title, "not_applicable",
                    f"the server has no tool-call parser (it refused tool_choice auto: {reply.error})")
        else:
            run.add("tool_call", title, "fail", reply.error, f"Start the server with {flags}."
                    if reply.status_code == 400 else reply.error_change)
        return None
    if not reply.tool_calls:
        marks = [m for m in _TOOL_MARKS[:2] if m in reply.content + reply.reasoning]
        if marks:
            run.add("tool_call", title, "fail", f"the call came back as text ({marks[0]!r}), not as delta.tool_calls",
                    f"The tool-call parser does not match the model's call format: start the server with {flags}.")
        else:
            run.add("tool_call", title, "fail", f"the model answered without calling the tool: "
                    f"{_plain(reply.content or reply.reasoning)}",
                    "Check that the chat template renders `tools` (the prompt asked for the tool).")
        return None
    call = reply.tool_calls[0]
    name, raw = call["name"], call["arguments"]
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        run.add("tool_call", title, "fail", f"{name}'s arguments are not JSON ({exc.msg}): {raw!r}",
                f"The tool-call parser does not match the model's call format: start the server with {flags}.")
        return None
    required = run.tool.get("function", {}).get("parameters", {}).get("required", [])
    missing = [k for k in required if not isinstance(arguments, dict) or k not in arguments]
    if name != run.tool_name or not isinstance(arguments, dict) or missing:
        why = (f"called {name!r}, not {run.tool_name!r}" if name != run.tool_name
               else f"arguments {raw!r} lack {missing}" if missing else f"arguments {raw!r} are not an object")
        run.add("tool_call", title, "fail", why, "The model chose badly: try a larger model or a clearer tool "
                "description; the parser itself worked.")
        return None
    run.add("tool_call", title, "pass", f"delta.tool_calls: {name}({raw}), id {call['id'] or '–'}, "
            f"finish reason {reply.finish_reason}")
    return {"id": call["id"] or "call_0", "type": "function", "function": {"name": name, "arguments": raw}}


def _multi_step(run: _Run, call: dict[str, Any] | None) -> None:
    title = "a multi-step call round-trips (tool result sent back, model answers)"
    if call is None:
        run.add("multi_step", title, "not_applicable", "no tool call to answer (see the tool call check)")
        return
    first = run.replies["tool_call"]
    assistant: dict[str, Any] = {"role": "assistant", "content": first.content or None, "tool_calls": [call]}
    messages = [{"role": "user", "content": TOOL_PROMPT}, assistant,
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"city": "Paris",
                                                                                    "temperature_c": 21})}]
    reply = run.send("multi_step", run.body("multi_step", messages, tools=True))
    if reply.error:
        run.add("multi_step", title, "fail", f"sending the tool's result back failed: {reply.error}",
                "The chat template must render assistant `tool_calls` and `tool` messages: check --chat-template.")
    elif not reply.content.strip():
        again = f" (it called {reply.tool_calls[0]['name']} again)" if reply.tool_calls else ""
        run.add("multi_step", title, "fail", f"no answer after the tool's result{again}",
                "Check that the chat template renders `tool` messages back to the model.")
    else:
        run.add("multi_step", title, "pass", f"answer {_plain(reply.content, 60)}")


def _server_figures(run: _Run) -> None:
    title = "per-request server figures (response `metrics`)"
    expected = bool(run.expected and run.expected.per_request_metrics)
    figures = next((r.metrics for r in run.replies.values() if r.metrics is not None), None)
    if figures is not None:
        keys = ", ".join(sorted(figures))
        run.add("server_figures", title, "pass", f"metrics on the final usage chunk: {keys}")
    elif expected:
        run.add("server_figures", title, "fail", "no `metrics` in any response, though the recipe renders "
                "--enable-per-request-metrics", "Restart the server with the recipe's command.")
    else:
        run.add("server_figures", title, "not_applicable",
                "the server sends no per-request `metrics` (started without --enable-per-request-metrics); "
                "the Chat tab then shows only the client's figures")


def _parsers_match(run: _Run) -> None:
    title = "the server's parsers match the recipe"
    exp = run.expected
    if exp is None:
        run.add("parsers_match", title, "not_applicable", "no recipe or plan given to compare with "
                "(pass --recipe/--hardware/--preset, or verify from the Server tab)")
        return
    outcome = {c.key: c.outcome for c in run.report.checks}
    problems, seen = [], []
    reasoning_on, tools_on = outcome.get("reasoning") == "pass", outcome.get("tool_call") == "pass"
    if exp.reasoning_parser and not reasoning_on:
        problems.append(f"the recipe renders --reasoning-parser {exp.reasoning_parser}, the server split no reasoning")
    if not exp.reasoning_parser and reasoning_on:
        problems.append("the server splits reasoning, the recipe renders no --reasoning-parser")
    if exp.tool_call_parser and not tools_on:
        problems.append(f"the recipe renders --tool-call-parser {exp.tool_call_parser}, no tool call was parsed")
    if not exp.tool_call_parser and tools_on:
        problems.append("the server parses tool calls, the recipe renders no --tool-call-parser")
    seen.append(f"reasoning parser {exp.reasoning_parser or 'none'} ↔ reasoning {'split' if reasoning_on else 'not split'}")
    seen.append(f"tool-call parser {exp.tool_call_parser or 'none'} ↔ tool calls {'parsed' if tools_on else 'not parsed'}")
    if problems:
        run.add("parsers_match", title, "fail", "; ".join(problems),
                "Restart the server with the recipe's command (Server tab, or `python -m workbench serve` with "
                "the same choices), or pick the recipe this server was started from.")
    else:
        run.add("parsers_match", title, "pass", "; ".join(seen))


def verify_endpoint(base_url: str, *, model: str | None = None, api_key: str | None = None,
                    tool: Mapping[str, Any] | None = None, expected: ExpectedParsers | None = None,
                    request_fields: RequestFields | None = None, timeout: float = 120.0,
                    max_tokens: int = 1024) -> VerifyReport:
    """Run every check against `base_url` (the server's root; a trailing /v1 is accepted)."""
    try:
        root = normalize_base_url(base_url)
    except Exception as exc:
        raise InputError(f"{base_url!r} is not a server URL ({exc}).",
                         hint="Give the server's root, e.g. http://127.0.0.1:8000") from exc
    tool = tool or DEFAULT_TOOL
    if not isinstance(tool.get("function"), Mapping) or not tool["function"].get("name"):
        raise InputError("The tool has no function name.",
                         hint='Give an OpenAI tool: {"type": "function", "function": {"name": ..., "parameters": ...}}')
    run = _Run(root, model, api_key, tool, expected, request_fields, timeout, max_tokens)
    started = time.monotonic()
    try:
        if not _models(run):
            for key in CHECK_KEYS[1:]:
                run.add(key, key, "not_applicable", "skipped: the server did not list its models")
            return run.report
        reply = _stream(run)
        reasoning_works = _reasoning(run, reply) if reply is not None else False
        if reply is None:
            run.add("reasoning", "reasoning arrives apart from the content", "not_applicable",
                    "skipped: no streamed answer")
        _reasoning_off(run, reasoning_works)
        _multi_step(run, _tool_call(run))
        _server_figures(run)
        _parsers_match(run)
    finally:
        run.client.close()
    log.info("verify %s: %d checks in %.1f s, %d failed", root, len(run.report.checks),
             time.monotonic() - started, len(run.report.failed))
    return run.report
