"""Session workloads (multiturn, agentic, trace) against the fixed-rate server, whose
token counting is known: one token per word plus 10 for the template, so a turn's
prompt length says exactly what history the client resent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.fixed_rate_server import TEMPLATE_TOKENS, FixedRateServer
from workbench.bench import BenchConfig, BenchResult, Summary, run_benchmark
from workbench.bench.cache_check import cache_config, session_cache_warnings
from workbench.bench.figures import figures_html, session_rows
from workbench.bench.records import RequestRecord
from workbench.bench.report import format_result, hit_rate_verdict
from workbench.bench.sessions import load_trace
from workbench.bench.summary import summarize
from workbench.errors import WorkbenchError

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.32.0-cpu"


@pytest.fixture(scope="module")
def server():
    with FixedRateServer(decode_rate=1000, first_token_s=0.01) as srv:
        yield srv


def by_session(result: BenchResult) -> dict[int, list[RequestRecord]]:
    sessions: dict[int, list[RequestRecord]] = {}
    for r in result.records:
        sessions.setdefault(r.session, []).append(r)
    return {s: sorted(rs, key=lambda r: r.turn) for s, rs in sessions.items()}


def test_multiturn_resends_the_whole_history_with_the_models_own_answers(server) -> None:
    config = BenchConfig(url=server.base_url, workload="multiturn", sessions=3, turns=4, input_tokens=40,
                         turn_input_tokens=20, turn_output_tokens=[8, 4], warmup_requests=0)
    result = run_benchmark(config)
    assert (result.summary.succeeded, result.summary.errors) == (12, 0)
    assert result.config.concurrency == 3 and result.config.requests == 12
    sessions = by_session(result)
    assert sorted(sessions) == [0, 1, 2]
    for records in sessions.values():
        assert [r.turn for r in records] == [1, 2, 3, 4]
        assert [r.completion_tokens for r in records] == [8, 4, 4, 4]  # per-turn lengths, the last repeating
        assert records[0].prompt_tokens == 40  # exact, counted by /tokenize
        for before, after in zip(records, records[1:]):
            # The whole previous prompt, the model's answer (its words) and 20 new words.
            assert after.prompt_tokens == before.prompt_tokens + before.completion_tokens + 20
    rows = result.summary.per_turn
    assert [row["turn"] for row in rows] == [1, 2, 3, 4]
    assert [row["context_tokens_max"] for row in rows] == [48, 72, 96, 120]
    assert rows[0]["requests"] == 3 and rows[0]["ttft_ms_mean"] > 0
    # No cached_tokens from this server: said so, not shown as 0 %.
    assert result.summary.prefix_cache_hit_rate is None
    assert "not reported" in format_result(result)


def test_agentic_turns_are_short_calls_and_long_tool_results(server) -> None:
    config = BenchConfig(url=server.base_url, workload="agentic", sessions=2, turns=3, input_tokens=30,
                         turn_input_tokens=100, tool_call_tokens=6, warmup_requests=0)
    result = run_benchmark(config)
    for records in by_session(result).values():
        assert [r.completion_tokens for r in records] == [6, 6, 6]
        growth = [b.prompt_tokens - a.prompt_tokens for a, b in zip(records, records[1:])]
        assert growth == [106, 106]  # the call (6) and the tool result (100): a set amount per step


def test_think_time_separates_an_answer_from_the_next_turn(server) -> None:
    config = BenchConfig(url=server.base_url, workload="multiturn", sessions=2, turns=3, input_tokens=30,
                         turn_input_tokens=5, output_tokens=4, think_time_s=0.3, warmup_requests=0)
    result = run_benchmark(config)
    for records in by_session(result).values():
        for before, after in zip(records, records[1:]):
            assert after.start_ns - before.end_ns >= 0.3e9


def write_trace(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_a_trace_replays_sessions_with_their_lengths_and_timing(server, tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl", [
        {"session_id": "a", "timestamp": 0, "input_length": 50, "output_length": 5},
        {"session_id": "b", "timestamp": 400, "input_length": 60, "output_length": 3, "hash_ids": [1, 2]},
        {"session_id": "a", "delay": 200, "input_length": 150, "output_length": 5},
        {"timestamp": 0, "messages": [{"role": "user", "content": "one two three"}], "output_length": 2},
    ])
    result = run_benchmark(BenchConfig(url=server.base_url, workload="trace", trace_file=str(trace),
                                       warmup_requests=0))
    assert result.summary.succeeded == 4 and result.config.requests == 4 and result.config.concurrency == 3
    sessions = by_session(result)
    a, b, verbatim = sessions[0], sessions[1], sessions[2]
    assert [r.prompt_tokens for r in a][0] == 50 and [r.completion_tokens for r in a] == [5, 5]
    # The second turn's whole input is the trace's input_length (less a message's template tokens).
    assert abs(a[1].prompt_tokens - 150) <= 5
    assert a[1].start_ns - a[0].end_ns >= 0.2e9
    assert b[0].start_ns - min(r.start_ns for r in result.records) >= 0.35e9  # its timestamp, 400 ms
    assert verbatim[0].prompt_tokens == 3 + TEMPLATE_TOKENS


@pytest.mark.parametrize("line, says", [
    ("{not json", "line 1 is not JSON"),
    ('{"input_length": 5}', "output_length is missing"),
    ('{"output_length": 5}', "give exactly one of input_length or messages"),
    ('{"input_length": -3, "output_length": 5}', "input_length must be a whole number"),
    ('{"input_length": 5, "output_length": 5, "delay": "soon"}', "delay must be milliseconds"),
    ("[1, 2]", "must be a JSON object"),
])
def test_a_bad_trace_line_is_refused_with_its_line_and_the_format(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(WorkbenchError) as caught:
        load_trace(path)
    assert says in caught.value.message and "bad.jsonl" in caught.value.message
    assert "output_length (required)" in caught.value.hint


def test_cache_warnings_come_from_the_servers_cache_config() -> None:
    labels = cache_config((FIXTURES / "metrics_idle.prom").read_text())
    assert labels is not None and labels["enable_prefix_caching"] == "True"
    assert session_cache_warnings(labels) == []  # prefix caching on, no Mamba layers: nothing to warn of
    off = session_cache_warnings({**labels, "enable_prefix_caching": "False"})
    assert len(off) == 1 and "prefix caching is off" in off[0] and "--enable-prefix-caching" in off[0]
    hybrid = session_cache_warnings({**labels, "mamba_cache_mode": "align"})
    assert len(hybrid) == 1
    assert "prefix-cache-hits-lost-hybrid-align" in hybrid[0]
    assert "https://github.com/vllm-project/vllm/issues/45238" in hybrid[0]
    assert session_cache_warnings(None) == []


def test_a_session_run_against_a_cache_that_cannot_hit_is_warned_about_before_it_starts() -> None:
    heard: list[str] = []
    phases: list[str] = []
    labels = {"enable_prefix_caching": "True", "mamba_cache_mode": "align", "engine": "0"}
    with FixedRateServer(decode_rate=1000, first_token_s=0.01, cache_config_labels=labels) as srv:
        config = BenchConfig(url=srv.base_url, workload="agentic", sessions=2, turns=2, input_tokens=30,
                             warmup_requests=0)
        result = run_benchmark(config, progress=lambda p: phases.append(p.phase),
                               on_warning=lambda w: heard.append(f"{w} (heard in phase {phases[-1]})"))
    assert len(heard) == 1 and "mamba_cache_mode=align" in heard[0]
    assert "vllm/issues/45238" in heard[0] and "(heard in phase connecting)" in heard[0]  # before any request
    assert result.notes[0].startswith("WARNING: this server runs a hybrid (Mamba) model")
    assert "WARNING: this server runs a hybrid" in format_result(result)


def record(session: int, turn: int, prompt: int, cached: int | None) -> RequestRecord:
    r = RequestRecord(index=turn, start_ns=0, end_ns=3_000_000, event_ns=[1_000_000, 2_000_000, 2_500_000],
                      event_kinds="ccu", prompt_tokens=prompt, completion_tokens=2, session=session, turn=turn,
                      cached_tokens=cached)
    return r


def test_hit_rates_per_turn_and_the_verdict_on_agreement() -> None:
    records = [record(0, 1, 200, 0), record(0, 2, 300, 128), record(1, 1, 200, 0), record(1, 2, 300, 256)]
    summary = summarize(records)
    assert summary.prefix_cache_hit_rate == pytest.approx(384 / 1000)
    assert [row["cache_hit_rate"] for row in summary.per_turn] == [0.0, pytest.approx(384 / 600)]
    assert [row["cached_tokens_mean"] for row in summary.per_turn] == [0.0, 192.0]
    assert "agree within 2 points" in hit_rate_verdict(0.384, 0.39)
    assert "DISAGREE by 10.0 points" in hit_rate_verdict(0.384, 0.484)
    # A summary saved before these fields existed still loads.
    old = summary.to_dict()
    for key in ("prefix_cache_hit_rate", "prefix_cache_hit_rate_metrics", "per_turn"):
        del old[key]
    assert Summary.from_dict(old).per_turn is None


def test_session_figures_draw_one_line_per_configuration(server) -> None:
    config = BenchConfig(url=server.base_url, workload="multiturn", sessions=2, turns=3, input_tokens=30,
                         output_tokens=4, warmup_requests=0, label="c1")
    result = run_benchmark(config)
    rows = session_rows([result])
    assert {r["figure"] for r in rows} == {"TTFT mean (ms)", "context reached (tokens)"}  # no hit rates reported
    page = figures_html([result])
    assert "Session workload by turn" in page and "c1, turn 3" in page
    text = format_result(result)
    assert "workload multiturn: 2 sessions x 3 turns" in text and "turn 3 against turn 1: TTFT" in text


def test_sessions_that_would_outgrow_the_context_are_refused_before_sending(server) -> None:
    # The fixed-rate server's max-model-len is 4096: 12 turns adding ~400 tokens each do not fit.
    config = BenchConfig(url=server.base_url, workload="multiturn", sessions=2, turns=12, input_tokens=100,
                         turn_input_tokens=400, warmup_requests=0)
    seen = len(server.timings)
    with pytest.raises(WorkbenchError) as caught:
        run_benchmark(config)
    assert "past this server's max-model-len of 4096" in caught.value.message and "fewer turns" in caught.value.hint
    assert {"turns", "turn_input_tokens"} <= set(caught.value.settings)
    assert len(server.timings) == seen  # nothing was sent


def test_bad_session_settings_say_what_to_change() -> None:
    with pytest.raises(WorkbenchError) as caught:
        BenchConfig(url="http://127.0.0.1:1", workload="chatty")
    assert "workload must be one of single, multiturn, agentic, trace" in caught.value.message
    with pytest.raises(WorkbenchError) as caught:
        BenchConfig(url="http://127.0.0.1:1", workload="trace")
    assert "needs a trace file" in caught.value.message and "trace_file" in caught.value.settings
    with pytest.raises(WorkbenchError) as caught:
        BenchConfig(url="http://127.0.0.1:1", workload="multiturn", sessions=0, turn_output_tokens=[0],
                    think_time_s=float("nan"))
    for says in ("session count", "per-turn output length", "think time"):
        assert says in caught.value.message
    assert set(caught.value.settings) == {"sessions", "turn_output_tokens", "think_time_s"}
