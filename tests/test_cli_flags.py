"""One meaning per flag: --server-port is vLLM's port everywhere, --port is what the command
serves, a flag that cannot apply is refused with a message, old spellings still work (and say
so), and --extra explains the quoting when its JSON lost its quotes."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import build_parser, main

REPO = Path(__file__).resolve().parent.parent


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _argv(shell_line: str) -> list[str]:
    return shlex.split(shell_line)


@pytest.mark.parametrize("argv", [
    ["serve", "--attach", "http://127.0.0.1:9", "--server-port", "9000"],
    ["serve", "--attach", "http://127.0.0.1:9", "--port", "9000"],
    ["workshop", "--attach", "http://127.0.0.1:9", "--server-port", "9000"],
])
def test_a_server_port_beside_attach_is_refused_before_anything_is_contacted(capsys, argv):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and "--server-port cannot apply with --attach" in err and "Drop --server-port" in err


def test_serve_refuses_launch_options_beside_attach(capsys):
    code, _, err = _cli(capsys, "serve", "--attach", "http://127.0.0.1:9", "--mode", "docker")
    assert code == 2 and "--mode cannot apply with --attach" in err


def test_the_workshop_s_port_is_its_own_and_vllm_s_is_server_port():
    parser = build_parser()
    args = parser.parse_args(["workshop", "--port", "9100", "--server-port", "8100", "--hardware", "cpu"])
    assert args.port == 9100 and args.server_port == 8100
    assert parser.parse_args(["workshop"]).port == 7860


def test_old_spellings_still_work_and_say_the_new_one(capsys):
    parser = build_parser()
    assert parser.parse_args(["workshop", "--app-port", "9101"]).port == 9101
    assert "--app-port is now spelled --port" in capsys.readouterr().err
    assert parser.parse_args(["stop", "--port", "8001"]).server_port == 8001
    assert "--port is now spelled --server-port" in capsys.readouterr().err
    code, out, err = _cli(capsys, "render", "--hardware", "cpu", "--port", "9001", "--format", "json")
    assert code == 0 and '"9001"' in out and "--port is now spelled --server-port" in err
    code, out, err = _cli(capsys, "render", "--hardware", "cpu", "--server-port", "9002", "--format", "json")
    assert code == 0 and '"9002"' in out and "spelled" not in err
    # `serve` serves vLLM itself: there --port is that port, and no note.
    assert parser.parse_args(["serve", "--port", "9003"]).server_port == 9003
    assert "spelled" not in capsys.readouterr().err


def test_json_in_extra_that_lost_its_quotes_is_explained_and_the_quoting_it_suggests_works(capsys):
    # What a user types in a shell, as the shell hands it over.
    lost = _argv("""render --hardware cpu --extra '--speculative-config {"method":"ngram","num_speculative_tokens":3}'""")
    code, out, err = _cli(capsys, *lost)
    assert code == 2 and out == ""
    assert "{method:ngram,num_speculative_tokens:3}" in err and "single quotes" in err
    suggested = err.split("e.g. ", 1)[1].strip()  # --extra "--speculative-config '{\"method\": \"ngram\"}'"
    code, out, err = _cli(capsys, "render", "--hardware", "cpu", "--format", "json", *_argv(suggested))
    argv = json.loads(out)["argv"]
    assert code == 0 and argv[argv.index("--speculative-config") + 1] == '{"method": "ngram"}'


def test_the_refusal_reaches_a_real_command_line_without_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "workbench", "workshop", "--attach", "http://127.0.0.1:9",
                           "--server-port", "9000"], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "WORKBENCH_STATE_DIR": str(tmp_path)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--server-port cannot apply with --attach" in proc.stderr
