"""The rehearsal: the Nemotron recipe's own command, served with a tiny local stand-in on any GPU.

What it keeps and swaps (each swap with its reason) for what the machine has; the known
problem that makes a command certain to fail, refused at render time unless ignored; the
stand-in model's build (the real 52-layer pattern, MoE, BF16, Nemotron's special tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench import cli
from workbench.demo.models import FORCING_SPECIAL_TOKENS
from workbench.demo.rehearsal import REHEARSAL_CONFIG, build_rehearsal_model
from workbench.errors import SelectionError
from workbench.recipes import LaunchPlan, Selection, load_catalog, provenance_rows, render
from workbench.recipes.rehearsal import MachineFacts, rehearse

NEMOTRON = "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"
SR = "stochastic-rounding-triton-needs-sm100"
# The lent H100's vLLM 0.26.0 (no FlashInfer carried): its flags less the one 0.26.0 lacks.
VLLM_026 = MachineFacts("0.26.0", None, ())


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _rehearsal(catalog, facts: MachineFacts = VLLM_026, **selection) -> LaunchPlan:
    return render(Selection(rehearsal=True, machine=facts, **{"hardware": "h100", **selection}), catalog)


def test_the_h100_command_keeps_what_runs_and_says_why_for_each_swap(catalog) -> None:
    seed = render(Selection(hardware="h100"), catalog)
    plan = _rehearsal(catalog)
    assert plan.local_build == "nemotron-h-rehearsal" and plan.served_model_name == NEMOTRON == plan.argv[2]
    removed = {s.flag: s for s in plan.rehearsal_swaps if s.now is None}
    assert set(removed) == {"--quantization", "--moe-backend", "--linear-backend", "--mamba-backend",
                            "--mamba-ssm-cache-dtype", "--enable-mamba-cache-stochastic-rounding",
                            "--mamba-cache-philox-rounds"}
    assert "NVFP4 checkpoint" in removed["--quantization"].reason
    assert "FlashInfer is not installed" in removed["--mamba-backend"].reason
    assert SR in removed["--enable-mamba-cache-stochastic-rounding"].reason
    # Everything else is the seed's, in the seed's order.
    kept = [t for t in seed.argv if t in plan.argv]
    assert plan.argv == kept
    for flag in ("--reasoning-parser", "--tool-call-parser", "--kv-cache-dtype", "--mamba-cache-mode",
                 "--enable-prefix-caching", "--max-num-seqs", "--async-scheduling", "--mamba-ssu-algorithm"):
        assert flag in plan.argv
    assert plan.known_issues == [] and plan.rehearsal


def test_what_the_machine_has_decides(catalog) -> None:
    with_flashinfer = _rehearsal(catalog, MachineFacts("0.28.0", None, ("flashinfer",)))
    assert "--mamba-backend" in with_flashinfer.argv and "--enable-mamba-cache-stochastic-rounding" in \
        with_flashinfer.argv  # FlashInfer's Mamba kernel rounds on any GPU
    flags = tuple(f for f in _every_flag(catalog) if f != "--mamba-ssu-algorithm")
    old_vllm = _rehearsal(catalog, MachineFacts("0.26.0", flags, ()))
    (swap,) = [s for s in old_vllm.rehearsal_swaps if s.flag == "--mamba-ssu-algorithm"]
    assert swap.was == "horizontal" and "vLLM 0.26.0 does not know this flag" in swap.reason
    b200 = _rehearsal(catalog, hardware="b200")  # sm_100 has cvt.rs: the fast SSM cache stays
    assert "--enable-mamba-cache-stochastic-rounding" in b200.argv


def _every_flag(catalog) -> set[str]:
    return {t for t in render(Selection(hardware="h100"), catalog).argv if t.startswith("--")}


def test_presets_and_the_bf16_variant_lose_their_drafters_and_fastokens(catalog) -> None:
    interactive = _rehearsal(catalog, preset="interactive")
    assert not any(t.startswith("--speculative") for t in interactive.argv)
    assert any("drafter" in s.reason for s in interactive.rehearsal_swaps)
    bf16 = _rehearsal(catalog, hardware="h200", variant="bf16", spec="mtp")
    assert "--speculative-config" not in bf16.argv and "VLLM_USE_FASTOKENS" not in bf16.env
    assert any("MTP layers" in s.reason for s in bf16.rehearsal_swaps)


def test_the_flag_table_shows_each_swap(catalog) -> None:
    rows = provenance_rows(_rehearsal(catalog), catalog)
    removed = [r for r in rows if r[2] == "rehearsal"]
    assert ["--quantization", "modelopt_fp4 (removed)", "rehearsal"] in [r[:3] for r in removed]
    assert len(removed) == 7 and all(r[3] for r in removed)


def test_a_rehearsal_round_trips_through_json(catalog) -> None:
    plan = _rehearsal(catalog)
    again = LaunchPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.rehearsal_swaps == plan.rehearsal_swaps and again.rehearsal
    selection = Selection.from_dict(json.loads(json.dumps(Selection(rehearsal=True, machine=VLLM_026).to_dict())))
    assert selection.machine == VLLM_026


def test_only_a_recipe_with_a_stand_in_rehearses_and_only_on_a_gpu(catalog) -> None:
    with pytest.raises(SelectionError, match="has no rehearsal model") as info:
        render(Selection(recipe="smollm2", hardware="h100", rehearsal=True), catalog)
    assert "NVIDIA-Nemotron" in (info.value.hint or "")
    with pytest.raises(SelectionError, match="on an NVIDIA GPU"):
        render(Selection(hardware="h100", preset="trtllm_mtp", rehearsal=True), catalog)


def test_a_certain_failure_is_refused_at_render_unless_ignored(catalog) -> None:
    with pytest.raises(SelectionError) as info:
        render(Selection(hardware="h100", extra=["--mamba-backend triton"]), catalog)
    assert "cannot start" in info.value.message and "cvt.rs" in info.value.message
    assert "--mamba-backend flashinfer" in (info.value.hint or "")
    assert info.value.settings == {"extra": None, "ignore_known_issues": SR}
    ignored = render(Selection(hardware="h100", extra=["--mamba-backend triton"], ignore_known_issues=[SR]), catalog)
    (issue,) = ignored.known_issues
    assert issue.id == SR and issue.certain and "--mamba-backend" in issue.matched
    # Left to vLLM's default backend it is the same; on sm_100 Blackwell it runs.
    with pytest.raises(SelectionError):
        render(Selection(hardware="h200", extra=["--mamba-backend triton"]), catalog)
    assert render(Selection(hardware="b200", extra=["--mamba-backend triton"]), catalog).known_issues == []
    # A rehearsal that keeps it on purpose (to see it happen) carries the known problem.
    kept = render(Selection(hardware="h100", rehearsal=True, machine=VLLM_026, ignore_known_issues=[SR]), catalog)
    assert "--enable-mamba-cache-stochastic-rounding" in kept.argv and [k.id for k in kept.known_issues] == [SR]


def test_the_cli_says_what_to_change(capsys) -> None:
    assert cli.main(["render", "--hardware", "h100", "--extra", "--mamba-backend triton"]) == 2
    err = capsys.readouterr().err
    assert "error: This command cannot start" in err and "--ignore-known-issue" in err
    assert cli.main(["render", "--hardware", "h100", "--rehearsal", "--format", "shell"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"vllm serve {NEMOTRON} ") and "--quantization" not in captured.out
    assert "rehearsal: removed --quantization modelopt_fp4:" in captured.err


def test_rehearse_is_pure() -> None:
    argv = ["vllm", "serve", "m", "--quantization", "modelopt_fp4", "--max-num-seqs", "8"]
    first = rehearse(argv, {}, VLLM_026, hardware="h100", generation="hopper")
    assert first == rehearse(argv, {}, VLLM_026, hardware="h100", generation="hopper")
    assert first[0] == ["vllm", "serve", "m", "--max-num-seqs", "8"] and argv[3] == "--quantization"


def test_the_stand_in_has_nemotrons_shape_and_tokens(tmp_path: Path) -> None:
    built = build_rehearsal_model(tmp_path / "rehearsal", progress=lambda line: None)
    config = json.loads((built.path / "config.json").read_text())
    marker = json.loads((built.path / "workbench-build.json").read_text())
    pattern = REHEARSAL_CONFIG["hybrid_override_pattern"]
    assert config["architectures"] == ["NemotronHForCausalLM"] and config["dtype"] == "bfloat16"
    kinds = {"M": "mamba", "E": "moe", "*": "attention"}
    assert [kinds[c] for c in pattern] == [t.replace("linear_attention", "mamba").replace("full_attention",
                                           "attention") for t in config["layers_block_type"]]
    assert (pattern.count("M"), pattern.count("E"), pattern.count("*")) == (23, 23, 6)
    assert config["n_routed_experts"] == 8 and config["mamba_ssm_cache_dtype"] == "float32"
    assert set(marker["special_token_ids"]) == set(FORCING_SPECIAL_TOKENS)
    assert 40e6 < marker["parameters"] < 60e6
    again = build_rehearsal_model(tmp_path / "rehearsal", progress=lambda line: None)
    assert not again.built_now  # built once
