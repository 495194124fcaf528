"""A multi-turn session workload against a real vLLM (CPU build, SmolLM2, prefix caching
on by default, --enable-prompt-tokens-details): cached tokens rise turn by turn, and the
requests' own cached tokens agree with the server's /metrics counters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.bench import BenchConfig, load_result, run_benchmark
from workbench.bench.report import format_result

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent


def test_four_sessions_of_four_turns_hit_the_prefix_cache_more_each_turn(demo_server, artifacts_dir: Path) -> None:
    # 4 x 4 (16 requests): three turns that resend a growing history are enough to see the cache
    # serve more each turn; 8 x 6 took over three minutes on a 2-core CI machine.
    warnings: list[str] = []
    config = BenchConfig(url=demo_server.base_url, workload="multiturn", sessions=4, turns=4, input_tokens=200,
                         output_tokens=16, turn_input_tokens=64, warmup_requests=1, seed=26)
    result = run_benchmark(config, on_warning=warnings.append)
    s = result.summary
    assert warnings == []  # prefix caching is on: nothing to warn of
    assert (s.requests, s.succeeded, s.errors) == (16, 16, 0)
    for session in range(4):
        records = sorted((r for r in result.records if r.session == session), key=lambda r: r.turn)
        cached = [r.cached_tokens for r in records]
        assert None not in cached, "vLLM returned no prompt_tokens_details.cached_tokens"
        # Each turn resends the last one's prompt and answer: at least as much is cached, and more by the end.
        assert cached == sorted(cached) and cached[-1] > cached[0]
        assert all(c < r.prompt_tokens for c, r in zip(cached, records))
    rows = s.per_turn
    assert [row["turn"] for row in rows] == [1, 2, 3, 4]
    assert rows[-1]["cached_tokens_mean"] > rows[0]["cached_tokens_mean"]
    assert rows[-1]["context_tokens_max"] > rows[0]["context_tokens_max"] + 3 * 64
    # The requests' cached tokens and the server's counters tell the same story.
    assert s.prefix_cache_hit_rate is not None and s.prefix_cache_hit_rate_metrics is not None
    assert abs(s.prefix_cache_hit_rate - s.prefix_cache_hit_rate_metrics) <= 0.02
    assert s.prefix_cache_hit_rate > 0.3
    text = format_result(result)
    assert "agree within 2 points" in text and "turn 4 against turn 1: TTFT" in text
    (artifacts_dir / "bench-multiturn.txt").write_text(text)


def test_multiturn_from_the_command_line_writes_per_turn_figures(demo_server, artifacts_dir: Path) -> None:
    out = artifacts_dir / "bench-agentic"
    done = subprocess.run([sys.executable, "-m", "workbench", "bench", "--url", demo_server.base_url,
                           "--workload", "agentic", "--sessions", "2", "--turns", "3", "--isl", "160",
                           "--turn-isl", "140", "--tool-call-osl", "8", "--warmup", "0", "--quiet",
                           "--output-dir", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "workload agentic: 2 sessions x 3 turns" in done.stdout
    assert "by turn (means over the sessions):" in done.stdout
    result = load_result(out / "bench.json")
    assert [(r.session, r.turn) for r in result.records] == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    assert (out / "bench-turns.csv").read_text().startswith("turn,")
    assert "Session workload by turn" in (out / "bench-figures.html").read_text()
