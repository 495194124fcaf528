"""The metrics core on real recorded /metrics text (vLLM 0.32.0, CPU build).

Expected figures are computed here from the files' numbers, read line by line with a
regex, independently of workbench.metrics: a wrong sum, label or bucket in the code
would not match.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tests.conftest import RECORDED
from workbench.server import free_port
from workbench import metrics
from workbench.cli import main
from workbench.cli.metrics import format_table
from workbench.errors import WorkbenchError
from workbench.metrics.display import PER_ENGINE_LABEL, format_per_engine
from workbench.metrics import (
    NOT_REPORTED,
    SERIES_COLUMNS,
    MetricsError,
    MetricsPoller,
    derive_figures,
    histogram_quantile,
    metrics_url,
    parse_metrics,
    select_window,
)

IDLE = RECORDED / "metrics_idle.prom"
UNDER_LOAD = RECORDED / "metrics_under_load.prom"
SPEC_NGRAM = RECORDED / "metrics_spec_decode_ngram.prom"

SAMPLE_LINE = re.compile(r"^(?P<name>[^\s{]+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$")
SPEC_FIELDS = (
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "spec_acceptance_rate",
    "spec_mean_acceptance_length",
    "spec_acceptance_by_position",
)


def samples(path: Path) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = SAMPLE_LINE.match(line)
        assert match, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        out.append((match["name"], labels, float(match["value"])))
    return out


def value(path: Path, name: str, **labels: str) -> float:
    """The sum of every line of `name` whose labels include `labels`."""
    found = [v for n, lbl, v in samples(path) if n == name and labels.items() <= lbl.items()]
    assert found, f"{name} {labels} not in {path.name}"
    return sum(found)


def buckets(path: Path, family: str) -> dict[float, float]:
    return {float(lbl["le"]): v for n, lbl, v in samples(path) if n == f"{family}_bucket"}


def reference_quantile(q: float, cumulative: dict[float, float]) -> float:
    """Prometheus' histogram_quantile written out plainly, for the expected values."""
    bounds = sorted(cumulative)
    rank = q * cumulative[float("inf")]
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if bound == float("inf"):
                return previous_bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (count - previous_count)
        previous_bound, previous_count = bound, count
    raise AssertionError("unreachable")


def snapshot(path: Path, taken_at: float) -> metrics.Snapshot:
    return parse_metrics(path.read_text(), taken_at)


# --- idle -> under load: one real server, 20 s apart ------------------------------------


@pytest.fixture(scope="module")
def load_window() -> metrics.ThroughputFigures:
    return derive_figures([snapshot(IDLE, 1000.0), snapshot(UNDER_LOAD, 1020.0)])


def test_token_rates_are_counter_deltas_over_the_time_between_scrapes(load_window):
    prompt = value(UNDER_LOAD, "vllm:prompt_tokens_total") - value(IDLE, "vllm:prompt_tokens_total")
    generated = value(UNDER_LOAD, "vllm:generation_tokens_total") - value(IDLE, "vllm:generation_tokens_total")
    assert (prompt, generated) == (5909 - 789, 29522 - 8836)  # the files' numbers, read by eye
    assert load_window.prompt_tokens == prompt
    assert load_window.generation_tokens == generated
    assert load_window.prefill_tps == pytest.approx(prompt / 20)
    assert load_window.decode_tps == pytest.approx(generated / 20)
    assert (load_window.basis, load_window.window_start, load_window.window_end) == ("window", 1000.0, 1020.0)
    assert load_window.window_s == 20 and load_window.scrapes == 2
    assert not load_window.counter_reset


def test_requests_cache_and_finish_reasons(load_window):
    assert load_window.running == value(UNDER_LOAD, "vllm:num_requests_running") == 32
    assert load_window.waiting == value(UNDER_LOAD, "vllm:num_requests_waiting")
    assert load_window.preemptions == 0
    reasons = {lbl["finished_reason"] for n, lbl, _ in samples(UNDER_LOAD) if n == "vllm:request_success_total"}
    expected = {
        reason: value(UNDER_LOAD, "vllm:request_success_total", finished_reason=reason)
        - value(IDLE, "vllm:request_success_total", finished_reason=reason)
        for reason in reasons
    }
    assert load_window.finished_by_reason == expected
    assert expected["length"] == 32 and load_window.finished == 32
    assert load_window.kv_cache_pct == pytest.approx(value(UNDER_LOAD, "vllm:kv_cache_usage_perc") * 100)
    hits = value(UNDER_LOAD, "vllm:prefix_cache_hits_total") - value(IDLE, "vllm:prefix_cache_hits_total")
    queries = value(UNDER_LOAD, "vllm:prefix_cache_queries_total") - value(IDLE, "vllm:prefix_cache_queries_total")
    assert load_window.prefix_cache_hit_rate == pytest.approx(hits / queries)


@pytest.mark.parametrize(
    "field, family",
    [
        ("ttft", "vllm:time_to_first_token_seconds"),
        ("itl", "vllm:inter_token_latency_seconds"),
        ("tpot", "vllm:request_time_per_output_token_seconds"),
        ("e2e", "vllm:e2e_request_latency_seconds"),
    ],
)
def test_latency_mean_and_percentiles_from_bucket_deltas(load_window, field, family):
    before, after = buckets(IDLE, family), buckets(UNDER_LOAD, family)
    delta = {bound: after[bound] - before[bound] for bound in after}
    count = value(UNDER_LOAD, f"{family}_count") - value(IDLE, f"{family}_count")
    total = value(UNDER_LOAD, f"{family}_sum") - value(IDLE, f"{family}_sum")
    summary = getattr(load_window, field)
    assert summary.count == count == delta[float("inf")]
    assert summary.mean_s == pytest.approx(total / count)
    assert summary.p50_s == pytest.approx(reference_quantile(0.5, delta))
    assert summary.p90_s == pytest.approx(reference_quantile(0.9, delta))
    assert summary.p99_s == pytest.approx(reference_quantile(0.99, delta))


def test_ttft_percentiles_worked_by_hand(load_window):
    # TTFT buckets, idle -> under load: le=0.04 cumulative 14 -> 43 (+29),
    # le=0.06 22 -> 78 (+56); 64 requests, so p50's rank 32 lies in (0.04, 0.06].
    before = buckets(IDLE, "vllm:time_to_first_token_seconds")
    after = buckets(UNDER_LOAD, "vllm:time_to_first_token_seconds")
    assert (before[0.04], after[0.04], before[0.06], after[0.06]) == (14, 43, 22, 78)
    assert load_window.ttft.count == 64
    assert load_window.ttft.p50_s == pytest.approx(0.04 + 0.02 * (32 - 29) / (56 - 29))


def test_server_without_spec_decode_reports_not_reported(load_window):
    assert not any(n.startswith("vllm:spec_decode") for n, _, _ in samples(UNDER_LOAD))
    for name in SPEC_FIELDS:
        assert getattr(load_window, name) is None
        assert name in load_window.not_reported
        assert load_window.display(name) == NOT_REPORTED
    assert "decode_tps" not in load_window.not_reported
    table = format_table(load_window, "http://127.0.0.1:8000/metrics")
    assert "acceptance not reported" in table and "decode 1034.3 tok/s" in table


# --- counter resets ---------------------------------------------------------------------


def test_counter_reset_counts_the_new_value_as_the_increase():
    # under load, then the idle text 10 s later: every counter is lower, as after a restart.
    figures = derive_figures([snapshot(UNDER_LOAD, 1000.0), snapshot(IDLE, 1010.0)])
    assert figures.counter_reset
    assert "vllm:generation_tokens_total" in figures.reset_metrics
    assert figures.generation_tokens == value(IDLE, "vllm:generation_tokens_total")
    assert figures.decode_tps == pytest.approx(value(IDLE, "vllm:generation_tokens_total") / 10)
    assert figures.prefill_tps == pytest.approx(value(IDLE, "vllm:prompt_tokens_total") / 10)
    assert figures.prefix_cache_hit_rate == pytest.approx(
        value(IDLE, "vllm:prefix_cache_hits_total") / value(IDLE, "vllm:prefix_cache_queries_total")
    )
    assert figures.ttft.count == value(IDLE, "vllm:time_to_first_token_seconds_count")
    assert figures.ttft.p90_s == pytest.approx(
        reference_quantile(0.9, buckets(IDLE, "vllm:time_to_first_token_seconds"))
    )
    for name in ("prefill_tps", "decode_tps", "preemptions", "finished"):
        assert getattr(figures, name) >= 0


def test_reset_inside_a_longer_window_adds_both_sides():
    figures = derive_figures(
        [snapshot(IDLE, 1000.0), snapshot(UNDER_LOAD, 1010.0), snapshot(IDLE, 1020.0)]
    )
    before_reset = value(UNDER_LOAD, "vllm:generation_tokens_total") - value(IDLE, "vllm:generation_tokens_total")
    assert figures.generation_tokens == before_reset + value(IDLE, "vllm:generation_tokens_total")
    assert figures.decode_tps == pytest.approx(figures.generation_tokens / 20)
    assert figures.counter_reset


def test_no_reset_without_a_drop():
    figures = derive_figures([snapshot(IDLE, 1000.0), snapshot(IDLE, 1005.0)])
    assert not figures.counter_reset and figures.reset_metrics == ()
    assert figures.decode_tps == 0 and figures.generation_tokens == 0
    assert figures.ttft.count == 0 and figures.ttft.p50_s is None
    assert figures.display("ttft") == "no requests"


# --- several engines are summed ---------------------------------------------------------


def two_engine_text() -> str:
    """The under-load text for engine 0 with the idle text's samples as engine 1.

    The files have the same lines in the same order, so each engine-1 line goes right
    after its engine-0 line, inside the same metric family.
    """
    load_lines, idle_lines = UNDER_LOAD.read_text().splitlines(), IDLE.read_text().splitlines()
    assert len(load_lines) == len(idle_lines)
    out = []
    for load_line, idle_line in zip(load_lines, idle_lines, strict=True):
        out.append(load_line)
        if idle_line.startswith("vllm:") and 'engine="0"' in idle_line:
            out.append(idle_line.replace('engine="0"', 'engine="1"'))
    return "\n".join(out) + "\n"


def test_engines_and_label_sets_are_summed():
    two_engines = parse_metrics(two_engine_text(), 1000.0)
    figures = derive_figures([two_engines])
    both = lambda name: value(UNDER_LOAD, name) + value(IDLE, name)  # noqa: E731
    assert two_engines.total("vllm:generation_tokens_total") == both("vllm:generation_tokens_total")
    assert two_engines.total("vllm:num_requests_running") == 32
    assert two_engines.reports("vllm:kv_cache_usage_perc")
    assert not two_engines.reports("vllm:spec_decode_num_drafts_total")
    assert two_engines.total("vllm:spec_decode_num_drafts_total") is None
    assert figures.generation_tokens == both("vllm:generation_tokens_total")
    assert figures.prompt_tokens == both("vllm:prompt_tokens_total")
    assert figures.running == both("vllm:num_requests_running") == 32
    assert figures.finished_by_reason["stop"] == both('vllm:request_success_total') - value(
        UNDER_LOAD, "vllm:request_success_total", finished_reason="length"
    ) - value(IDLE, "vllm:request_success_total", finished_reason="length")
    assert figures.ttft.count == both("vllm:time_to_first_token_seconds_count")
    # KV usage is a fraction per engine: the mean, not the sum.
    assert figures.kv_cache_pct == pytest.approx(
        (value(UNDER_LOAD, "vllm:kv_cache_usage_perc") + value(IDLE, "vllm:kv_cache_usage_perc")) / 2 * 100
    )


def test_decode_rate_per_engine_reads_the_same_in_every_view():
    # Two engines idle, then engine 0 under load and engine 1 still idle, 10 s apart.
    first = parse_metrics("\n".join(
        out for line in IDLE.read_text().splitlines()
        for out in ([line, line.replace('engine="0"', 'engine="1"')] if line.startswith("vllm:") and 'engine="0"' in line
                    else [line])) + "\n", 1000.0)
    figures = derive_figures([first, parse_metrics(two_engine_text(), 1010.0)])
    per_engine = figures.decode_tps_by_engine
    assert per_engine is not None and sorted(per_engine) == ["0", "1"]
    assert per_engine["0"] > 0 and per_engine["1"] == 0
    assert figures.decode_tps == pytest.approx(sum(per_engine.values()))
    shown = format_per_engine(per_engine)
    assert shown == f"engine 0 {per_engine['0']:.1f}, engine 1 0.0 (sum {figures.decode_tps:.1f})"
    from workbench.ui.room_tab import server_markdown
    from workbench.ui.throughput_tab import figures_markdown

    assert f"| {PER_ENGINE_LABEL} | {shown} |" in figures_markdown(figures)
    assert f"{PER_ENGINE_LABEL} **{shown}**" in server_markdown(figures, None)
    assert format_per_engine({"0": 12.0}) is None  # one engine: the decode row says it all


# --- speculative decoding (ngram server) ------------------------------------------------


def test_spec_decode_figures_since_the_server_started():
    figures = derive_figures([snapshot(SPEC_NGRAM, 1796222100.0)])
    drafts = value(SPEC_NGRAM, "vllm:spec_decode_num_drafts_total")
    draft_tokens = value(SPEC_NGRAM, "vllm:spec_decode_num_draft_tokens_total")
    accepted = value(SPEC_NGRAM, "vllm:spec_decode_num_accepted_tokens_total")
    assert (drafts, draft_tokens, accepted) == (1497, 4296, 45)
    assert figures.basis == "since_start"
    assert figures.spec_acceptance_rate == pytest.approx(accepted / draft_tokens)
    assert figures.spec_mean_acceptance_length == pytest.approx(1 + accepted / drafts)
    per_position = [
        value(SPEC_NGRAM, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)) / drafts
        for p in range(3)
    ]
    assert figures.spec_acceptance_by_position == pytest.approx(tuple(per_position))
    assert figures.not_reported == ()
    # "Since start" begins at the earliest `_created` of the counters.
    created = min(v for n, _, v in samples(SPEC_NGRAM) if n.startswith("vllm:") and n.endswith("_created"))
    assert figures.window_start == created
    assert figures.decode_tps == pytest.approx(value(SPEC_NGRAM, "vllm:generation_tokens_total") / (1796222100.0 - created))
    assert figures.display("spec_acceptance_rate") == f"{accepted / draft_tokens * 100:.1f} %"


def test_restart_seen_by_created_time_even_when_counters_grew():
    # Idle, then the spec-decode server's text: a different server (its counters were
    # created later), so its values are all new even where they are higher.
    figures = derive_figures([snapshot(IDLE, 1000.0), snapshot(SPEC_NGRAM, 1010.0)])
    assert figures.counter_reset
    assert figures.spec_draft_tokens == value(SPEC_NGRAM, "vllm:spec_decode_num_draft_tokens_total")
    assert figures.e2e.count == value(SPEC_NGRAM, "vllm:e2e_request_latency_seconds_count")


# --- histogram_quantile's edge cases, as Prometheus answers them -------------------------


def test_histogram_quantile_edges():
    inf = float("inf")
    assert histogram_quantile(0.5, [(1.0, 0.0), (inf, 0.0)]) is None  # no observations
    assert histogram_quantile(0.5, [(1.0, 4.0)]) is None  # no +Inf bucket
    assert histogram_quantile(0.99, [(1.0, 1.0), (2.0, 1.0), (inf, 10.0)]) == 2.0  # rank in +Inf
    assert histogram_quantile(0.5, [(2.0, 10.0), (inf, 10.0)]) == 1.0  # first bucket starts at 0
    assert histogram_quantile(0.5, [(inf, 10.0), (1.0, 5.0), (2.0, 10.0)]) == 1.0  # any order
    with pytest.raises(ValueError):
        histogram_quantile(1.5, [(1.0, 1.0), (inf, 1.0)])


# --- the poller without a server: recorded snapshots, windows, export ---------------------


def replayed_poller(window: float = 10.0) -> MetricsPoller:
    poller = MetricsPoller("http://127.0.0.1:9/v1", interval=1.0, window=window, history=10)
    for path, taken_at in ((IDLE, 1000.0), (UNDER_LOAD, 1005.0), (UNDER_LOAD, 1010.0), (IDLE, 1020.0)):
        poller.record(snapshot(path, taken_at))
    return poller


def test_windows_and_series_frame():
    poller = replayed_poller(window=5.0)
    rows = poller.series_frame()
    assert [list(row) for row in rows] == [list(SERIES_COLUMNS)] * 4
    assert [row["time"] for row in rows] == [1000.0, 1005.0, 1010.0, 1020.0]
    generated = value(UNDER_LOAD, "vllm:generation_tokens_total") - value(IDLE, "vllm:generation_tokens_total")
    assert rows[1]["decode_tps"] == pytest.approx(generated / 5)
    assert rows[2]["decode_tps"] == 0  # under load twice: the same counters
    assert rows[2]["running"] == 32 and rows[2]["kv_pct"] == pytest.approx(0.2929776909695758)
    assert rows[3]["spec_acceptance"] is None
    assert poller.latest.counter_reset
    # derive() picks its own window: 10 s back from 1010 starts at the first scrape.
    assert poller.derive(10.0, until=1010.0).generation_tokens == generated
    assert poller.derive(10.0, until=1010.0).window_s == 10.0
    assert [s.taken_at for s in select_window(poller.snapshots(), 7.0)] == [1010.0, 1020.0]
    assert poller.url == "http://127.0.0.1:9/metrics"


def test_snapshots_must_come_in_time_order():
    poller = replayed_poller()
    with pytest.raises(MetricsError, match="time order"):
        poller.record(snapshot(IDLE, 1000.0))


def test_history_is_bounded():
    poller = MetricsPoller("http://127.0.0.1:9", interval=1.0, window=2.0, history=3)
    for i in range(10):
        poller.record(snapshot(IDLE, 1000.0 + i))
    assert len(poller.figures()) == 3 and len(poller.snapshots()) == 4  # window/interval + 2


def test_export_csv_and_json(tmp_path):
    poller = replayed_poller()
    rows = list(csv.DictReader(poller.export_csv(tmp_path / "series.csv").open()))
    assert len(rows) == 4
    assert list(rows[0])[: len(SERIES_COLUMNS)] == list(SERIES_COLUMNS)
    assert float(rows[1]["decode_tps"]) == pytest.approx(poller.figures()[1].decode_tps)
    assert rows[1]["spec_acceptance"] == ""  # None: not reported, not 0
    assert rows[3]["counter_reset"] == "True"
    document = json.loads(poller.export_json(tmp_path / "series.json").read_text())
    assert document["url"] == "http://127.0.0.1:9/metrics" and len(document["figures"]) == 4
    assert document["figures"][1]["ttft"]["count"] == poller.figures()[1].ttft.count
    assert "spec_acceptance_rate" in document["figures"][1]["not_reported"]


# --- bad input --------------------------------------------------------------------------


def test_metrics_url_forms():
    assert metrics_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://127.0.0.1:8000/metrics") == "http://127.0.0.1:8000/metrics"
    # One normaliser for every client: a bare host:port means http, as in chat.
    assert metrics_url("127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    with pytest.raises(WorkbenchError) as caught:
        metrics_url("ftp://127.0.0.1:8000")
    assert "http://127.0.0.1:8000" in caught.value.hint


def test_text_that_is_not_vllm_metrics_is_refused():
    with pytest.raises(MetricsError) as caught:
        parse_metrics("python_info 1\n")
    assert "vllm" in caught.value.message and caught.value.hint
    with pytest.raises(MetricsError, match="not Prometheus text"):
        parse_metrics("vllm:num_requests_running{engine=0 1\n")


def test_poller_settings_are_checked():
    with pytest.raises(MetricsError, match="interval"):
        MetricsPoller("http://127.0.0.1:8000", interval=0)
    with pytest.raises(MetricsError, match="history"):
        MetricsPoller("http://127.0.0.1:8000", history=1)
    with pytest.raises(MetricsError):
        derive_figures([])


def test_unreachable_server_gives_a_clean_message(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(MetricsError) as caught:
        MetricsPoller(url).scrape_once()
    assert "cannot read" in caught.value.message and "the right URL" in caught.value.hint
    assert main(["metrics", "--url", url, "--count", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read") and "Traceback" not in err
    assert "On the command line: --url." in err
