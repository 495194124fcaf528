"""The metrics core against real `vllm serve` processes (vLLM's CPU build).

Requests use `max_tokens` with `ignore_eos`, so each generates exactly max_tokens, and
the counts the server's /metrics shows are checked against what the clients received.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests.helpers.vllm_servers import RunningServer
from workbench.metrics import NOT_REPORTED, MetricsPoller, derive_figures

pytestmark = pytest.mark.vllm

INTERVAL_S = 0.5


def run_requests(server, prompts: list[str], max_tokens: int, concurrency: int) -> list:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)

    def one(prompt: str):
        return client.chat.completions.create(
            model=server.model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=0,
            extra_body={"ignore_eos": True},
        )

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, prompts))


def wait_for_scrapes(poller: MetricsPoller, after: float, count: int = 1) -> None:
    deadline = time.monotonic() + 30
    while sum(s.taken_at > after for s in poller.snapshots()) < count:
        assert time.monotonic() < deadline, f"the poller stopped scraping: {poller.last_error}"
        time.sleep(0.05)


def test_counts_match_the_clients_and_the_decode_rate_agrees(demo_server, artifacts_dir: Path):
    max_tokens, requests, concurrency = 64, 6, 3
    prompts = [f"Write a short story about the number {i}." for i in range(requests)]
    run_requests(demo_server, prompts[:1], 4, 1)  # warm up outside the measured window

    with MetricsPoller(demo_server.base_url, interval=INTERVAL_S, window=2.0) as poller:
        wait_for_scrapes(poller, after=0, count=2)
        t_start = time.time()
        responses = run_requests(demo_server, prompts, max_tokens, concurrency)
        t_end = time.time()
        wait_for_scrapes(poller, after=t_end + 0.05)
        time.sleep(1.5)  # quiet: every counter has settled
        wait_for_scrapes(poller, after=time.time())
    assert poller.last_error is None
    snapshots = poller.snapshots()

    completion_tokens = sum(r.usage.completion_tokens for r in responses)
    prompt_tokens = sum(r.usage.prompt_tokens for r in responses)
    assert completion_tokens == requests * max_tokens  # ignore_eos: exactly max_tokens each

    # Counts: from the last scrape before the first request to the last (settled) one.
    first = max(i for i, s in enumerate(snapshots) if s.taken_at <= t_start)
    settled = derive_figures(snapshots[first:])
    assert settled.generation_tokens == completion_tokens
    assert settled.prompt_tokens == prompt_tokens
    assert settled.finished_by_reason["length"] == requests and settled.finished == requests
    assert settled.e2e.count == requests and settled.ttft.count == requests
    assert settled.tpot.count == requests
    assert settled.itl.count == requests * (max_tokens - 1)  # one gap between each two tokens
    assert not settled.counter_reset

    # Rate: the poller's window [a, b] holds the clients' span [t_start, t_end], with a the
    # last scrape before it and b the first after it. It counts the same tokens over a
    # span longer by the overhang at each end, at most one scrape interval each (plus the
    # time a scrape takes on this busy 2-core machine: 0.5 s allowed in all). So the
    # poller's rate is at most the clients' and at least clients' * T / (T + 2*interval + 0.5).
    last = min(i for i, s in enumerate(snapshots) if s.taken_at >= t_end + 0.05)
    window = derive_figures(snapshots[first : last + 1])
    client_span = t_end - t_start
    client_rate = completion_tokens / client_span
    lower_bound = client_rate * client_span / (client_span + 2 * INTERVAL_S + 0.5)
    (artifacts_dir / "metrics_rate_check.json").write_text(
        json.dumps(
            {
                "client_span_s": client_span,
                "client_decode_tps": client_rate,
                "poller_window_s": window.window_s,
                "poller_decode_tps": window.decode_tps,
                "lower_bound_tps": lower_bound,
                "completion_tokens": completion_tokens,
                "prompt_tokens": prompt_tokens,
            },
            indent=2,
        )
    )
    assert window.generation_tokens == completion_tokens
    assert window.decode_tps <= client_rate
    assert window.decode_tps >= lower_bound
    assert poller.derive(window.window_s - 1e-6, until=window.window_end).decode_tps == pytest.approx(
        window.decode_tps
    )

    # While the requests ran, the live rows showed them.
    during = [f for f in poller.figures() if t_start < f.window_end <= t_end]
    assert during, "no scrape fell inside the run"
    assert max(f.decode_tps for f in during) > 0
    assert max(f.running for f in during) >= 1
    assert all(f.running <= concurrency and f.waiting == 0 for f in during)
    # The demo server has no speculative decoding: not reported, never 0.
    assert settled.spec_acceptance_rate is None
    assert settled.display("spec_acceptance_rate") == NOT_REPORTED
    assert "prefill_tps" not in settled.not_reported


def test_metrics_command_draws_a_table_and_writes_csv(demo_server, tmp_path: Path):
    csv_path, json_path = tmp_path / "series.csv", tmp_path / "series.json"
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "metrics", "--url", demo_server.base_url,
         "--interval", str(INTERVAL_S), "--count", "3", "--csv", str(csv_path), "--json", str(json_path)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("vLLM metrics  http://127.0.0.1:") == 3
    assert "since the server started" in done.stdout  # the first scrape
    assert "(2 scrapes)" in done.stdout and "decode " in done.stdout
    assert "spec decode  acceptance not reported" in done.stdout
    assert "\x1b[" not in done.stdout  # not a terminal: no redraw codes
    # the GPUs beside the server, read each scrape; on a machine without one, said plainly
    from workbench.telemetry import read_gpus

    here = read_gpus()
    gpu_lines = [ln for ln in done.stdout.splitlines() if ln.startswith("  GPU")]
    assert len(gpu_lines) == 3 * max(1, len(here.gpus))
    if not here.gpus:
        assert all("no NVIDIA GPU on this machine" in ln for ln in gpu_lines)
    rows = list(csv.DictReader(csv_path.open()))
    figures = json.loads(json_path.read_text())["figures"]
    assert len(rows) == 3 and len(figures) == 3
    # The same three scrapes, exported two ways: the first counts since the server started,
    # the later ones over the window between scrapes.
    assert [r["basis"] for r in rows] == [f["basis"] for f in figures] == ["since_start", "window", "window"]
    for row, figure in zip(rows, figures):
        assert float(row["decode_tps"]) == pytest.approx(figure["decode_tps"])
        assert float(row["generation_tokens"]) == pytest.approx(figure["generation_tokens"])
    assert float(rows[2]["window_s"]) == pytest.approx(2 * INTERVAL_S, abs=INTERVAL_S)
    assert f"wrote {csv_path}" in done.stderr


@pytest.fixture
def ngram_server(recipe_ngram_server: RunningServer) -> RunningServer:
    """SmolLM2 with the CPU recipe's ngram (prompt-lookup) speculative decoding, started once per
    session (tests/helpers/session_fixtures.py) and shared with test_server_figures_live.py."""
    return recipe_ngram_server


def num_speculative_tokens(server: RunningServer) -> int:
    """The drafts' length, read from the command line the server was started with."""
    argv = server.handle.argv
    return int(json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"])


def test_spec_decode_figures_from_an_ngram_server(ngram_server, artifacts_dir: Path):
    # Asking to copy repeated text makes the output repeat the prompt's n-grams, which is
    # what prompt-lookup drafts guess.
    passage = "The quick brown fox jumps over the lazy dog. " * 6
    prompts = [f"Copy this text exactly, word for word:\n\n{passage}"] * 3
    drafted = num_speculative_tokens(ngram_server)
    poller = MetricsPoller(ngram_server.base_url, interval=INTERVAL_S)
    before = poller.scrape_once()
    assert before.not_reported == ()  # this server exposes vllm:spec_decode_*
    responses = run_requests(ngram_server, prompts, max_tokens=48, concurrency=3)
    time.sleep(1.0)
    figures = poller.scrape_once()
    poller.close()
    (artifacts_dir / "metrics_spec_decode_check.json").write_text(json.dumps(figures.to_dict(), indent=2))

    assert figures.basis == "window" and not figures.counter_reset
    assert figures.generation_tokens == sum(r.usage.completion_tokens for r in responses)
    drafts, draft_tokens, accepted = figures.spec_drafts, figures.spec_draft_tokens, figures.spec_accepted_tokens
    assert drafts > 0 and draft_tokens > 0
    assert 0 < accepted <= draft_tokens <= drafted * drafts
    assert 0 < figures.spec_acceptance_rate <= 1
    assert 1 <= figures.spec_mean_acceptance_length <= drafted + 1
    by_position = figures.spec_acceptance_by_position
    assert len(by_position) == drafted
    assert all(0 <= rate <= 1 for rate in by_position)
    # Per-position acceptances add up to the accepted tokens.
    assert sum(rate * drafts for rate in by_position) == pytest.approx(accepted)
    assert figures.display("spec_acceptance_rate").endswith("%")
