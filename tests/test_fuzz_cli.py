"""Fuzz every CLI subcommand with bad input: zero tracebacks.

Each case runs `workbench.cli.main(argv)` in this process, with the options of
each subcommand read off its own argparse parser and values drawn from hostile
text (the issue's cases and more) and from hypothesis. A case passes when the
command ends with an exit code and, if it refused, a message on stderr; an
exception escaping `main`, or a traceback printed, fails it.

Where a command would start something long-lived (a vLLM server, the web UI,
the workshop, JupyterLab), that one call is replaced by a recorder: the input
got past every check, which is an outcome, not a failure. Nothing else is
replaced: URLs are really parsed and connected to (loopback, closed ports; any other
host is refused at name resolution, so no traffic leaves the machine),
files really read, state records really scanned.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import cli
from workbench.server import free_port

CLOSED_PORT = free_port()  # nothing listens here

HOSTILE = [
    "", " ", "-", "--", "-1", "0", "1", "65535", "65536", "70000", "99999", "-5", "1e999", "nan", "inf", "-inf",
    "0x10", "1.5", "8000 ", " 8000", "9" * 40, "nosuch", "mi300x", "h200", "cpu", "H200", "default", "bf16",
    "single_node_tp", "mtp", "max_throughput", "reasoning,tool_calling", "nosuch,reasoning", ",", "a,,b",
    ":", "a:", ":b", "user:pass", "--foo 'x", "--host 0.0.0.0", "--api-key sk-1", "\"", "'", "\\", "\x00",
    "é", "\u202e", "x" * 5000, "../../etc/passwd", "/", "/dev/null", "/nonexistent/dir/file.json", "{}", "[]",
    "null", "true", "http://[::1", "http://999.1.1.1", "http://999.1.1.1:8000", "http://127.0.0.1:0",
    "http://127.0.0.1:-1", "http://127.0.0.1:99999", f"http://127.0.0.1:{CLOSED_PORT}", f"127.0.0.1:{CLOSED_PORT}",
    "ftp://127.0.0.1/", "javascript:alert(1)", "http://", "http://:80", "http://user:pw@127.0.0.1:1/v1",
    "127.0.0.1", "0.0.0.0", "::", "::1", "localhost", "256.0.0.1", "[::1]", "host name", "a" * 300,
]

# Hosts are drawn from these only: a random word would be looked up in DNS.
HOSTS = ["", "127.0.0.1", "::1", "0.0.0.0", "256.0.0.1", "999.1.1.1", "[::1]", "host name", "-x", "1.2.3",
         "127.0.0.1:80", "\x00"]

SKIP_COMMANDS = {"demo-model"}  # takes no input but --force, and builds a model for minutes


class Started(BaseException):
    """The input passed every check and the command would now start its long-lived part."""


def _started(*_args, **_kwargs):
    raise Started()


@pytest.fixture
def hostile_files(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("hostile")
    files = {
        "empty.json": b"",
        "list.json": b"[1, 2, 3]",
        "notjson.json": b"{not json",
        "latin1.json": b'{"x": "\xff\xfe"}',
        "binary.bin": bytes(range(256)),
        "deep.json": b"[" * 5000 + b"]" * 5000,
        "huge_numbers.json": json.dumps({"num_hidden_layers": 10**30, "hidden_size": -1,
                                         "num_attention_heads": 0, "vocab_size": "many"}).encode(),
        "nan.json": b'{"hidden_size": NaN, "num_hidden_layers": Infinity}',
        "config_wrong_types.json": json.dumps({"architectures": "Nope", "hidden_size": [1],
                                               "layers_block_type": 5}).encode(),
        "result.json": json.dumps({"config": None, "levels": "x"}).encode(),
    }
    paths = []
    for name, data in files.items():
        (root / name).write_bytes(data)
        paths.append(str(root / name))
    (root / "a-folder").mkdir()
    paths.append(str(root / "a-folder"))
    unreadable = root / "unreadable.json"
    unreadable.write_text("{}")
    unreadable.chmod(0)
    paths.append(str(unreadable))
    return paths


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: sub for name, sub in action.choices.items() if name not in SKIP_COMMANDS}


def _options(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _positionals(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]


COMMANDS = _subcommands()


@st.composite
def argv_for(draw, command: str, files: list[str]):
    sub = COMMANDS[command]
    values = st.one_of(st.sampled_from(HOSTILE + files), st.text(max_size=40), st.integers().map(str))
    argv = [command]
    nested = next((a for a in sub._actions if isinstance(a, argparse._SubParsersAction)), None)
    if nested is not None and draw(st.booleans()):  # bench compare A B
        name = draw(st.sampled_from(sorted(nested.choices)))
        argv.append(name)
        sub = nested.choices[name]
    options = _options(sub)
    for action in draw(st.lists(st.sampled_from(options), max_size=5)) if options else []:
        flag = action.option_strings[-1]
        if action.nargs == 0:
            argv.append(flag)
        elif flag == "--host":
            argv += [flag, draw(st.sampled_from(HOSTS))]
        else:
            argv += [flag, draw(values)]
    for action in _positionals(sub):
        if action.nargs in (None, 1) or draw(st.booleans()):
            argv.append(draw(values))
    return argv


def run_cli(argv: list[str]) -> tuple[int | str, str, str]:
    """(exit code, or 'started'; stdout; stderr) of one in-process CLI call."""
    out, err = io.StringIO(), io.StringIO()
    code: int | str
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Started:
            code = "started"
    return code, out.getvalue(), err.getvalue()


def _loopback_only(getaddrinfo):
    """getaddrinfo that answers loopback addresses only; any other host fails as an unknown name would."""

    def resolve(host, *args, **kwargs):
        answers = [a for a in getaddrinfo(host, *args, **kwargs)
                   if (ip := ipaddress.ip_address(a[4][0].split("%")[0])).is_loopback or ip.is_unspecified]
        if not answers:
            raise socket.gaierror(socket.EAI_NONAME, f"{host}: not a loopback address (refused by the test)")
        return answers

    return resolve


@pytest.fixture
def contained(monkeypatch, tmp_path):
    """Nothing long-lived starts, nothing is downloaded, no signal handler is installed."""
    import workbench.cli.notebooks
    import workbench.server
    import workbench.server.cluster
    import workbench.server.signals
    import workbench.ui.app
    import workbench.ui.workshop_server

    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("WORKBENCH_AUTH", raising=False)
    monkeypatch.delenv("WORKBENCH_ROOM_CODE", raising=False)
    monkeypatch.delenv("WORKBENCH_PRESENTER_AUTH", raising=False)
    monkeypatch.chdir(tmp_path)
    # Hostile URLs name any host ("3" is 0.0.0.3): only loopback is ever connected to.
    monkeypatch.setattr(socket, "getaddrinfo", _loopback_only(socket.getaddrinfo))
    monkeypatch.setattr(workbench.server, "launch", _started)
    monkeypatch.setattr(workbench.server.cluster, "launch_cluster", _started)
    monkeypatch.setattr(workbench.ui.app, "serve_app", _started)
    monkeypatch.setattr(workbench.ui.workshop_server, "build_workshop", _started)
    monkeypatch.setattr(workbench.cli.notebooks, "jupyter_lab_argv", _started)
    monkeypatch.setattr(workbench.server.signals, "exit_on_signals", lambda *a, **k: None)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    yield
    for s, h in handlers.items():
        signal.signal(s, h)


def check_case(argv: list[str]) -> tuple[int | str, str]:
    started = time.monotonic()
    code, out, err = run_cli(argv)
    assert "Traceback (most recent call last)" not in err + out, f"{argv!r} printed a traceback:\n{err}"
    assert code in (0, 1, 2, 130, "started"), f"{argv!r} exited {code!r}:\n{err}"
    if code not in (0, "started"):  # `status` with no server, `chat --json` say so on stdout
        assert (err + out).strip(), f"{argv!r} exited {code} without saying why"
    assert time.monotonic() - started < 30, f"{argv!r} took {time.monotonic() - started:.0f} s"
    return code, err


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def vllm_flags_read():
    """vLLM's own option table, read once (`vllm serve --help=all` takes 10-40 s here) before the
    timed cases: an experiment with a speculative configuration asks it whether vLLM has
    --per-request-spec-decode-metrics, and later calls read it from the cache."""
    from workbench.server.page_flags import vllm_flag_table

    return vllm_flag_table(run=True)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_survives_hostile_options(command, contained, hostile_files, vllm_flags_read):
    outcomes: dict[str, int] = {}

    @FUZZ
    @given(st.data())
    def case(data):
        code, _ = check_case(data.draw(argv_for(command, hostile_files)))
        outcomes[str(code)] = outcomes.get(str(code), 0) + 1

    case()
    assert outcomes, "no case ran"
    # Bad input is mostly refused: a fuzz run that never refused anything tested nothing.
    assert outcomes.get("2", 0) + outcomes.get("1", 0) > 0, outcomes


# The issue's cases, each with the outcome a user should see.
REFUSED = [
    (["render", "--hardware", "nosuch", "--preset", "max_throughput"], "nosuch"),
    (["render", "--max-model-len", "-5"], "too small"),
    (["render", "--port", "99999"], "99999"),
    (["render", "--extra", "--foo 'x"], "No closing quotation"),
    (["serve", "--port", "-1"], "-1"),
    (["serve", "--port", "70000"], "70000"),
    (["serve", "--port", "0"], "0"),
    (["serve", "--attach", "http://[::1"], "http://[::1"),
    (["serve", "--attach", "http://999.1.1.1"], "999.1.1.1"),
    (["serve", "--hardware", "cpu", "--host", "256.0.0.1"], "256.0.0.1"),
    (["chat", "--url", "http://[::1", "hi"], "http://[::1"),
    (["chat", "--url", "http://999.1.1.1", "hi"], "999.1.1.1"),
    (["metrics", "--url", "http://[::1"], "http://[::1"),
    (["metrics", "--url", f"http://127.0.0.1:{CLOSED_PORT}", "--csv", "/nonexistent/x.csv"], "does not exist"),
    (["metrics", "--url", f"http://127.0.0.1:{CLOSED_PORT}", "--count", "0"], "too small"),
    (["bench", "--url", "http://999.1.1.1"], "999.1.1.1"),
    (["experiment", "--hardware", "cpu", "--spec", "off,mtp"], "valid modes here: off, ngram.\non the command line: --spec."),
    (["experiment", "--hardware", "cpu", "--spec", "off", "--concurrency", "0,4"], "from 1 to"),
    (["experiment", "--hardware", "cpu", "--config", "nocolon"], "LABEL:SPEC"),
    (["experiment", "--hardware", "cpu", "--spec", "off", "--dataset", "/nonexistent/x.jsonl"], "Cannot read"),
    (["experiment", "--resume", "/nonexistent/dir"], "holds no experiment"),
    (["experiment", "--attach", "http://999.1.1.1", "--spec", "off"], "--attach measures one server"),
    (["experiment", "--hardware", "cpu"], "No configuration to compare"),
    (["ui", "--auth", ":"], "auth"),
    (["ui", "--port", "70000"], "70000"),
    (["ui", "--host", "256.0.0.1"], "256.0.0.1"),
    (["workshop", "--app-port", "0"], "0"),
    (["workshop", "--max-tokens", "-3"], "too small"),
    (["workshop", "--host", "0.0.0.0"], "room code"),
    (["workshop", "--room-size", "0"], "too small"),
    (["workshop", "--turns-per-address", "-1"], "too small"),
    (["workshop", "--trusted-proxy", "proxy.example"], "not an IP address"),
    (["workshop", "--presenter-auth", "presenter:short"], "at least 8"),
    (["ui", "--auth", "admin:xy"], "at least 8"),
    (["notebooks", "--port", "99999"], "99999"),
]


@pytest.mark.parametrize("argv,says", REFUSED, ids=[" ".join(a)[:60] for a, _ in REFUSED])
def test_the_issues_bad_inputs_are_refused_with_a_reason(argv, says, contained):
    code, err = check_case(argv)
    assert code in (1, 2), f"{argv!r} was accepted ({code}):\n{err}"
    assert says.lower() in err.lower(), err


def test_a_recipe_file_that_is_not_utf8_is_named(contained, tmp_path, monkeypatch):
    import shutil

    from workbench.recipes.catalog import default_recipes_dir

    root = tmp_path / "recipes"
    shutil.copytree(default_recipes_dir(), root)
    bad = sorted((root / "models").rglob("*.yaml"))[0]
    bad.write_bytes(bad.read_bytes() + b"\n# caf\xe9\n")
    monkeypatch.setenv("WORKBENCH_RECIPES_DIR", str(root))
    code, err = check_case(["render"])
    assert code == 2
    assert str(bad) in err and "not UTF-8" in err and "0xe9" in err


def test_hostile_state_records_are_skipped_and_nothing_else_is_signalled(contained, tmp_path):
    """Records naming a live process that is not a server the workbench started: status
    and stop report them and leave that process alone."""
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        state = tmp_path / "state"
        records = [
            [1, 2, 3],
            "text",
            {"pid": bystander.pid},
            {"pid": bystander.pid, "pgid": bystander.pid, "status": "ready", "port": 8000, "mode": "local"},
            {"pid": bystander.pid, "pgid": bystander.pid, "status": "zombie", "port": "x", "mode": "local",
             "pid_started_at": 1.0},
            {"pid": bystander.pid, "pgid": bystander.pid, "status": "ready", "port": 8001, "mode": "local",
             "pid_started_at": 1.0, "log_path": "/etc/passwd", "host": "127.0.0.1", "base_url": "http://x"},
            {"pid": -1, "pgid": 0, "status": "ready", "port": 8002},
        ]
        for i, record in enumerate(records):
            folder = state / f"local-127.0.0.1-{9000 + i}"
            folder.mkdir(parents=True)
            (folder / "state.json").write_text(json.dumps(record))
        (state / "local-127.0.0.1-9100").mkdir()
        (state / "local-127.0.0.1-9100" / "state.json").write_bytes(b"\xff{")
        for argv in (["status"], ["status", "--json"], ["status", "--log", "5"], ["stop"], ["stop", "--port", "8001"],
                     ["chat", "hello"], ["metrics", "--count", "1"], ["bench", "--num-prompts", "1"]):
            code, err = check_case(argv)
            assert "root:" not in err  # /etc/passwd is outside the record's folder: never printed
        assert bystander.poll() is None, "stop signalled a process it did not start"
    finally:
        bystander.kill()
        bystander.wait()


def test_the_fuzz_harness_sees_a_traceback(contained, monkeypatch):
    """The harness itself: a command that raises is caught as a failure, not passed."""
    import workbench.cli.render

    def broken(_args):
        raise KeyError("boom")

    parser_func = workbench.cli.render.render_command
    monkeypatch.setattr(workbench.cli.render, "render_command", broken)
    with pytest.raises(KeyError):
        run_cli(["render"])
    monkeypatch.setattr(workbench.cli.render, "render_command", parser_func)
    assert os.environ["WORKBENCH_STATE_DIR"].endswith("state")
    assert Path(os.environ["WORKBENCH_STATE_DIR"]).parent.exists()
