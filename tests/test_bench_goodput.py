"""Goodput as aiperf defines it, the client-bound verdict, and the sweep figures."""

from __future__ import annotations

import re
import time

import pytest

from tests.helpers.fixed_rate_server import FixedRateServer
from tests.test_bench_math import MS, record_from
from workbench.bench import BenchConfig, SweepResult, run_benchmark
from workbench.bench.figures import latency_svg, tradeoff_svg
from workbench.bench.goodput import parse_goodput
from workbench.bench.records import RequestRecord
from workbench.bench.report import format_result, format_sweep
from workbench.bench.summary import Summary, summarize
from workbench.errors import InputError


def test_goodput_names_and_values() -> None:
    assert parse_goodput("ttft:500 tpot:30") == {"time_to_first_token": 500.0, "inter_token_latency": 30.0}
    assert parse_goodput(["e2el:2000", "output_token_throughput_per_user:40"]) == {
        "request_latency": 2000.0, "output_token_throughput_per_user": 40.0}
    with pytest.raises(InputError, match="Unknown goodput metric 'ttlt'"):
        parse_goodput("ttlt:5")
    with pytest.raises(InputError, match="needs a number"):
        parse_goodput("ttft:fast")


def test_a_request_is_good_only_if_it_meets_every_slo() -> None:
    fast = record_from(0, [100, 140, 180], prompt=10, output=3, first_chunk=1)  # TTFT 100, TPOT 40
    slow_start = record_from(0, [300, 310, 320], prompt=10, output=3, first_chunk=1)  # TTFT 300, TPOT 10
    slow_decode = record_from(0, [100, 200, 300], prompt=10, output=3, first_chunk=1)  # TTFT 100, TPOT 100
    one_token = record_from(0, [50], prompt=10, output=1, first_chunk=1)  # no TPOT: not good (aiperf)
    failed = RequestRecord(index=9, start_ns=0, end_ns=5 * MS, error="HTTP 500")
    s = summarize([fast, slow_start, slow_decode, one_token, failed], parse_goodput("ttft:200 tpot:50"))
    g = s.goodput
    assert g.good_requests == 1 and g.requests == 5
    assert g.good_fraction == pytest.approx(1 / 5)  # failures count against it
    assert g.goodput_req_s == pytest.approx(1 / s.duration_s)
    assert Summary.from_dict(s.to_dict()) == s
    rates = summarize([fast], parse_goodput("output_token_throughput_per_user:25")).goodput  # 25 tok/s: 1/40 ms
    assert rates.good_requests == 1


def test_a_lagging_client_marks_its_run_client_bound() -> None:
    def blocking_progress(p) -> None:
        if p.phase == "running" and p.done:
            time.sleep(0.04)  # runs on the client's event loop: every chunk behind it waits

    with FixedRateServer(prefill_rate=0, decode_rate=100) as server:
        config = BenchConfig(url=server.base_url, input_tokens=20, output_tokens=30, concurrency=4, requests=16,
                             goodput=parse_goodput("ttft:1000"))
        lagged = run_benchmark(config, progress=blocking_progress)
    lag = lagged.client_lag
    assert lag.samples > 10 and lag.p99_ms > 10 and lagged.client_bound
    assert lagged.to_dict()["client_bound"] is True and lagged.to_dict()["client_lag"]["p99_ms"] == lag.p99_ms
    assert "CLIENT-BOUND" in format_result(lagged)
    assert "goodput" in format_result(lagged) and lagged.summary.goodput.good_requests == 16
    sweep = SweepResult([lagged], planned=[4])
    assert "CLIENT-BOUND" in format_sweep(sweep)
    assert "client-bound" in tradeoff_svg([lagged])


def test_figures_one_point_per_level_and_grouped_not_stacked_bars() -> None:
    with FixedRateServer(prefill_rate=2000, decode_rate=200) as server:
        result = run_benchmark(BenchConfig(url=server.base_url, input_tokens=60, output_tokens=10, concurrency=2,
                                           requests=4))
    assert tradeoff_svg([result]).count("<circle") == 1  # a one-level run still draws its point
    svg = latency_svg([result])
    bars = re.findall(r'<rect x="([\d.]+)" y="([\d.]+)" width="[\d.]+" height="([\d.]+)" fill="#\w+">'
                      r"<title>(\w+) (p\d+) at concurrency 2: ([\d,.]+) ms", svg)
    assert len(bars) == 9  # TTFT, TPOT, E2E x p50, p90, p99
    for figure in ("TTFT", "TPOT", "E2E"):
        mine = [b for b in bars if b[3] == figure]
        xs = [float(b[0]) for b in mine]
        assert len(set(xs)) == 3  # side by side
        bottoms = {round(float(b[1]) + float(b[2]), 1) for b in mine}
        assert len(bottoms) == 1  # every bar starts at the axis: none stacked on another
