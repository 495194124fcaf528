"""The library names settings, the CLI names flags: a library error says what to change in
words and lists the settings; `python -m workbench` adds the flags of the command that ran."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.bench.config import BenchConfig, check_fits, preset_config
from workbench.cli import build_parsers, main
from workbench.cli.hints import FLAG_FOR_SETTING, FLAG_IN_COMMANDS, command_line_hint, flags_of, rewrite_argv
from workbench.errors import BenchError, BenchShapeError, InputError
from workbench.server.page_flags import parse_help

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workbench"
VLLM_HELP = ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu" / "vllm_serve_help_all.txt"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Settings the library may name that no subcommand has a flag for (a UI-only or API-only value).
SETTINGS_WITHOUT_A_FLAG = {"prompts"}


def _workbench_only_flags() -> set[str]:
    """Flags our subcommands take that vLLM's `serve` does not: naming them is the CLI's business."""
    _, commands = build_parsers()
    ours = set().union(*(flags_of(parser) for parser in commands.values()))
    vllm = set(parse_help(VLLM_HELP.read_text()))
    return ours - vllm - {"--help"}


def _strings(node: ast.AST) -> list[tuple[int, str]]:
    found = []
    for inner in ast.walk(node):
        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            found.append((inner.lineno, inner.value))
    return found


def _library_texts() -> list[tuple[str, int, str]]:
    """Every string in a raise statement, a hint, or a Diagnosis / diagnosis rule (their fix
    becomes a hint), in the library: everything but the command line."""
    texts = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "cli":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            is_diagnosis = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                            and node.func.id in ("Diagnosis", "_rule"))
            is_hint = (isinstance(node, ast.keyword) and node.arg == "hint"
                       or isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("hint", "fix")
                                                               for t in node.targets))
            if isinstance(node, ast.Raise) or is_diagnosis or is_hint:
                texts += [(str(path.relative_to(ROOT)), line, text) for line, text in _strings(node)]
    return texts


def _library_setting_names() -> set[str]:
    """Every setting name the library writes as a literal: in a `settings=` argument, a
    `setting=` one, or the default of a `setting` parameter."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "setting" and isinstance(node.value, ast.Constant):
                names.add(node.value.value)
            if isinstance(node, ast.FunctionDef):
                params = node.args.args[len(node.args.args) - len(node.args.defaults):]
                names |= {default.value for param, default in zip(params, node.args.defaults)
                          if param.arg == "setting" and isinstance(default, ast.Constant)}
            if isinstance(node, ast.keyword) and node.arg == "settings":
                value = node.value
                items = (value.keys if isinstance(value, ast.Dict) else value.elts
                         if isinstance(value, ast.Tuple | ast.List) else [])
                names |= {item.value for item in items if isinstance(item, ast.Constant)}
    return names


def test_the_library_names_no_flag_of_the_workbench_command_line() -> None:
    ours = _workbench_only_flags()
    assert {"--isl", "--workers", "--head-address", "--url", "--auth"} <= ours  # the scan sees our flags
    offenders = [f"{path}:{line}: {flag} in {text!r}" for path, line, text in _library_texts()
                 for flag in FLAG.findall(text) if flag in ours]
    assert not offenders, "say the setting in words and pass settings=(...):\n" + "\n".join(offenders)


def test_every_setting_the_library_names_has_a_flag_on_some_command() -> None:
    _, commands = build_parsers()
    every_flag = set().union(*(flags_of(parser) for parser in commands.values()))
    named = _library_setting_names() | set(BenchConfig.__dataclass_fields__) & set(FLAG_FOR_SETTING)
    assert {"input_tokens", "workers", "head_address", "server_port", "app_port"} <= named
    assert named - SETTINGS_WITHOUT_A_FLAG <= set(FLAG_FOR_SETTING) | set(FLAG_IN_COMMANDS), \
        "add the setting to cli/hints.py"
    assert set(FLAG_FOR_SETTING.values()) <= every_flag, "cli/hints.py names a flag no command takes"
    for setting, by_command in FLAG_IN_COMMANDS.items():
        for command, flag in by_command.items():
            assert flag in flags_of(commands[command]), f"{command} has no {flag} for {setting}"


def test_bench_settings_name_every_bad_field_and_no_flag() -> None:
    with pytest.raises(BenchError) as info:
        BenchConfig(url="http://127.0.0.1:1", input_tokens=0, output_tokens=0, warmup_requests=-1)
    error = info.value
    assert set(error.settings) == {"input_tokens", "output_tokens", "warmup_requests"}
    assert "input length must be at least 1" in error.message and "--" not in error.message


def test_a_shape_that_does_not_fit_suggests_its_input_length_as_a_value() -> None:
    with pytest.raises(BenchShapeError) as info:
        check_fits(preset_config("speed-bench", url="http://127.0.0.1:1"), 4096)
    assert info.value.settings == {"input_tokens": 2048} and "2048 input tokens" in info.value.hint


def test_the_hint_names_the_flags_of_the_command_that_ran() -> None:
    _, commands = build_parsers()
    error = InputError("no", settings=("server_port", "app_port"))
    # `serve` takes vLLM's port only; the workshop has both, its own port is --port.
    assert command_line_hint(error.settings, commands["serve"], ["serve"]) == "On the command line: --server-port."
    assert command_line_hint(error.settings, commands["workshop"], ["workshop"]) == \
        "On the command line: --server-port, --port."
    assert command_line_hint({"room_code": None}, commands["bench"], ["bench"]) is None
    # `experiment --config` is a configuration, not the planner's config.json.
    assert command_line_hint({"config": None}, commands["plan"], ["plan"]) == "On the command line: --config."
    assert command_line_hint({"config": None}, commands["experiment"], ["experiment"]) is None


def test_known_values_give_the_whole_command_back_but_never_a_secret() -> None:
    _, commands = build_parsers()
    argv = ["bench", "--url", "http://h:8000", "--isl=8192", "--osl", "256"]
    assert command_line_hint({"input_tokens": 2048}, commands["bench"], argv) == \
        "On the command line: python -m workbench bench --url http://h:8000 --isl=2048 --osl 256"
    assert rewrite_argv(["bench", "--osl", "4"], {"--isl": "16"}) == ["bench", "--osl", "4", "--isl", "16"]
    with_key = ["bench", "--url", "http://h:8000", "--api-key", "sk-secret"]
    hint = command_line_hint({"input_tokens": 2048}, commands["bench"], with_key)
    assert hint == "On the command line: --isl 2048." and "sk-secret" not in hint


def test_the_cli_prints_the_flag_under_a_library_error(capsys) -> None:
    assert main(["bench", "--url", "http://127.0.0.1:1", "--isl", "0", "--requests", "1"]) == 2
    err = capsys.readouterr().err
    assert "the input length must be at least 1 token" in err
    assert "On the command line: --isl." in err and "Traceback" not in err


def test_worker_hosts_without_a_multi_node_plan_name_the_flags_that_make_one() -> None:
    done = subprocess.run([sys.executable, "-m", "workbench", "serve", "--hardware", "cpu", "--workers", "a,b"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "Worker hosts need a multi-node plan" in done.stderr
    assert "On the command line: --nodes, --strategy." in done.stderr and "Traceback" not in done.stderr
