"""`python -m workbench render`: stdout is the command only; notes go to stderr."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import cli
from workbench.cli import render as render_cmd
from workbench.recipes import Selection, render

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recipes import NVFP4, SEED_ARGV, SEED_DOCKER_TEXT, SEED_SERVE_TEXT  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr("workbench.server.hardware.detect", lambda: "cpu")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["render", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_is_the_seed_command(capsys):
    code, out, err = run(capsys, "--hardware", "h200")
    assert code == 0 and out == SEED_SERVE_TEXT + "\n"
    assert "note: single_node_tp declares VLLM_ALLREDUCE_USE_FLASHINFER=1" in err
    assert "install: uv venv && source .venv/bin/activate && uv pip install -U vllm --torch-backend auto" in err


def test_a_docker_render_names_what_the_image_needs_not_host_installs(capsys):
    code, out, err = run(capsys, "--hardware", "dgx_spark_gb10", "--format", "docker")
    assert code == 0 and out.startswith("docker run")
    assert "install:" not in err  # the host needs docker, not a venv
    assert "in the image: vllm/vllm-openai:nightly lacks what this command needs; build FROM it and RUN: " \
           "uv pip install fastsafetensors" in err


def test_recipe_without_hardware_uses_recipe_default(capsys):
    code, out, _ = run(capsys, "--recipe", "nemotron-3.5-lightning")
    assert out == SEED_SERVE_TEXT + "\n"


def test_docker_format(capsys):
    code, out, err = run(capsys, "--hardware", "h200", "--format", "docker")
    assert out == SEED_DOCKER_TEXT + "\n"


def test_shell_format_is_one_line(capsys):
    code, out, _ = run(capsys, "--hardware", "h200", "--format", "shell")
    assert out.count("\n") == 1 and out.split() == SEED_ARGV


def test_json_format_is_the_plan(capsys):
    code, out, err = run(capsys, "--hardware", "h200", "--format", "json")
    plan = json.loads(out)
    assert plan["argv"] == SEED_ARGV and plan["hardware"] == "h200" and plan["engine"] == "vllm"
    assert plan["provenance"]["--moe-backend"] == "hardware:hopper"
    assert plan["selection"]["features"] == ["reasoning", "tool_calling", "mamba_fast_ssm_cache"]
    assert err == ""


def test_default_hardware_is_detected_cpu_demo(capsys):
    code, out, err = run(capsys)
    assert out.startswith("VLLM_CPU_KVCACHE_SPACE=1 vllm serve HuggingFaceTB/SmolLM2-135M-Instruct \\\n")
    assert "GPU-only" in err and "SmolLM2" in err


def test_fallbacks_go_to_stderr(capsys):
    code, out, err = run(capsys, "--recipe", "nemotron", "--variant", "bf16", "--spec", "dspark")
    assert code == 0 and "fallback: spec 'dspark' -> mtp: no DSpark draft" in err
    assert '"method":"mtp"' in out and "fallback" not in out


def test_typo_is_a_clean_error(capsys):
    code, out, err = run(capsys, "--hardware", "h201")
    assert code == 2 and out == ""
    assert "error: unknown hardware 'h201'; did you mean 'h200'?" in err
    assert "valid hardware values: h100, h200" in err


def test_multi_node_prints_worker_commands(capsys):
    code, out, _ = run(capsys, "--recipe", "nemotron", "--strategy", "multi_node_tp", "--nodes", "2")
    head, worker = out.split("\n\n# worker node 1\n")
    assert "--node-rank 0" in head and "--headless" in worker and "--node-rank 1" in worker


def test_preset_and_extra(capsys):
    code, out, _ = run(capsys, "--preset", "low_latency", "--extra", "--max-num-batched-tokens 4096",
                       "--port", "9000", "--format", "shell")
    argv = out.split()
    assert argv[:5] == ["vllm", "serve", NVFP4, "--no-enable-prefix-caching", "--async-scheduling"]
    assert argv[-5:] == ["--enable-auto-tool-choice", "--port", "9000", "--max-num-batched-tokens", "4096"]
    assert argv.count("--max-num-batched-tokens") == 1


def test_trtllm_preset_prints_its_config(capsys):
    code, out, err = run(capsys, "--preset", "trtllm_mtp")
    assert out.startswith(f"trtllm-serve {NVFP4} \\\n  --max_batch_size 8")
    assert "config file nemotron-35-lightning-nvfp4-mtp.yaml:" in err and "Another engine" in err


def test_list(capsys):
    code, out, _ = run(capsys, "--list")
    for word in ("Recipes:", "Hardware:", "dgx_spark_gb10", "Strategies:", "multi_node_tep", "Variants:",
                 "bf16", "Features", "[opt-in]", "Spec modes", "dspark", "Presets", "trtllm_mtp",
                 "HuggingFaceTB/SmolLM2-135M-Instruct"):
        assert word in out


def test_selection_helpers_are_reusable():
    parser = argparse.ArgumentParser()
    render_cmd.add_selection_arguments(parser)
    args = parser.parse_args(["--features", "reasoning, spec_decoding", "--extra", "--a 1", "--extra=--b",
                              "--nodes", "2", "--port", "8001"])
    sel = render_cmd.selection_from_args(args, detect=lambda: "h100")
    assert sel == Selection(hardware="h100", features=["reasoning", "spec_decoding"], nodes=2, port=8001,
                            extra=["--a 1", "--b"])
    # A named recipe keeps its own hardware choice, but learns the machine's: a GPU machine serves
    # the demo recipe on its GPU, a CPU machine keeps Nemotron's default GPU for the command.
    args = parser.parse_args(["--recipe", "smollm2"])
    sel = render_cmd.selection_from_args(args, detect=lambda: "h100")
    assert sel.hardware is None and sel.detected_hardware == "h100"
    assert render(sel).hardware == "h100" and "--enforce-eager" not in render(sel).argv
    args = parser.parse_args(["--recipe", "nemotron"])
    sel = render_cmd.selection_from_args(args, detect=lambda: "cpu")
    assert render(sel).hardware == "h200" and render(sel).fallbacks == []
    args = parser.parse_args(["--preset", "max_throughput"])
    assert render_cmd.selection_from_args(args, detect=lambda: 1 / 0).detected_hardware is None


def test_subprocess_render_h200():
    proc = subprocess.run([sys.executable, "-m", "workbench", "render", "--hardware", "h200"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == SEED_SERVE_TEXT + "\n"
    assert "note:" in proc.stderr
