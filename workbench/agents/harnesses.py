"""Configuration for agent harnesses to use a served endpoint (`python -m workbench connect`).

Each harness renders the file its documentation describes (doc_url), filled with
the server's real values: the /v1 base URL, the served model name (asked from
/v1/models), the context length (vLLM's `max_model_len` there), the variable
that holds the API key, and how reasoning and tool calls are switched on.
vLLM streams reasoning in `reasoning` (>= 0.16) and tool calls as OpenAI
`tool_calls` when started with a reasoning parser and --enable-auto-tool-choice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import yaml

from workbench.errors import InputError
from workbench.urls import normalize_base_url

__all__ = ["Connection", "HARNESSES", "Harness", "RenderedHarness", "connection_for", "render_harness"]


@dataclass(frozen=True)
class Connection:
    """What a client needs to know about one served endpoint."""

    base_url: str  # the server's root, e.g. http://127.0.0.1:8000
    model: str  # the served model name clients send as `model`
    context_length: int
    api_key_env: str = "VLLM_API_KEY"
    # Whether the server splits reasoning / parses tool calls (its --reasoning-parser,
    # --tool-call-parser); a config must not promise what the server does not do.
    reasoning: bool = True
    tool_calls: bool = True

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def max_output_tokens(self) -> int:
        """What the configs reserve for one answer: a quarter of the context, 1K to 32K."""
        return max(1024, min(32768, self.context_length // 4))


@dataclass(frozen=True)
class RenderedFile:
    path: str  # where the harness reads it
    format: str  # json, toml, yaml, python
    text: str


@dataclass(frozen=True)
class RenderedHarness:
    name: str
    title: str
    doc_url: str
    files: list[RenderedFile]
    env: dict[str, str] = field(default_factory=dict)  # shell variables to export
    notes: list[str] = field(default_factory=list)

    @property
    def format(self) -> str:
        return self.files[0].format

    @property
    def file_hint(self) -> str:
        return ", ".join(f.path for f in self.files)

    @property
    def text(self) -> str:
        parts = []
        for name, value in self.env.items():
            parts.append(f"export {name}={value}")
        if parts:
            parts.append("")
        for f in self.files:
            if len(self.files) > 1:
                parts.append(f"# --- {f.path} ---")
            parts.append(f.text.rstrip("\n"))
        return "\n".join(parts) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _opencode(c: Connection) -> RenderedHarness:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": f"vllm/{c.model}",
        "provider": {"vllm": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "vLLM (Nemotron workbench)",
            "options": {"baseURL": c.openai_base_url, "apiKey": f"{{env:{c.api_key_env}}}"},
            "models": {c.model: {
                "name": c.model, "tool_call": c.tool_calls, "reasoning": c.reasoning,
                "limit": {"context": c.context_length, "output": c.max_output_tokens},
            }},
        }},
    }
    return RenderedHarness("opencode", "OpenCode", "https://opencode.ai/docs/providers/",
                           [RenderedFile("opencode.json", "json", json.dumps(config, indent=2) + "\n")],
                           notes=["OpenCode reads opencode.json in the project or ~/.config/opencode/; "
                                  "{env:NAME} takes the key from the environment."])


def _codex(c: Connection) -> RenderedHarness:
    text = "\n".join([
        f"model = {_toml_string(c.model)}",
        'model_provider = "vllm"',
        f"model_context_window = {c.context_length}",
        "",
        "[model_providers.vllm]",
        'name = "vLLM (Nemotron workbench)"',
        f"base_url = {_toml_string(c.openai_base_url)}",
        f"env_key = {_toml_string(c.api_key_env)}",
        'wire_api = "responses"',
    ]) + "\n"
    return RenderedHarness("codex", "Codex CLI", "https://developers.openai.com/codex/config-reference",
                           [RenderedFile("~/.codex/config.toml", "toml", text)],
                           notes=["Codex speaks the Responses API (wire_api = \"responses\", the only value recent "
                                  "releases accept); vLLM serves it at /v1/responses. Codex reads model providers "
                                  "only from ~/.codex/config.toml."])


def _continue(c: Connection) -> RenderedHarness:
    config = {
        "name": "Nemotron workbench", "version": "0.0.1", "schema": "v1",
        "models": [{
            "name": f"{c.model} (vLLM)", "provider": "openai", "model": c.model,
            "apiBase": c.openai_base_url, "apiKey": f"${{{{ secrets.{c.api_key_env} }}}}",
            "roles": ["chat", "edit", "apply"], "capabilities": ["tool_use"] if c.tool_calls else [],
            "defaultCompletionOptions": {"contextLength": c.context_length, "maxTokens": c.max_output_tokens},
        }],
    }
    return RenderedHarness("continue", "Continue", "https://docs.continue.dev/reference",
                           [RenderedFile("~/.continue/config.yaml", "yaml", yaml.safe_dump(config, sort_keys=False))],
                           notes=[f"Put {c.api_key_env}=<key> in ~/.continue/.env for ${{{{ secrets.{c.api_key_env} }}}}; "
                                  "`provider: openai` with apiBase is Continue's way to any OpenAI-compatible "
                                  "server; capabilities: [tool_use] turns on native tool calls."])


def _aider(c: Connection) -> RenderedHarness:
    conf = {"model": f"openai/{c.model}", "openai-api-base": c.openai_base_url}
    metadata = {f"openai/{c.model}": {"max_input_tokens": c.context_length, "max_output_tokens": c.max_output_tokens,
                                      "litellm_provider": "openai", "mode": "chat"}}
    return RenderedHarness(
        "aider", "Aider", "https://aider.chat/docs/llms/openai-compat.html",
        [RenderedFile(".aider.conf.yml", "yaml", yaml.safe_dump(conf, sort_keys=False)),
         RenderedFile(".aider.model.metadata.json", "json", json.dumps(metadata, indent=2) + "\n")],
        env={"OPENAI_API_KEY": f"${c.api_key_env}"},
        notes=["The openai/ prefix routes aider through its OpenAI-compatible client; the metadata file tells it "
               "the context window (https://aider.chat/docs/config/adv-model-settings.html). Aider edits with its "
               "own text formats, not native tool calls."])


def _openhands(c: Connection) -> RenderedHarness:
    text = "\n".join([
        "[llm]",
        f"model = {_toml_string('openai/' + c.model)}",
        f"base_url = {_toml_string(c.openai_base_url)}",
        f"native_tool_calling = {'true' if c.tool_calls else 'false'}",
        f"max_input_tokens = {c.context_length}",
        f"max_output_tokens = {c.max_output_tokens}",
    ]) + "\n"
    return RenderedHarness("openhands", "OpenHands", "https://docs.openhands.dev/openhands/usage/advanced/configuration-options",
                           [RenderedFile("config.toml", "toml", text)],
                           env={"LLM_API_KEY": f"${c.api_key_env}"},
                           notes=["OpenHands reads config.toml from the directory it runs in; every [llm] option "
                                  "can also be an LLM_* environment variable (the key as LLM_API_KEY). In its web UI: "
                                  "Settings → LLM → Advanced, Custom Model openai/<name>, Base URL as above."])


def _openai_sdk(c: Connection) -> RenderedHarness:
    text = f'''import os

from openai import OpenAI

client = OpenAI(base_url={c.openai_base_url!r}, api_key=os.environ.get({c.api_key_env!r}, "EMPTY"))
tools = [{{"type": "function", "function": {{
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {{"type": "object", "properties": {{"city": {{"type": "string"}}}}, "required": ["city"]}}}}}}]
stream = client.chat.completions.create(
    model={c.model!r},
    messages=[{{"role": "user", "content": "What is the weather in Paris?"}}],
    tools=tools,  # parsed into delta.tool_calls by the server's --tool-call-parser
    max_tokens={c.max_output_tokens},  # the context is {c.context_length} tokens, prompt included
    stream=True,
    stream_options={{"include_usage": True}},  # the final chunk carries usage (and `metrics`, if enabled)
    extra_body={{"chat_template_kwargs": {{"enable_thinking": True}}}},  # False: reasoning off
)
for chunk in stream:
    for choice in chunk.choices:
        reasoning = getattr(choice.delta, "reasoning", None)  # vLLM >= 0.16; older: reasoning_content
        if reasoning:
            print(reasoning, end="")
        if choice.delta.content:
            print(choice.delta.content, end="")
        for call in choice.delta.tool_calls or []:
            print(call.function)
'''
    return RenderedHarness("openai-sdk", "OpenAI Python SDK", "https://github.com/openai/openai-python#usage",
                           [RenderedFile("client.py", "python", text)],
                           notes=["Reasoning is switched per request with chat_template_kwargs.enable_thinking; "
                                  "tool calls need the server started with --enable-auto-tool-choice and a "
                                  "--tool-call-parser."])


@dataclass(frozen=True)
class Harness:
    name: str
    title: str
    file_hint: str
    doc_url: str
    render: Callable[[Connection], RenderedHarness]


HARNESSES: dict[str, Harness] = {h.name: h for h in (
    Harness("opencode", "OpenCode", "opencode.json", "https://opencode.ai/docs/providers/", _opencode),
    Harness("codex", "Codex CLI", "~/.codex/config.toml", "https://developers.openai.com/codex/config-reference", _codex),
    Harness("continue", "Continue", "~/.continue/config.yaml", "https://docs.continue.dev/reference", _continue),
    Harness("aider", "Aider", ".aider.conf.yml", "https://aider.chat/docs/llms/openai-compat.html", _aider),
    Harness("openhands", "OpenHands", "config.toml",
            "https://docs.openhands.dev/openhands/usage/advanced/configuration-options", _openhands),
    Harness("openai-sdk", "OpenAI Python SDK", "client.py", "https://github.com/openai/openai-python#usage", _openai_sdk),
)}


def render_harness(name: str, connection: Connection) -> RenderedHarness:
    harness = HARNESSES.get(str(name).strip().lower())
    if harness is None:
        raise InputError(f"No harness named {name!r}.", hint=f"Pick one of: {', '.join(HARNESSES)}.")
    return harness.render(connection)


def connection_for(url: str | None, *, model: str | None = None, context_length: int | None = None,
                   api_key_env: str = "VLLM_API_KEY", api_key: str | None = None,
                   server_argv: list[str] | None = None, timeout: float = 10.0) -> Connection:
    """Ask the server (GET /v1/models) for its model name and max_model_len; the
    arguments given win. `server_argv` (the command the server was started with, when
    known) says whether it has a reasoning and a tool-call parser. Raises InputError when neither the server nor the
    arguments say what is needed."""
    try:
        root = normalize_base_url(url or "http://127.0.0.1:8000")
    except Exception as exc:
        raise InputError(f"{url!r} is not a server URL ({exc}).", hint="Give e.g. http://127.0.0.1:8000") from exc
    if not api_key_env.isascii() or not api_key_env.replace("_", "").isalnum() or api_key_env[0].isdigit():
        raise InputError(f"{api_key_env!r} is not an environment variable name.", hint="Use e.g. VLLM_API_KEY.")
    served: dict[str, Any] = {}
    problem = ""
    try:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        data = httpx.get(f"{root}/v1/models", headers=headers, timeout=timeout).json().get("data") or []
        cards = [m for m in data if isinstance(m, dict)]
        served = next((m for m in cards if model is None or m.get("id") == model), {})
        if model is not None and not served:
            problem = f"the server does not serve {model!r} (it lists {[m.get('id') for m in cards]})"
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        problem = f"{root}/v1/models did not answer ({exc})"
    name = model or served.get("id")
    length = context_length or served.get("max_model_len")
    if not name or not isinstance(length, int) or length < 1:
        raise InputError(f"Cannot tell the served model and its context length: {problem or 'the server did not say'}.",
                         hint="Start the server, or give the served model's name and its context length.",
                         settings=("model", "context_length"))
    if server_argv is None:
        return Connection(root, str(name), int(length), api_key_env)
    return Connection(root, str(name), int(length), api_key_env, reasoning="--reasoning-parser" in server_argv,
                      tool_calls="--tool-call-parser" in server_argv)
