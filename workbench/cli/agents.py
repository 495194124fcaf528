"""`python -m workbench verify URL` and `python -m workbench connect --harness NAME`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from workbench.cli.checks import at_least, positive_float
from workbench.demo.forcing import verify_fields_for_served_model
from workbench.demo.models import FORCING_MODEL_NAME
from workbench.errors import InputError
from workbench.recipes import Selection, load_catalog, render
from workbench.server.servers import scan_records
from workbench.server.state import state_root
from workbench.urls import normalize_base_url

_MARK = {"pass": "pass", "fail": "FAIL", "not_applicable": "n/a "}


def register(subparsers: Any) -> None:
    v = subparsers.add_parser(
        "verify", help="check that a served endpoint behaves as agent harnesses need",
        description="Models listed, a streamed answer, reasoning apart from the content (and its field), "
        "reasoning off respected, a native tool call parsed, a multi-step call round-tripped, per-request "
        "server figures, and the parsers matching the recipe. Exit 1 when a check that applies fails.")
    v.add_argument("url", help="the server's root, e.g. http://127.0.0.1:8000")
    v.add_argument("--model", help="the served model name (default: the first one the server lists)")
    v.add_argument("--api-key", help="the server's API key, if it has one")
    v.add_argument("--tool", type=Path, metavar="FILE",
                   help="a JSON file with one OpenAI tool to call (default: get_weather(city))")
    v.add_argument("--timeout", type=positive_float, default=120.0, help="seconds per request (default 120)")
    v.add_argument("--max-tokens", type=at_least(16), default=1024,
                   help="max_tokens per request (default 1024: a reasoning model thinks before it calls the tool)")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    g = v.add_argument_group("compare with a recipe (default: the plan the workbench launched on that port)")
    g.add_argument("--recipe", help="recipe id or a unique part of it")
    g.add_argument("--hardware", help="hardware id")
    g.add_argument("--preset", help="a named command from the model card")
    g.add_argument("--features", type=lambda t: [f.strip() for f in t.split(",") if f.strip()], metavar="A,B")
    v.set_defaults(func=verify_command)

    c = subparsers.add_parser(
        "connect", help="print an agent harness's configuration for a served endpoint",
        description="The exact configuration for an agent harness (or the OpenAI SDK) to use this server: "
        "base URL, served model name, API key variable, context length, reasoning and tool calls.")
    c.add_argument("--harness", help="which harness (see --list)")
    c.add_argument("--list", action="store_true", help="list the harnesses")
    c.add_argument("--url", default=None, help="the server's root (default: the running server, else "
                   "http://127.0.0.1:8000)")
    c.add_argument("--model", help="the served model name (default: asked from the server, else the recipe's)")
    c.add_argument("--context-length", type=at_least(1), help="the context length (default: the server's max_model_len)")
    c.add_argument("--api-key-env", default="VLLM_API_KEY", help="the environment variable holding the key")
    c.add_argument("--json", action="store_true", help="print the whole configuration record as JSON")
    c.set_defaults(func=connect_command)


def _launched_argv(url: str) -> list[str] | None:
    """The argv of the server the workbench launched at this URL, if any."""
    try:
        root = normalize_base_url(url)
        handles, _ = scan_records(state_root())
    except Exception:
        return None
    for handle in handles:
        if normalize_base_url(handle.base_url) == root:
            argv = handle.to_dict().get("argv")
            return list(argv) if isinstance(argv, list) else None
    return None


def _running_server_url() -> str | None:
    """The first server the workbench launched that is still alive, if any."""
    try:
        handles, _ = scan_records(state_root())
    except Exception:
        return None
    return next((h.base_url for h in handles if h.is_alive()), None)


def _expected(args: argparse.Namespace) -> tuple[Any, str]:
    from workbench.agents.verify import ExpectedParsers  # workbench.agents: loaded by its two commands only

    if args.recipe or args.hardware or args.preset:
        plan = render(Selection(recipe=args.recipe, hardware=args.hardware, preset=args.preset,
                                features=args.features), load_catalog())
        return ExpectedParsers.from_argv(plan.argv), f"the {plan.recipe_id} plan on {plan.hardware}"
    argv = _launched_argv(args.url)
    if argv:
        return ExpectedParsers.from_argv(argv), "the command the workbench launched there"
    return None, ""


def _forcing_fields(base_url: str, model: str | None) -> Any:
    """The forcing model's replies are forced per request; anything else answers freely."""
    if model is None:
        try:
            ids = [m.get("id") for m in httpx.get(f"{base_url.rstrip('/')}/v1/models", timeout=10).json()["data"]]
        except Exception:
            return None
        model = FORCING_MODEL_NAME if FORCING_MODEL_NAME in ids else None
    fields = verify_fields_for_served_model(model)
    if fields is not None:
        print("note: this is the tiny forcing model: each reply is forced by the request and parsed by vLLM's "
              "real parsers.", file=sys.stderr)
    return fields


def verify_command(args: argparse.Namespace) -> int:
    from workbench.agents.verify import verify_endpoint  # workbench.agents: loaded by its two commands only

    tool = None
    if args.tool is not None:
        try:
            tool = json.loads(args.tool.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            raise InputError(f"Cannot read the tool from {args.tool}: {exc}",
                             hint='Give a JSON file holding one OpenAI tool: {"type": "function", "function": {...}}') from exc
        if not isinstance(tool, dict):
            raise InputError(f"{args.tool} holds {type(tool).__name__}, not one tool object.",
                             hint='Give {"type": "function", "function": {"name": ..., "parameters": ...}}')
    expected, against = _expected(args)
    report = verify_endpoint(args.url, model=args.model, api_key=args.api_key, tool=tool, expected=expected,
                             request_fields=_forcing_fields(args.url, args.model), timeout=args.timeout,
                             max_tokens=args.max_tokens)
    if args.json:
        print(json.dumps({**report.to_dict(), "compared_with": against or None}, indent=2, ensure_ascii=False))
    else:
        print(f"{report.base_url} · model {report.model or '?'}" + (f" · compared with {against}" if against else ""))
        for check in report.checks:
            print(f"[{_MARK[check.outcome]}] {check.title}: {check.found}")
            if check.outcome == "fail" and check.change:
                print(f"       what to change: {check.change}")
        print("all checks that apply pass" if report.ok else f"{len(report.failed)} check(s) failed")
    return 0 if report.ok else 1


def connect_command(args: argparse.Namespace) -> int:
    from workbench.agents.harnesses import HARNESSES, connection_for, render_harness  # loaded by this command only

    if args.list or not args.harness:
        for h in HARNESSES.values():
            print(f"{h.name:<12} {h.title} ({h.file_hint}) — {h.doc_url}")
        return 0 if args.list else 2
    url = args.url or _running_server_url()
    connection = connection_for(url, model=args.model, context_length=args.context_length,
                                api_key_env=args.api_key_env, server_argv=_launched_argv(url) if url else None)
    rendered = render_harness(args.harness, connection)
    if args.json:
        print(json.dumps(rendered.to_dict(), indent=2, ensure_ascii=False))
        return 0
    print(f"# {rendered.title}: {rendered.file_hint}  (format: {rendered.format}; documented at {rendered.doc_url})")
    print(rendered.text)
    for note in rendered.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
