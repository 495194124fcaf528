"""The workbench benchmark agrees with aiperf on a real vLLM server.

aiperf 0.13.0 lives in its own venv (scripts/install.sh --test puts it at
<repo>/.venv-aiperf; AIPERF_BIN overrides). Both tools send the same shape to
the same SmolLM2 server back to back: workbench, aiperf, workbench.

Tolerances. Counts are exact: requests, per-request and total input tokens, total
output tokens. Timings cannot be: SmolLM2 runs on 2 cores shared with the load
generators (aiperf alone starts ~10 worker processes, which take CPU from the
engine while it runs) and with whatever else runs on the box, so two workbench
runs a minute apart already differ by up to ~30 %. aiperf's output tok/s and
mean TTFT must fall within the range the two workbench runs span, widened by a
factor of 2 (output tok/s) and 2.5 (TTFT, the noisier one: it is the queueing
delay of a 2-request batch). What would fail: a definition that differs (e.g.
E2E or TTFT measured to the wrong event, tokens counted from chunks, duration
from the wrong end), which shifts the figures by a fixed factor, not noise, and
the exact counts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from workbench.bench import BenchConfig, run_benchmark

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent
SHAPE = {"isl": 128, "osl": 32, "concurrency": 2, "requests": 8}
OUTPUT_FACTOR = 2.0
TTFT_FACTOR = 2.5


def aiperf_bin() -> Path:
    path = Path(os.environ.get("AIPERF_BIN", ROOT / ".venv-aiperf" / "bin" / "aiperf"))
    if not path.is_file():
        pytest.fail(f"aiperf is not installed at {path}: run `bash scripts/install.sh --test` "
                    "(or set AIPERF_BIN to an aiperf 0.13.0 binary)")
    return path


def run_aiperf(server, out: Path) -> dict:
    argv = [
        str(aiperf_bin()), "profile",
        "--model", server.model, "--url", server.base_url,
        "--endpoint-type", "chat", "--streaming",
        "--use-server-token-count", "--per-chunk-usage",
        "--tokenizer", str(server.model_dir),
        "--isl", str(SHAPE["isl"]), "--osl", str(SHAPE["osl"]),
        "--extra-inputs", "ignore_eos:true",
        "--concurrency", str(SHAPE["concurrency"]), "--request-count", str(SHAPE["requests"]),
        "--warmup-request-count", "1",
        "--ui-type", "none", "--artifact-dir", str(out),
    ]
    env = dict(os.environ)
    # The tokenizer is a local folder, so nothing is downloaded; aiperf runs without
    # the offline switches the vLLM servers get (it may refuse a local path under them).
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=out.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "profile_export_aiperf.json").read_text())


def test_workbench_agrees_with_aiperf(demo_server, artifacts_dir: Path) -> None:
    out = artifacts_dir / "aiperf-smollm2"
    out.mkdir(exist_ok=True)

    def workbench(input_tokens: int):
        config = BenchConfig(url=demo_server.base_url, input_tokens=input_tokens, output_tokens=SHAPE["osl"],
                             concurrency=SHAPE["concurrency"], requests=SHAPE["requests"], warmup_requests=1)
        return run_benchmark(config)

    # aiperf's --isl counts the text; the server adds its chat template. Our first run
    # uses the template's length as measured by the server, the same as aiperf's run gets.
    probe = workbench(SHAPE["isl"] + 30)
    theirs = run_aiperf(demo_server, out)
    server_isl = int(theirs["input_sequence_length"]["avg"])
    assert theirs["input_sequence_length"]["min"] == theirs["input_sequence_length"]["max"] == server_isl
    first = probe if server_isl == SHAPE["isl"] + 30 else workbench(server_isl)
    second = workbench(server_isl)

    # Exact: the same requests, the same tokens.
    assert int(theirs["request_count"]["avg"]) == SHAPE["requests"]
    assert theirs.get("error_request_count") is None or theirs["error_request_count"]["avg"] == 0
    for ours in (first, second):
        s = ours.summary
        assert (s.requests, s.succeeded, s.errors) == (SHAPE["requests"], SHAPE["requests"], 0)
        assert s.input_tokens == int(theirs["total_isl"]["avg"]) == SHAPE["requests"] * server_isl
        assert s.output_tokens == int(theirs["total_osl"]["avg"]) == SHAPE["requests"] * SHAPE["osl"]
        assert ours.input_length_mismatches == 0

    def bracket(values: list[float], factor: float) -> tuple[float, float]:
        return min(values) / factor, max(values) * factor

    ours_tok_s = [first.summary.output_tok_s, second.summary.output_tok_s]
    ours_ttft = [first.summary.ttft_ms.mean, second.summary.ttft_ms.mean]
    their_tok_s = theirs["output_token_throughput"]["avg"]
    their_ttft = theirs["time_to_first_token"]["avg"]
    report = {
        "shape": {**SHAPE, "server_isl": server_isl},
        "aiperf": {
            "output_tok_s": their_tok_s,
            "ttft_mean_ms": their_ttft,
            "e2e_mean_ms": theirs["request_latency"]["avg"],
            "tpot_mean_ms": theirs["inter_token_latency"]["avg"],
            "decode_tok_s_per_user": theirs["output_token_throughput_per_user"]["avg"],
            "prefill_tok_s_per_user": theirs["prefill_throughput_per_user"]["avg"],
            "duration_s": theirs["benchmark_duration"]["avg"],
        },
        "workbench": [
            {
                "output_tok_s": r.summary.output_tok_s,
                "ttft_mean_ms": r.summary.ttft_ms.mean,
                "e2e_mean_ms": r.summary.e2e_ms.mean,
                "tpot_mean_ms": r.summary.tpot_ms.mean,
                "decode_tok_s_per_user": r.summary.decode_tok_s_per_user.mean,
                "prefill_tok_s_per_user": r.summary.prefill_tok_s_per_user.mean,
                "duration_s": r.summary.duration_s,
            }
            for r in (first, second)
        ],
    }
    (artifacts_dir / "bench-vs-aiperf.json").write_text(json.dumps(report, indent=1))
    low, high = bracket(ours_tok_s, OUTPUT_FACTOR)
    assert low <= their_tok_s <= high, report
    low, high = bracket(ours_ttft, TTFT_FACTOR)
    assert low <= their_ttft <= high, report
